#!/usr/bin/env bash
# On a host with several NVIDIA GPUs and a build (scripts/build.sh): what
# running tally across the GPUs must show, step by step, each step's log in
# LOG_DIR (default /tmp/tally-multi-gpu) and a summary on stdout.
#
#   tests    every GPU test executable with every GPU visible, then with
#            each GPU alone
#   soak     one server owning every GPU: 64 clients, 1 KiB to 256 MiB,
#            --verify, for DURATION seconds; RSS every 5 s and each GPU's
#            host-to-device bytes and kernel time from its metrics
#   streams  16 streaming clients of 1 GiB in one bench process per GPU: one
#            server on every GPU, then one server per GPU, GB/s of each;
#            first with the null backend (the transport's own ratio)
#   sharded  a 4 GiB resident dataset in one shard per GPU against the same
#            dataset on GPU 0 alone: the scan rate of each (query time is
#            its inverse), and on the first two GPUs where there are more
#   concurrent  64 clients over resident 1 GiB and 4 GiB datasets (the
#            server's default sharding), --verify: one server on GPU 0,
#            then on the first two GPUs, then on every GPU, GB/s of each
#            against N times the one-GPU rate; then every GPU with each
#            dataset whole on one of them (--dataset_shards=1)
#   lose     a server owning every GPU loses the last one mid-load
#            (--fault_lose_gpu): the requests must all be right, the other
#            GPUs serve, and health names the lost one
#   dask     tests/python/tally_dask_test.py with one server per GPU (needs
#            python3's dask and distributed)
#
# usage: scripts/multi-gpu-checks.sh [STEP...]   (all seven by default)
# env:   BUILD (build), LOG_DIR, DURATION (soak seconds, 60),
#        STREAM_SECONDS (20), PYTHONPATH for the dask step (default: the
#        build's Python package and tests/python)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${BUILD:-build}
logs=${LOG_DIR:-/tmp/tally-multi-gpu}
duration=${DURATION:-60}
stream_seconds=${STREAM_SECONDS:-20}
server=$build/server/tally-server
tally=$build/client/tally
mkdir -p "$logs"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests soak streams sharded concurrent lose dask)

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -lt 1 ]; then
  echo "multi-gpu-checks: no NVIDIA GPU visible (nvidia-smi -L)" >&2
  exit 2
fi
[ "$gpus" -lt 2 ] && echo "multi-gpu-checks: only $gpus GPU: every step runs, but across one GPU"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
git rev-parse --short HEAD 2>/dev/null || true
rc=0
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

port=50600
# start NAME FLAGS...: a cuda server on the next free pair of ports; sets
# $target, $metrics and $spid, and waits until its health is SERVING.
start() {
  local name=$1; shift
  port=$((port + 2))
  target=127.0.0.1:$port
  metrics=127.0.0.1:$((port + 1))
  "$server" --backend=cuda --listen="$target" --metrics_listen="$metrics" "$@" > "$logs/server-$name.log" 2>&1 &
  spid=$!
  pids+=("$spid")
  for _ in $(seq 100); do
    "$tally" health --target="$target" --timeout=1 > /dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "server $name did not become SERVING; see $logs/server-$name.log" >&2
  return 1
}
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
# faults PID: the process's minor page faults so far (/proc/PID/stat field
# 10): a receive path that maps fresh pages for every message shows here.
faults() { awk '{print $10}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# metric NAME: the server's series of that name, one line each.
metric() {
  python3 -c "import sys, urllib.request as u
for l in u.urlopen('http://$metrics/metrics').read().decode().splitlines():
    if l.startswith(sys.argv[1]): print(l)" "$1"
}
# rss PID SECONDS FILE: the resident set every 5 s.
rss() {
  for _ in $(seq 0 5 "$2"); do
    awk '/VmRSS/ {printf "%.2f GB\n", $2 / 1048576}' "/proc/$1/status" 2>/dev/null >> "$3"
    sleep 5
  done
}
# A bench's JSON (--json): its GB/s, or 0 when it printed none (then the
# file holds the error).
gbps() {
  python3 -c "import json, sys
try: print(json.load(open(sys.argv[1]))['gb_per_s'])
except Exception: print(0)" "$1"
}
# One line of a bench's JSON: requests ok, failed and wrong, GB/s, p50/p99,
# and the first failure; the file's own text when it is not JSON.
summary() {
  python3 -c "import json, sys
try: j = json.load(open(sys.argv[1]))
except Exception: print(sys.argv[1] + ': ' + open(sys.argv[1]).read()[-400:]); sys.exit()
r, l = j['requests'], j['latency_seconds']
wrong = f\", {r['wrong']} wrong\" if 'wrong' in r else ''  # only with --verify
print(f\"{sys.argv[1].split('/')[-1]}: {r['ok']} ok, {r['failed']} failed{wrong}, {j['gb_per_s']:.2f} GB/s, \"
      f\"p50 {l['p50'] * 1e3:.1f} ms, p99 {l['p99'] * 1e3:.1f} ms {j.get('failures') or ''}\")" "$1"
}

for step in "${steps[@]}"; do
  echo "== $step"
  case $step in
    tests)
      # Every GPU visible first; then each GPU alone, the GPUs side by side
      # (one round per GPU at once: they share no device, and one after
      # another they take minutes each).
      suites=$(ls "$build/tests/gpu" | grep -E '^tally_([a-z_]+_)?gpu_tests?$')
      suite_round() {  # VISIBLE: every suite with those GPUs visible, in turn
        local fail=0
        for t in $suites; do
          CUDA_VISIBLE_DEVICES=$1 TALLY_GPU_TEST_SMALL=1 "$build/tests/gpu/$t" --gtest_brief=1 \
            > "$logs/$t-gpus-${1//,/_}.log" 2>&1 || fail=1
        done
        return $fail
      }
      suite_round "$(seq -s, 0 $((gpus - 1)))" || rc=1
      round_pids=()
      for d in $(seq 0 $((gpus - 1))); do
        suite_round "$d" &
        round_pids+=($!)
      done
      for p in "${round_pids[@]}"; do wait "$p" || rc=1; done
      for visible in "$(seq -s, 0 $((gpus - 1)))" $(seq 0 $((gpus - 1))); do
        for t in $suites; do
          log="$logs/$t-gpus-${visible//,/_}.log"
          echo "CUDA_VISIBLE_DEVICES=$visible $t: $(grep -E '^\[  (PASSED|FAILED)' "$log" | tr '\n' ' ')"
        done
      done ;;
    soak)
      start soak || { rc=1; continue; }
      rss "$spid" "$duration" "$logs/soak-rss.txt" &
      "$tally" bench --target="$target" --sizes=1Ki:256Mi --clients=64 --duration="$duration" \
        --ops=sum,min,max,argmax,hist:4096:-1:1 --verify --json > "$logs/soak.json" 2>&1 || rc=1
      wait $!
      summary "$logs/soak.json"
      echo "RSS every 5 s: $(tr '\n' ' ' < "$logs/soak-rss.txt")"
      metric tally_host_to_device_bytes_total
      metric tally_kernel_seconds_total
      stop "$spid" ;;
    streams)
      # The same client processes in both shapes (one bench of 16/N clients
      # per GPU), so the comparison is of the servers: one bench process
      # with 16 streams is itself a ceiling (its own receive and send).
      # The null backend first: the transport's own ratio, no GPU work.
      for backend in null cuda; do
        bench_pids=()
        start "streams-$backend-all" --backend=$backend || { rc=1; continue; }
        faults_before=$(faults "$spid")
        for d in $(seq 0 $((gpus - 1))); do
          "$tally" bench --target="$target" --clients=$((16 / gpus)) --size=1Gi --mode=stream \
            --duration="$stream_seconds" --ops=sum,max,hist:256:-1:1 --json > "$logs/streams-$backend-one-$d.json" 2>&1 &
          bench_pids+=($!)
        done
        for p in "${bench_pids[@]}"; do wait "$p" || rc=1; done
        echo "$backend: one server's minor page faults over the run: $(( $(faults "$spid") - faults_before ))"
        stop "$spid"
        bench_pids=()
        server_pids=()
        for d in $(seq 0 $((gpus - 1))); do
          start "streams-$backend-gpu$d" --backend=$backend --cuda_devices="$d" || { rc=1; continue; }
          server_pids+=("$spid")
          "$tally" bench --target="$target" --clients=$((16 / gpus)) --size=1Gi --mode=stream \
            --duration="$stream_seconds" --ops=sum,max,hist:256:-1:1 --json > "$logs/streams-$backend-per-$d.json" 2>&1 &
          bench_pids+=($!)
        done
        for p in "${bench_pids[@]}"; do wait "$p" || rc=1; done
        for p in "${server_pids[@]}"; do stop "$p"; done
        one=0
        per=0
        for d in $(seq 0 $((gpus - 1))); do
          one=$(python3 -c "print(round($one + float('$(gbps "$logs/streams-$backend-one-$d.json")'), 2))")
          per=$(python3 -c "print(round($per + float('$(gbps "$logs/streams-$backend-per-$d.json")'), 2))")
        done
        echo "$backend: one server on $gpus GPU(s): $one GB/s; one server per GPU: $per GB/s in all;" \
          "ratio $(python3 -c "print(round($one / $per, 2) if $per else 'n/a')")"
        for f in "$logs"/streams-$backend-*.json; do summary "$f"; done
      done ;;
    sharded)
      start sharded-gpu0 --cuda_devices=0 --dataset_shards=1 || { rc=1; continue; }
      "$tally" bench --target="$target" --mode=resident --size=4Gi --clients=1 --duration=10 \
        --ops=sum,min,max,argmax --verify --json > "$logs/sharded-gpu0.json" 2>&1 || rc=1
      stop "$spid"
      alone=$(gbps "$logs/sharded-gpu0.json")
      summary "$logs/sharded-gpu0.json"
      for n in $( [ "$gpus" -gt 2 ] && echo 2) "$gpus"; do
        start "sharded-$n" --cuda_devices="$(seq -s, 0 $((n - 1)))" --dataset_shards="$n" \
          --dataset_min_shard_bytes=1 || { rc=1; continue; }
        "$tally" bench --target="$target" --mode=resident --size=4Gi --clients=1 --duration=10 \
          --ops=sum,min,max,argmax --verify --json > "$logs/sharded-$n.json" 2>&1 || rc=1
        stop "$spid"
        all=$(gbps "$logs/sharded-$n.json")
        echo "4 GiB scan: $n shards on $n GPU(s) $all GB/s, one GPU $alone GB/s;" \
          "query time ratio $(python3 -c "print(round($alone / $all, 2) if $all else 'n/a')")" \
          "(target <= $( [ "$n" -le 2 ] && echo 0.6 || echo 0.35))"
        summary "$logs/sharded-$n.json"
      done ;;
    concurrent)
      one=0
      for n in 1 $( [ "$gpus" -gt 2 ] && echo 2) $( [ "$gpus" -gt 1 ] && echo "$gpus"); do
        start "concurrent-$n" --cuda_devices="$(seq -s, 0 $((n - 1)))" || { rc=1; continue; }
        "$tally" bench --target="$target" --mode=resident --sizes=1Gi,4Gi --clients=64 --duration=8 \
          --ops="sum;sum,max,hist:256:-1:1" --verify --json > "$logs/concurrent-$n.json" 2>&1 || rc=1
        metric tally_queue_wait_seconds_sum; metric tally_queue_wait_seconds_count
        stop "$spid"
        g=$(gbps "$logs/concurrent-$n.json")
        [ "$n" -eq 1 ] && one=$g
        echo "64 clients, resident 1 GiB and 4 GiB, $n GPU(s): $g GB/s;" \
          "$(python3 -c "print(f'{$g / ($n * $one):.2f} x {$n} x the one-GPU rate' if $one else '')") (target >= 0.85)"
        summary "$logs/concurrent-$n.json"
      done
      # The same load with every dataset whole on one GPU (the store spreads
      # them over the GPUs): which layout serves many clients better.
      if [ "$gpus" -gt 1 ]; then
        start concurrent-whole --dataset_shards=1 || { rc=1; continue; }
        "$tally" bench --target="$target" --mode=resident --sizes=1Gi,4Gi --clients=64 --duration=8 \
          --ops="sum;sum,max,hist:256:-1:1" --verify --json > "$logs/concurrent-whole.json" 2>&1 || rc=1
        stop "$spid"
        echo "64 clients, $gpus GPU(s), datasets unsharded: $(gbps "$logs/concurrent-whole.json") GB/s"
        summary "$logs/concurrent-whole.json"
      fi ;;
    lose)
      last=$((gpus - 1))
      start lose --fault_lose_gpu="$last@10" || { rc=1; continue; }
      "$tally" bench --target="$target" --sizes=64Ki:64Mi --clients=64 --duration=30 --ops=sum,max,argmax \
        --verify --json > "$logs/lose.json" 2>&1 &
      bench=$!
      sleep 20
      echo "after the loss: server $("$tally" health --target="$target" 2>&1)," \
        "cuda:0 $("$tally" health --target="$target" --service=cuda:0 2>&1)," \
        "cuda:$last $("$tally" health --target="$target" --service=cuda:$last 2>&1)"
      metric tally_device_serving
      wait "$bench" || true  # with one GPU every request after the loss fails: read the counts
      summary "$logs/lose.json"
      metric tally_host_to_device_bytes_total
      stop "$spid"
      grep -E 'lost|takes no new' "$logs/server-lose.log" | head -3 ;;
    dask)
      if ! python3 -c "import dask, distributed" 2>/dev/null; then
        echo "dask: python3 has no dask or distributed here; skipped"
        rc=1
        continue
      fi
      args=""
      for d in $(seq 0 $((gpus - 1))); do args+="${args:+;}--backend=cuda --cuda_devices=$d"; done
      TALLY_DASK_SERVER_ARGS=$args PYTHONPATH=${PYTHONPATH:-$build/client/python:tests/python} \
        python3 tests/python/tally_dask_test.py "$server" > "$logs/dask.txt" 2>&1 || rc=1
      grep -E '^(Ran|OK|FAILED)|servers:|Dask\+tally|seconds|GiB' "$logs/dask.txt" | head -12 ;;
    *) echo "unknown step '$step' (tests, soak, streams, sharded, concurrent, lose, dask)" >&2; exit 2 ;;
  esac
done
exit $rc
