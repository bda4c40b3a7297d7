#!/usr/bin/python3
"""The CPU backend against numpy on a 1 GiB float32 array, in one run.

Times numpy.sum/min/max on a random float32 array of --gib GiB and runs
tally-cpu-bench on an array of the same size, alternating the two for
--rounds rounds, and prints both in one table. Run with Debian's interpreter, which has numpy:

    /usr/bin/python3 bench/cpu/compare_numpy.py [--bench PATH] [--gib 1] [--reps 5] [--rounds 3]
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = ("sum", "min", "max", "sum+min+max")
CANDIDATES = ["build-cpu/bench/cpu/tally-cpu-bench", "build/bench/cpu/tally-cpu-bench"]


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def upload_float32(server, pb, name, x, chunk=4 << 20):
    """Uploads float32 array `x` to `server` (tally_test_server.TallyServer)
    as the dataset `name`, in chunks of `chunk` bytes."""
    data = x.tobytes()

    def messages():
        yield pb.PutDatasetRequest(header=pb.PutDatasetRequest.Header(
            name=name, spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, length=len(x))))
        for at in range(0, len(data), chunk):
            yield pb.PutDatasetRequest(chunk=data[at:at + chunk])
    server.put_dataset(messages(), timeout=600)


def best_seconds(fn, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", help="path to tally-cpu-bench (default: look in build-cpu/, build/)")
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="tally threads (0: all)")
    p.add_argument("--piece_mib", type=int, default=0, help="tally Consume() piece size (0: one piece)")
    args = p.parse_args()

    bench = args.bench or next((os.path.join(ROOT, c) for c in CANDIDATES
                                if os.path.exists(os.path.join(ROOT, c))), None)
    if not bench or not os.path.exists(bench):
        sys.exit("tally-cpu-bench not found; build it (target tally-cpu-bench) or pass --bench")

    n = int(args.gib * (1 << 30)) // 4
    nbytes = n * 4
    a = np.random.default_rng(1).random(n, dtype=np.float32)
    numpy_fns = {
        "sum": lambda: np.sum(a),
        "min": lambda: np.min(a),
        "max": lambda: np.max(a),
        "sum+min+max": lambda: (np.sum(a), np.min(a), np.max(a)),
    }
    cmd = [bench, f"--gib={args.gib}", f"--reps={args.reps}", f"--threads={args.threads}",
           f"--piece_mib={args.piece_mib}", "--tsv"]
    # Rounds alternate numpy and tally so that a noisy neighbour on a shared
    # machine hurts both alike; each round keeps the best of --reps.
    numpy_s = {op: [] for op in OPS}
    tally_s = {op: [] for op in OPS}
    for _ in range(args.rounds):
        for op in OPS:
            numpy_s[op].append(best_seconds(numpy_fns[op], args.reps))
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            name, seconds, _gbps, _value = line.split("\t")
            tally_s[name].append(float(seconds))

    print(f"{cpu_model()}, {os.cpu_count()} CPUs; numpy {np.__version__}; "
          f"{nbytes / (1 << 30):.2f} GiB float32 ({n} elements); "
          f"{args.rounds} rounds x best of {args.reps}")
    print(f"tally: {' '.join(cmd[1:-1])}")
    print("GB/s: best round (median round)")
    print(f"| {'op':<12} | {'numpy':>15} | {'tally cpu':>15} | {'tally/numpy':>11} |")
    print(f"|{'-' * 14}|{'-' * 16}:|{'-' * 16}:|{'-' * 12}:|")
    for op in OPS:
        nb, nm = min(numpy_s[op]), statistics.median(numpy_s[op])
        tb, tm = min(tally_s[op]), statistics.median(tally_s[op])
        print(f"| {op:<12} | {nbytes / nb / 1e9:6.2f} ({nbytes / nm / 1e9:6.2f}) | "
              f"{nbytes / tb / 1e9:6.2f} ({nbytes / tm / 1e9:6.2f}) | {nb / tb:>10.2f}x |")


if __name__ == "__main__":
    main()
