#!/usr/bin/env bash
# Builds tally's libFuzzer harnesses with clang, ASan and UBSan in their own
# build directory, and runs each for a bounded time (docs/fuzzing.md).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_HARNESS] [HARNESS...]
#   SECONDS_PER_HARNESS  default 15 (scripts/test.sh runs this on every
#                        submission; the harnesses run one per core, so on
#                        2 cores the four take about 30 s)
#   HARNESS              raw_aggregate_request raw_stream_request plan
#                        npy_header (default: all)
# Environment:
#   TALLY_FUZZ_RUNS=N      run N inputs per harness instead of for a time
#   TALLY_FUZZ_BUILD=DIR   build directory (default build-fuzz)
#   TALLY_FUZZ_FLAGS=...   extra libFuzzer flags (e.g. -print_coverage=1)
#
# The committed seeds in tests/fuzz/corpus/<harness>/ are read, never
# written; what a run discovers goes to $TALLY_FUZZ_BUILD/corpus/<harness>/
# and is reused by the next run. A crash, leak, timeout or sanitizer report
# fails the script and leaves the input in $TALLY_FUZZ_BUILD/artifacts/; add
# it to the harness's corpus directory once fixed, so ctest replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-15}"
shift || true
harnesses=("$@")
if [ "${#harnesses[@]}" -eq 0 ]; then
  harnesses=(raw_aggregate_request raw_stream_request plan npy_header)
fi
build="${TALLY_FUZZ_BUILD:-build-fuzz}"
if [ -n "${TALLY_FUZZ_RUNS:-}" ]; then
  budget=(-runs="$TALLY_FUZZ_RUNS")
elif ! [ "$seconds" -gt 0 ] 2>/dev/null; then
  # libFuzzer reads -max_total_time=0 as "no limit".
  echo "fuzz.sh: SECONDS_PER_HARNESS must be a whole number above 0, got '$seconds'" >&2
  exit 2
else
  budget=(-max_total_time="$seconds")
fi

CC="${CC_FUZZ:-clang-14}"
CXX="${CXX_FUZZ:-clang++-14}"
if ! command -v "$CXX" >/dev/null; then
  echo "fuzz.sh: $CXX not found; scripts/install-deps.sh installs clang-14 and libfuzzer-14-dev" >&2
  exit 1
fi

# Tests and benchmarks off: only the harnesses and what they link are built.
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$CC" \
  -DCMAKE_CXX_COMPILER="$CXX" -DTALLY_ENABLE_CUDA=OFF -DTALLY_BUILD_TESTS=OFF \
  -DTALLY_BUILD_BENCHMARKS=OFF -DTALLY_BUILD_FUZZERS=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target tally_fuzzers

# Leaks are checked; a report stops the run with a stack that names the line.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# clang 14's ASan cannot place its shadow memory where kernels that
# randomize mmap with more than 28 bits (vm.mmap_rnd_bits, 32 on some recent
# kernels) put libraries: there the fuzzers run without randomization.
run=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ] && setarch "$(uname -m)" -R true 2>/dev/null; then
  run=(setarch "$(uname -m)" -R)
fi

for harness in "${harnesses[@]}"; do
  if [ ! -d "tests/fuzz/corpus/$harness" ]; then
    echo "fuzz.sh: no harness '$harness' (no tests/fuzz/corpus/$harness)" >&2
    exit 2
  fi
done

# One harness: its log in $build/<harness>.log, its status the fuzzer's.
fuzz_one() {
  local harness=$1 corpus="$build/corpus/$1" artifacts="$build/artifacts/$1/"
  mkdir -p "$corpus" "$artifacts"
  # -timeout: an input that takes over 10 s is a hang; -rss_limit_mb: one
  # that needs over 2 GiB is a bug too (a real request's parse needs little).
  # shellcheck disable=SC2086
  "${run[@]}" "$build/tests/fuzz/tally_fuzz_$harness" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts" ${TALLY_FUZZ_FLAGS:-} "$corpus" "tests/fuzz/corpus/$harness" \
    2>"$build/$harness.log"
}

# The harnesses run side by side, one per core (each is one process on one
# core): on 2 cores the four take two rounds of SECONDS_PER_HARNESS, not four.
jobs_max=$(nproc)
declare -A pid_of
for harness in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  echo "fuzz.sh: $harness (${budget[*]})"
  fuzz_one "$harness" &
  pid_of[$harness]=$!
done
failed=0
for harness in "${harnesses[@]}"; do
  if ! wait "${pid_of[$harness]}"; then
    tail -n 60 "$build/$harness.log" >&2
    echo "fuzz.sh: $harness FAILED; the input is in $build/artifacts/$harness/ (log: $build/$harness.log)" >&2
    failed=1
    continue
  fi
  echo "fuzz.sh: $harness:"
  grep -E '^stat::number_of_executed_units|^Done|^#[0-9]+.*DONE' "$build/$harness.log" | sed "s/^/  /" || true
done
[ "$failed" = 0 ] || exit 1
echo "fuzz.sh: ${#harnesses[@]} harness(es), no crash"
