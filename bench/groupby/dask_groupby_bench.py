#!/usr/bin/env python3
"""tally.dask.groupby over many groups, beside dask's own group-by of the
same frame and pandas' of the computed one.

A frame of --rows rows (int64 keys uniform over --groups values, a float64
column) in --partitions partitions; `tally.dask.groupby(ddf, "k", agg)` on
one tally server (the scheduler synchronous, so that the times are the
client's and the server's, not a pool's), `ddf.groupby("k").agg(agg)
.compute()`, and pandas on the whole frame; seconds, best of --reps, each
tally answer checked against pandas'. The server's own share is the sum of
its GroupBy calls' durations, read from its Prometheus histogram
(tally_request_duration_seconds, first byte to response).

usage: dask_groupby_bench.py --server build/server/tally-server
       [--rows 2000000] [--groups 500000] [--partitions 2] [--agg sum,mean,max]
(the package, built with its stubs, on PYTHONPATH)
"""
import argparse
import re
import sys
import urllib.request

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

import tally.dask as td
from tally.v1 import tally_pb2
from best_of import best
from tally_test_server import TallyServer, free_port


def server_seconds(metrics_port):
    """The seconds the server has spent answering GroupBy calls."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r'tally_request_duration_seconds_sum\{[^}]*method="GroupBy"[^}]*\} (\S+)', line)
        if m:
            total += float(m.group(1))
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--groups", type=int, default=500_000)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--agg", default="sum,mean,max")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"k": rng.integers(0, args.groups, args.rows),
                          "v": rng.standard_normal(args.rows)})
    ddf = dd.from_pandas(frame, npartitions=args.partitions)
    agg = args.agg.split(",")
    metrics = free_port()
    server = TallyServer(args.server, tally_pb2, [f"--backend={args.backend}", "--health_listen=",
                                                  f"--metrics_listen=127.0.0.1:{metrics}"])
    try:
        td.use([f"127.0.0.1:{server.port}"], timeout=600)
        dask.config.set(scheduler="synchronous")
        want = frame.groupby("k").agg({"v": agg})
        before = server_seconds(metrics)
        got, t_tally = best(lambda: td.groupby(ddf, "k", {"v": agg}).compute(), args.reps)
        spent = (server_seconds(metrics) - before) / args.reps
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
        _, t_dask = best(lambda: ddf.groupby("k").agg({"v": agg}).compute(), args.reps)
        _, t_pandas = best(lambda: frame.groupby("k").agg({"v": agg}), args.reps)
    finally:
        server.stop()
    print(f"{args.rows} rows, {len(want)} groups, {args.partitions} partitions, agg {args.agg}, best of {args.reps}")
    print(f"tally.dask.groupby\t{t_tally:.3f} s\t(the server's GroupBy calls {spent:.3f} s a run, mean)")
    print(f"dask groupby\t{t_dask:.3f} s")
    print(f"pandas groupby\t{t_pandas:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
