#!/usr/bin/env bash
# Builds the peer the benchmarks and dev-time oracles compare against: llama.cpp natively (-DGGML_NATIVE=ON) from
# the source the llama-cpp-python sdist on PyPI carries under vendor/llama.cpp (not the AVX2-only wheel).
# Usage: tools/bench/build_llama_cpp.sh [DIR]    (default build/llama.cpp-native; prints the bin folder)
# SY_PEER_AMX=OFF compiles AMX out where its path crashes (the benchmarks say so when they use it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/build/llama.cpp-native}
version=${SY_PEER_VERSION:-0.3.36}
mkdir -p "$dir"
if [[ ! -d "$dir/src/vendor/llama.cpp" ]]; then
  pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$version" -d "$dir/sdist" >&2
  mkdir -p "$dir/src"
  tar -xzf "$dir"/sdist/llama_cpp_python-"$version".tar.gz -C "$dir/src" --strip-components=1
fi
amx=()
[[ "${SY_PEER_AMX:-ON}" == OFF ]] && amx=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
cmake -S "$dir/src/vendor/llama.cpp" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF "${amx[@]}" >&2
cmake --build "$dir/build" -j "${SY_PEER_JOBS:-$(nproc)}" \
  --target test-gbnf-validator llama-bench llama-server llama-tokenize >&2
echo "$dir/build/bin"
