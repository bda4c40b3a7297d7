#!/usr/bin/env bash
# Installs what tally needs, builds it, and runs the whole test suite.
# GPU tests skip, saying so, on machines without a GPU. Then each fuzzer runs
# briefly (TALLY_FUZZ_SECONDS per harness, 15 by default; 0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh "$@"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
if [ "${TALLY_FUZZ_SECONDS:-15}" != 0 ]; then scripts/fuzz.sh "${TALLY_FUZZ_SECONDS:-15}"; fi
