#!/usr/bin/env bash
# Runs the GPU test suite, compute-sanitizer (memcheck + racecheck, reduced
# sizes) and the kernel benchmark on the GPU host, from a bundle made here by
#   cmake --build build-gpu -j2 --target tally_gpu_tests tally-kernel-bench
#   /work/shared/tools/bundle-for-gpu-host .gpu build-gpu/tests/gpu/tally_gpu_tests \
#       build-gpu/kernels/src/tally-kernel-bench
#   cp kernels/bench/run-on-gpu-host.sh .gpu/
# then on the host: .gpu/run-on-gpu-host.sh [tests|sanitize|bench]... (all three by default).
# Logs go to $OUT (or /tmp) as well as stdout.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests sanitize bench)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rc=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
for step in "${steps[@]}"; do
  case $step in
    tests)
      "$here/bin/tally_gpu_tests" --gtest_brief=1 2>&1 | tee "$out/tests.log" || rc=1 ;;
    sanitize)
      for tool in memcheck racecheck; do
        TALLY_GPU_TEST_SMALL=1 compute-sanitizer --tool $tool --error-exitcode 3 \
          "$here/bin/tally_gpu_tests" --gtest_brief=1 \
          --gtest_filter="${SANITIZE_FILTER:-*}" 2>&1 | tail -n 25 | tee "$out/sanitize-$tool.log" || rc=1
      done ;;
    bench)
      "$here/bin/tally-kernel-bench" 2>&1 | tee "$out/bench.log" || rc=1 ;;
  esac
done
exit $rc
