#!/usr/bin/env bash
# Installs what tally needs, builds it, and runs the whole test suite.
# GPU tests skip, saying so, on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh "$@"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
