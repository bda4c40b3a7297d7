#!/usr/bin/env bash
# The idle-stream attack, measured against tally-server as it was
# at BEFORE_COMMIT and as it is in this checkout, in one run: each server is
# started on the CPU backend with its default flags, and tally_hostile_bench
# measures a well-behaved client alone and under 64 streams that announce
# 1 GiB and send nothing more (then the same with streams that trickle a
# byte every 100 ms). Figures: docs/performance.md.
# Usage: tests/integration/idle_attack_before_after.sh BEFORE_COMMIT [BUILD_DIR]
#   BUILD_DIR  this checkout's build (default build), with tally-server and
#              tally_hostile_bench built
set -euo pipefail
cd "$(dirname "$0")/../.."
before="${1:?usage: $0 BEFORE_COMMIT [BUILD_DIR]}"
build="${2:-build}"
work="$(mktemp -d)"
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building tally-server at $before"
git archive "$before" | tar -x -C "$work"
cmake -S "$work" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DTALLY_ENABLE_CUDA=OFF -DTALLY_BUILD_TESTS=OFF \
  -DTALLY_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$work/build" -j"$(nproc)" --target tally-server >/dev/null

# Starts a server on a free port; sets port and server_pid.
start_server() {
  local log="$work/server-$RANDOM.log"
  "$1" --backend=cpu --listen=127.0.0.1:0 --metrics_listen= >"$log" 2>&1 &
  server_pid=$!
  servers+=("$server_pid")
  for _ in $(seq 100); do
    port="$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log" | head -n1)"
    if [ -n "$port" ]; then return; fi
    sleep 0.1
  done
  echo "the server did not start: $(cat "$log")" >&2
  exit 1
}

for side in before after; do
  if [ "$side" = before ]; then server="$work/build/server/tally-server"; else server="$build/server/tally-server"; fi
  for attack in idle trickle; do
    start_server "$server"
    if [ "$side" = before ]; then commit="$(git rev-parse --short "$before")"; else commit="$(git rev-parse --short HEAD)"; fi
    echo "== $side (commit $commit), attack: $attack"
    "$build/tests/integration/tally_hostile_bench" --target="127.0.0.1:$port" --attack="$attack"
    kill "$server_pid"
    wait "$server_pid" 2>/dev/null || true
  done
done
