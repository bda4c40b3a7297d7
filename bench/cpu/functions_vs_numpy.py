#!/usr/bin/python3
"""Quantiles, top-k and the sketches against numpy, in one run.

Uploads a float32 array of --mib MiB (standard normal) to a tally server as
a resident dataset and times, best of --reps, the server's own time
(execution.server_seconds) for each function, beside numpy's time for the
same answer on this host:
  quantile (1 q and 64 q)   numpy.quantile
  median                    numpy.median
  topk k=8, 1024, 65536     numpy.argpartition + a stable sort of the k
  count_distinct            len(numpy.unique)
  hll, ddsketch             len(numpy.unique), numpy.quantile (the exact
                            answers they estimate)
and checks every answer against numpy's. --backend picks the server's
backend (cpu, or cuda on a GPU host: a GPU dataset's bytes are copied to the
host for these functions). Run with an interpreter that has numpy and
grpcio, from the repository root:

    /usr/bin/python3 bench/cpu/functions_vs_numpy.py [--server build/server/tally-server] [--mib 256] [--backend cpu]
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
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--backend", default="cpu")
    args = p.parse_args()
    pb = load_messages(os.path.join(ROOT, "proto"))
    server = TallyServer(args.server, pb, [f"--backend={args.backend}", "--max_holistic_bytes=17179869184"])
    try:
        n = args.mib * (1 << 20) // 4
        x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
        upload_float32(server, pb, "x", x)

        def tally(aggregation):
            req = pb.AggregateDatasetRequest(name="x", aggregations=[aggregation])
            t, r = float("inf"), None
            for _ in range(args.reps):
                r = server.aggregate_dataset(req, timeout=600)
                t = min(t, r.execution.server_seconds)
            return t, r.results[0], r.execution

        q64 = np.linspace(0.005, 0.995, 64)
        rows = []
        t, got, e = tally(pb.Aggregation(op=pb.OP_QUANTILE, q=[0.5]))
        want = np.quantile(x, [0.5])
        rows.append(("quantile, 1 q", t, best(lambda: np.quantile(x, [0.5]), args.reps), "numpy.quantile",
                     np.array_equal(np.array(got.doubles.values), want)))
        t, got, _ = tally(pb.Aggregation(op=pb.OP_QUANTILE, q=list(q64)))
        want = np.quantile(x, q64)
        rows.append(("quantile, 64 q", t, best(lambda: np.quantile(x, q64), args.reps), "numpy.quantile",
                     np.allclose(np.array(got.doubles.values), want, rtol=1e-15, atol=0)))
        t, got, _ = tally(pb.Aggregation(op=pb.OP_MEDIAN))
        rows.append(("median", t, best(lambda: np.median(x), args.reps), "numpy.median",
                     got.doubles.values[0] == float(np.median(x))))
        for k in (8, 1024, 65536):
            t, got, _ = tally(pb.Aggregation(op=pb.OP_TOPK, k=k))

            def numpy_topk():
                part = np.argpartition(-x, k)[:k]
                return part[np.lexsort((part, -x[part]))]
            idx = numpy_topk()
            ok = np.array_equal(np.array(got.indices.values), idx) and np.array_equal(
                np.array(got.doubles.values), x[idx].astype(np.float64))
            rows.append((f"topk, k={k}", t, best(numpy_topk, args.reps), "numpy.argpartition + sort", ok))
        distinct = len(np.unique(x))
        t, got, _ = tally(pb.Aggregation(op=pb.OP_COUNT_DISTINCT))
        rows.append(("count_distinct", t, best(lambda: len(np.unique(x)), args.reps), "len(numpy.unique)",
                     got.uint64s.values[0] == distinct))
        t, got, _ = tally(pb.Aggregation(op=pb.OP_HLL, precision=14))
        err = abs(got.uint64s.values[0] - distinct) / distinct
        rows.append((f"hll p=14 (error {err:.2%})", t, best(lambda: len(np.unique(x)), args.reps),
                     "len(numpy.unique)", err < 5 * 1.04 / 128))
        t, got, _ = tally(pb.Aggregation(op=pb.OP_DDSKETCH, relative_accuracy=0.01, q=[0.01, 0.5, 0.99]))
        lower = np.quantile(x, [0.01, 0.5, 0.99], method="lower").astype(np.float64)
        ok = np.all(np.abs(np.array(got.doubles.values) - lower) <= 0.01 * np.abs(lower))
        rows.append(("ddsketch 1%, 3 q", t, best(lambda: np.quantile(x, [0.01, 0.5, 0.99], method="lower"), args.reps),
                     "numpy.quantile (exact)", bool(ok)))
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   platform.processor())
        print(f"{args.mib} MiB float32 ({n} elements), backend {e.backend} on {e.device}; numpy {np.__version__} "
              f"on {os.cpu_count()} CPUs ({cpu}); best of {args.reps}; tally: server time")
        print("| function | tally ms | numpy ms | numpy's | tally / numpy speed | answer as numpy's |")
        print("|---|---:|---:|---|---:|---|")
        for label, tt, nt, what, ok in rows:
            print(f"| {label} | {tt * 1e3:.1f} | {nt * 1e3:.1f} | {what} | {nt / tt:.2f}x | {'yes' if ok else 'NO'} |")
        if not all(r[4] for r in rows):
            sys.exit(1)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
