#!/usr/bin/env bash
# Configures and builds tally into build/ (CUDA too when nvcc is installed),
# or into TALLY_BUILD_DIR.
# Extra arguments go to the CMake configure step, e.g. -DTALLY_ENABLE_CUDA=OFF.
# TALLY_TARGETS (space-separated) builds only those targets and what they
# need, e.g. TALLY_TARGETS="tally-server tally" for the server and the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TALLY_BUILD_DIR:-build}
# Ninja where installed, for a new build directory (one made before keeps
# its generator): it starts a target's compiles before the libraries it
# links are done, so both cores stay busy while the CUDA kernels build.
generator=()
if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${TALLY_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
