#!/usr/bin/python3
"""NaN-skipping and masked sums on the CPU backend against numpy, in one run.

Uploads a float32 array of --mib MiB (standard normal, every 1000th value
NaN) to `tally-server --backend=cpu` as a resident dataset, then times, best
of --reps, the server's own time (execution.server_seconds) for:
  nansum                  (numpy: numpy.nansum)
  sum with a random mask  (numpy: numpy.nansum of the masked array's filled
                           copy is not the same op; the fair ones are
                           numpy.sum(x, where=valid) and numpy.ma's sum)
  sum with a mask of runs (long valid and missing stretches)
and prints one table with numpy's times for the same answers. Run with
Debian's interpreter, which has numpy, from the repository root:

    /usr/bin/python3 bench/cpu/masked_vs_numpy.py [--server build/server/tally-server] [--mib 256]
"""
import argparse
import os
import platform
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from tally_test_server import TallyServer, load_messages  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_numpy import best_seconds as best, upload_float32  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", default=os.path.join(ROOT, "build", "server", "tally-server"))
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    pb = load_messages(os.path.join(ROOT, "proto"))
    server = TallyServer(args.server, pb, ["--backend=cpu"])
    try:
        n = args.mib * (1 << 20) // 4
        rng = np.random.default_rng(1)
        x = rng.standard_normal(n).astype(np.float32)
        x[::1000] = np.nan
        upload_float32(server, pb, "x", x)
        finite = x.copy()
        finite[np.isnan(finite)] = 0  # masked sums over NaN-free data, so numpy.sum's answer is a number
        upload_float32(server, pb, "f", finite)

        def tally_time(name, op, valid=None):
            req = pb.AggregateDatasetRequest(name=name, aggregations=[pb.Aggregation(op=op)])
            if valid is not None:
                req.validity = np.packbits(valid, bitorder="little").tobytes()
            t, answer = float("inf"), None
            for _ in range(args.reps):
                r = server.aggregate_dataset(req, timeout=600)
                t = min(t, r.execution.server_seconds)
                answer = r.results[0].doubles.values[0]
            return t, answer

        rows = []
        t, got = tally_time("x", pb.OP_NANSUM)
        rows.append(("nansum", t, best(lambda: np.nansum(x), args.reps), "numpy.nansum", got, float(np.nansum(x))))
        t, got = tally_time("x", pb.OP_SUM)
        rows.append(("sum (no mask)", t, best(lambda: np.sum(x), args.reps), "numpy.sum", got, float(np.sum(x))))
        for label, valid in (("sum, random mask (50%)", rng.random(n) < 0.5),
                             ("sum, runs of 4096", (np.arange(n) // 4096) % 2 == 0)):
            t, got = tally_time("f", pb.OP_SUM, valid)
            m = np.ma.masked_array(finite, mask=~valid)
            rows.append((label, t, best(lambda: np.sum(finite, where=valid), args.reps), "numpy.sum(where=)",
                         got, float(np.sum(finite, where=valid, dtype=np.float64))))
            rows.append((label, t, best(lambda: m.sum(), args.reps), "numpy.ma sum", got, float(m.sum())))
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   platform.processor())
        print(f"{args.mib} MiB float32, {os.cpu_count()} CPUs ({cpu}), best of {args.reps}; tally: server time")
        print(f"| op | tally ms | numpy ms | numpy's | tally / numpy speed | relative difference |")
        print("|---|---:|---:|---|---:|---:|")
        for label, tt, nt, what, got, want in rows:
            rel = abs(got - want) / max(abs(want), 1e-300)
            print(f"| {label} | {tt * 1e3:.1f} | {nt * 1e3:.1f} | {what} | {nt / tt:.2f}x | {rel:.1e} |")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
