#!/usr/bin/python3
"""The CPU backend against numpy on a 1 GiB float32 array, in one run.

Times numpy.sum/min/max (best of --reps) on a random float32 array of
--gib GiB, then runs tally-cpu-bench on an array of the same size and prints
both in one table. Run with Debian's interpreter, which has numpy:

    /usr/bin/python3 bench/cpu/compare_numpy.py [--bench PATH] [--gib 1] [--reps 5]
"""
import argparse
import os
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CANDIDATES = ["build-cpu/bench/cpu/tally-cpu-bench", "build/bench/cpu/tally-cpu-bench"]


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


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
    p.add_argument("--threads", type=int, default=0, help="tally threads (0: all)")
    p.add_argument("--piece_mib", type=int, default=0, help="tally Consume() piece size (0: one piece)")
    args = p.parse_args()

    bench = args.bench or next((os.path.join(ROOT, c) for c in CANDIDATES
                                if os.path.exists(os.path.join(ROOT, c))), None)
    if not bench or not os.path.exists(bench):
        sys.exit("tally-cpu-bench not found; build it (target tally-cpu-bench) or pass --bench")

    n = int(args.gib * (1 << 30)) // 4
    a = np.random.default_rng(1).random(n, dtype=np.float32)
    numpy_s = {
        "sum": best_seconds(lambda: np.sum(a), args.reps),
        "min": best_seconds(lambda: np.min(a), args.reps),
        "max": best_seconds(lambda: np.max(a), args.reps),
        "sum+min+max": best_seconds(lambda: (np.sum(a), np.min(a), np.max(a)), args.reps),
    }
    del a  # free the memory before tally allocates its own array

    out = subprocess.run([bench, f"--gib={args.gib}", f"--reps={args.reps}", f"--threads={args.threads}",
                          f"--piece_mib={args.piece_mib}", "--tsv"],
                         check=True, capture_output=True, text=True).stdout
    tally_s = {}
    for line in out.splitlines():
        name, seconds, _gbps, _value = line.split("\t")
        tally_s[name] = float(seconds)

    nbytes = n * 4
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; numpy {np.__version__}; "
          f"{nbytes / (1 << 30):.2f} GiB float32 ({n} elements); best of {args.reps}")
    print(f"tally: {bench} --threads={args.threads} --piece_mib={args.piece_mib}")
    print(f"| {'op':<12} | {'numpy s':>9} | {'numpy GB/s':>10} | {'tally cpu s':>11} | "
          f"{'tally GB/s':>10} | {'tally/numpy':>11} |")
    print(f"|{'-' * 14}|{'-' * 11}:|{'-' * 12}:|{'-' * 13}:|{'-' * 12}:|{'-' * 13}:|")
    for op in ("sum", "min", "max", "sum+min+max"):
        ns, ts = numpy_s[op], tally_s[op]
        print(f"| {op:<12} | {ns:>9.4f} | {nbytes / ns / 1e9:>10.2f} | {ts:>11.4f} | "
              f"{nbytes / ts / 1e9:>10.2f} | {ns / ts:>10.2f}x |")


if __name__ == "__main__":
    main()
