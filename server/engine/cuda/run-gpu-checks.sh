#!/usr/bin/env bash
# Builds and runs the CUDA engine's GPU tests (tests/gpu/engine_*) and its
# in-process benchmark on a host with a GPU. Works before tests/gpu and
# bench/ include them: a CMAKE_PROJECT_INCLUDE hook adds them (each
# .cmake file skips itself when its target already exists).
#   server/engine/cuda/run-gpu-checks.sh [build dir, default build-engine-gpu]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-$root/build-engine-gpu}
mkdir -p "$build"
hook="$build/engine-checks-hook.cmake"
cat > "$hook" <<HOOK
cmake_language(DEFER CALL include "$root/tests/gpu/engine.cmake")
cmake_language(DEFER CALL include "$root/bench/engine/CMakeLists.txt")
HOOK
nvidia-smi -L || echo "nvidia-smi: no GPU listed; the tests will skip"
cmake -S "$root" -B "$build" -DTALLY_BUILD_BENCHMARKS=OFF -DCMAKE_PROJECT_INCLUDE="$hook"
cmake --build "$build" -j"$(nproc)" --target tally_engine_gpu_tests tally-engine-bench tally-server
tests=$(find "$build" -name tally_engine_gpu_tests -type f -perm -u+x | head -1)
bench=$(find "$build" -name tally-engine-bench -type f -perm -u+x | head -1)
"$tests" --gtest_color=no
"$bench" 4 4
