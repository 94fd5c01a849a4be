#!/usr/bin/env bash
# tools/gpu-check.sh — everything that needs an NVIDIA GPU, in one go (under 8 minutes on an H100/H200):
#   1. configure and build the lfm2-cuda plugin, its tests and the benchmark (Release, all cores);
#   2. run the GPU test label (ctest -L gpu): every kernel against a CPU reference, the whole model against
#      transformers' logits on tests/fixtures/hf/lfm2-f32, snapshots of its state (save, restore, continue), plus
#      the lfm2 tests that need no GPU;
#   3. benchmark LFM2-1.2B-shaped synthetic BF16 weights: decode ms/token at batch 1 against the memory-bandwidth
#      floor, aggregate tok/s at batch 1, 8, 64, prefill tok/s at 512 and 4096 tokens;
# and prints a short summary table last. Exit status: non-zero when a step failed.
#
#   tools/gpu-check.sh [BUILD_DIR]        (default: build-gpu in the checkout)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-gpu}"
JOBS="$(nproc 2>/dev/null || echo 4)"
declare -a SUMMARY=()
STATUS=0

step() { # step NAME TIMEOUT_S COMMAND...
    local name="$1" limit="$2"
    shift 2
    echo "==> $name"
    local t0=$SECONDS rc=0
    timeout "$limit" "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then
        SUMMARY+=("$(printf '%-34s ok      %4ds' "$name" $((SECONDS - t0)))")
        return 0
    fi
    SUMMARY+=("$(printf '%-34s FAILED  %4ds (exit %d)' "$name" $((SECONDS - t0)) "$rc")")
    STATUS=1
    return "$rc"
}

echo "==> GPU"
if ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; then
    echo "gpu-check: no NVIDIA GPU visible (nvidia-smi failed)" >&2
    exit 1
fi

GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
step "configure" 120 cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release || exit 1
if [ ! -d "$BUILD/plugins/lfm2-cuda" ]; then
    echo "gpu-check: CMake did not configure lfm2-cuda (no nvcc or cuBLASLt found)" >&2
    exit 1
fi
step "build" 300 cmake --build "$BUILD" -j "$JOBS" --target gguf-quant lfm2-cuda lfm2-cpu lfm2-cuda-plugin \
    lfm2-cuda-model lfm2-cuda-kernels lfm2-cuda-state lfm2-cuda-bench || exit 1

# Skipped tests count as failures here: on this machine they must run.
GPU_TESTS_OUT="$BUILD/gpu-tests.txt"
step "tests (ctest -L gpu)" 240 bash -c "set -o pipefail; ctest --test-dir '$BUILD' -L gpu --output-on-failure \
    --no-tests=error --timeout 200 | tee '$GPU_TESTS_OUT'"
if grep -q "Skipped" "$GPU_TESTS_OUT" 2>/dev/null; then
    SUMMARY+=("GPU tests were SKIPPED (no usable GPU?): see $GPU_TESTS_OUT")
    STATUS=1
fi
step "tests (ctest -L lfm2)" 120 ctest --test-dir "$BUILD" -L lfm2 -LE gpu --output-on-failure --timeout 100

BENCH_OUT="$BUILD/lfm2-cuda-bench.txt"
step "benchmark (LFM2-1.2B shape)" 180 \
    bash -c "set -o pipefail; '$BUILD/tests/lfm2-cuda-bench' --config '$ROOT/tests/fixtures/lfm2/lfm2-1.2b-config.json' \
             --plugin-dir '$BUILD/plugins' | tee '$BENCH_OUT'"

echo
echo "==================== gpu-check summary ===================="
for line in "${SUMMARY[@]}"; do echo "  $line"; done
if [ -s "$BENCH_OUT" ]; then
    echo "-----------------------------------------------------------"
    sed -n '/^lfm2-cuda on/,$p' "$BENCH_OUT"
fi
echo "==========================================================="
exit "$STATUS"
