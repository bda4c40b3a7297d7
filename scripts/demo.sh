#!/usr/bin/env bash
# Installs what tally needs, builds it, starts a server on the default
# backend (the GPU if there is one, else the CPU), aggregates a sample array
# against it, prints the results, and stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The server and the CLI only: the test suite is scripts/test.sh's to build.
# Without a GPU the CUDA kernels could not run here, and they are most of
# the build (about 23 minutes of one core): build the CPU backend alone, in
# a directory of its own so that build/ keeps the full configuration.
export TALLY_TARGETS="tally-server tally"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  build=build
  scripts/build.sh
else
  build=build-cpu
  echo "demo: no NVIDIA GPU here, so the CPU backend alone is built (into $build/)"
  TALLY_BUILD_DIR=$build scripts/build.sh -DTALLY_ENABLE_CUDA=OFF
fi

port=${TALLY_DEMO_PORT:-50051}
log=$(mktemp)
"$build"/server/tally-server --listen=127.0.0.1:"$port" --metrics_listen= >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true; rm -f "$log"' EXIT

# Wait until the server answers its health check.
for _ in $(seq 1 50); do
  if "$build"/client/tally health --target=127.0.0.1:"$port" >/dev/null 2>&1; then break; fi
  sleep 0.2
done
head -n 5 "$log"
echo
echo "\$ tally aggregate --random=10000000 --ops=sum,min,max,mean,std,argmax,hist:8:-1:1"
"$build"/client/tally aggregate --target=127.0.0.1:"$port" --random=10000000 --seed=1 \
  --ops=sum,min,max,mean,std,argmax,hist:8:-1:1
