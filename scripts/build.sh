#!/usr/bin/env bash
# Configures and builds tally into build/ (CUDA too when nvcc is installed).
# Extra arguments go to the CMake configure step, e.g. -DTALLY_ENABLE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
