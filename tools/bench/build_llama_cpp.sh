#!/usr/bin/env bash
# Builds the peer the benchmarks and dev-time oracles compare against: llama.cpp natively (-DGGML_NATIVE=ON) from
# the source the llama-cpp-python sdist on PyPI carries under vendor/llama.cpp (not the AVX2-only wheel).
# Usage: tools/bench/build_llama_cpp.sh [DIR]    (default build/llama.cpp-native; prints the bin folder)
# AMX is compiled out by default: with GGML_NATIVE on an AMX machine, ggml's AMX matrix product segfaults
# (ggml_backend_amx_mul_mat, seen with 0.3.36 on a Xeon KVM guest), and GGML_AMX_* alone do not turn it off under
# -march=native. SY_PEER_AMX=ON keeps it. docs/benchmarks.md says which peer each figure comes from.
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
if [[ "${SY_PEER_AMX:-OFF}" == OFF ]]; then
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  amx=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx")
fi
build=${SY_PEER_BUILD_DIR:-$dir/build}
cmake -S "$dir/src/vendor/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF "${amx[@]}" >&2
cmake --build "$build" -j "${SY_PEER_JOBS:-$(nproc)}" \
  --target test-gbnf-validator llama-bench llama-server llama-tokenize >&2
echo "$build/bin"
