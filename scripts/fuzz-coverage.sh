#!/usr/bin/env bash
# Line coverage of the code the fuzzers test, reached by their corpora: the
# committed seeds plus what scripts/fuzz.sh runs left in build-fuzz/corpus/.
# Builds the harnesses with clang's source-based coverage in build-fuzz-cov,
# runs every corpus input once, and prints llvm-cov's report for the files
# under test, by file and by function (docs/fuzzing.md).
# Usage: scripts/fuzz-coverage.sh [CORPUS_ROOT]   (default build-fuzz/corpus)
set -euo pipefail
cd "$(dirname "$0")/.."
found="${1:-build-fuzz/corpus}"
build=build-fuzz-cov
harnesses=(raw_aggregate_request raw_stream_request plan npy_header)

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DTALLY_ENABLE_CUDA=OFF -DTALLY_BUILD_TESTS=OFF \
  -DTALLY_BUILD_BENCHMARKS=OFF -DTALLY_BUILD_FUZZERS=ON -DTALLY_FUZZ_COVERAGE=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target tally_fuzzers >/dev/null

rm -rf "$build/profiles"
mkdir -p "$build/profiles"
objects=()
for harness in "${harnesses[@]}"; do
  dirs=("tests/fuzz/corpus/$harness")
  if [ -d "$found/$harness" ]; then dirs+=("$found/$harness"); fi
  # -runs=0: read (and so run) every corpus input once, then stop.
  LLVM_PROFILE_FILE="$build/profiles/$harness.profraw" ASAN_OPTIONS=detect_leaks=0 \
    "$build/tests/fuzz/tally_fuzz_$harness" -runs=0 "${dirs[@]}" 2>&1 | grep -E "INITED|DONE" || true
  objects+=(-object "$build/tests/fuzz/tally_fuzz_$harness")
done
llvm-profdata-14 merge -sparse "$build"/profiles/*.profraw -o "$build/profiles/all.profdata"
sources=(server/frontend/raw_message.cc server/frontend/convert.cc server/core/validate.cc client/src/npy.cc)
llvm-cov-14 report "${objects[@]:1}" -instr-profile="$build/profiles/all.profdata" "${sources[@]}"
llvm-cov-14 report --show-functions "${objects[@]:1}" -instr-profile="$build/profiles/all.profdata" "${sources[@]}"
