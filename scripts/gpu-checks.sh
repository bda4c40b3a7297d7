#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and a build (scripts/build.sh): the GPU
# tests, compute-sanitizer memcheck and racecheck on reduced sizes, and the
# kernel, engine and staging-copy benchmarks. Logs go to LOG_DIR (default
# /tmp) too.
#   scripts/gpu-checks.sh [tests|sanitize|bench]...   (all three by default)
#   BUILD=build-other scripts/gpu-checks.sh bench
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
logs=${LOG_DIR:-/tmp}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests sanitize bench)
kernel_tests=$build/tests/gpu/tally_gpu_tests
engine_tests=$build/tests/gpu/tally_engine_gpu_tests
segmented_tests=$build/tests/gpu/tally_segmented_gpu_tests
masks_tests=$build/tests/gpu/tally_masks_gpu_tests
fold_tests=$build/tests/gpu/tally_fold_gpu_tests
rc=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
for step in "${steps[@]}"; do
  case $step in
    tests)
      for t in "$kernel_tests" "$segmented_tests" "$masks_tests" "$fold_tests" "$engine_tests"; do
        "$t" --gtest_brief=1 2>&1 | tee "$logs/$(basename "$t").log" || rc=1
      done ;;
    sanitize)
      for tool in memcheck racecheck; do
        for t in "$kernel_tests" "$masks_tests" "$fold_tests"; do
          TALLY_GPU_TEST_SMALL=1 compute-sanitizer --tool "$tool" --error-exitcode 3 \
            "$t" --gtest_brief=1 --gtest_filter="${SANITIZE_FILTER:-*}" \
            > "$logs/sanitize-$tool-$(basename "$t").log" 2>&1 || rc=1
          tail -n 5 "$logs/sanitize-$tool-$(basename "$t").log"
        done
      done ;;
    bench)
      "$build/kernels/src/tally-kernel-bench" 2>&1 | tee "$logs/kernel-bench.log" || rc=1
      "$build/bench/engine/tally-engine-bench" 2>&1 | tee "$logs/engine-bench.log" || rc=1
      "$build/bench/engine/tally-staging-copy-bench" 2>&1 | tee "$logs/staging-copy-bench.log" || rc=1
      "$build/bench/engine/tally-groupby-kernel-bench" 2>&1 | tee "$logs/groupby-kernel-bench.log" || rc=1 ;;
    *) echo "unknown step '$step' (tests, sanitize, bench)" >&2; exit 2 ;;
  esac
done
exit $rc
