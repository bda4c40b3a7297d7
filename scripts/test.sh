#!/usr/bin/env bash
# Installs what tally needs, builds it, and runs the whole test suite.
# GPU tests skip, saying so, on machines without a GPU. Then each fuzzer runs
# briefly (TALLY_FUZZ_SECONDS per harness, 15 by default; 0 skips them).
# A new build directory on a machine without a GPU compiles the CUDA kernels
# to unoptimised PTX only (-DTALLY_KERNEL_SASS=OFF -DTALLY_KERNEL_OPTIMIZE=OFF):
# every kernel still compiles, and none runs here, so their machine code and
# optimisation would only cost time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir=${TALLY_BUILD_DIR:-build}
configure=()
gpus=$(nvidia-smi -L 2>/dev/null || true)
if [ ! -f "$dir/CMakeCache.txt" ] && [[ "$gpus" != *GPU* ]]; then
  configure+=(-DTALLY_KERNEL_SASS=OFF -DTALLY_KERNEL_OPTIMIZE=OFF)
fi
scripts/build.sh "${configure[@]}" "$@"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 600
if [ "${TALLY_FUZZ_SECONDS:-15}" != 0 ]; then scripts/fuzz.sh "${TALLY_FUZZ_SECONDS:-15}"; fi
