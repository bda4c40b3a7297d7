#!/usr/bin/env python3
"""The functions with states of their own under load: many clients at once
asking quantiles, medians, top-k and exact distinct counts of mixed sizes,
dtypes and sources, every answer checked against numpy.

Uploads arrays of each --sizes and dtype (float32, float64, int32; ties,
signed zeros and a few NaN in the floats) as resident datasets, then runs
--clients threads for --seconds through the Python package, each picking a
case and a function at random: quantile (a batch of 1 to 64 q, a random
numpy method), nanquantile, median, nanmedian, topk / bottomk (k from 1 to
65,536) and count_distinct, over the dataset or, for arrays of at most
--inline elements, over the array sent inline. Every answer must equal
numpy's (quantile and median: bitwise where the method picks an element, to
1e-12 relative where it interpolates, 1e-6 for float32 data, whose medians
numpy takes in float32; topk: the values and the indices of numpy's stable
order, ties by the smaller index; count_distinct: len(numpy.unique), NaN
one value) and, bit for bit, the first answer of its case. A request the server
sheds (RESOURCE_EXHAUSTED) is counted as busy and retried after a backoff.
Prints answers, failures, wrong answers, busy replies, elements per second
and the server's peak RSS; exits 1 on any failure or wrong answer.

    PYTHONPATH=build/client/python:tests/python python3 bench/resident/functions_load.py \\
        --server build/server/tally-server [--backend cpu|cuda] [--clients 64] [--seconds 30] \\
        [--sizes 1000,65536,1048576,16777216] [--inline 1048576]

TALLY_PB2_DIR may name a folder holding generated tally/v1/tally_pb2.py.
"""
import os
import random
import sys
import time

import grpc
import numpy as np

import tally

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from tally_test_server import LoadTally, load_arguments, load_messages, run_load, start_load_server  # noqa: E402

DTYPES = [np.float32, np.float64, np.int32]
# numpy's methods that pick an element (answers bitwise) and the rest
# (interpolated: to float64 rounding).
PICKING = ["inverted_cdf", "averaged_inverted_cdf", "closest_observation", "lower", "higher", "nearest"]
INTERPOLATING = ["interpolated_inverted_cdf", "hazen", "weibull", "linear", "median_unbiased",
                 "normal_unbiased", "midpoint"]
FUNCTIONS = ["quantile", "nanquantile", "median", "nanmedian", "topk", "bottomk", "count_distinct"]


def make_array(rng, dtype, n):
    if np.dtype(dtype).kind == "f":
        x = rng.normal(0, 100, n)
        ties = rng.random(n) < 0.2
        x[ties] = np.round(x[ties] / 50)
        x[rng.random(n) < 0.02] = -0.0
        x = x.astype(dtype)
        x[rng.random(n) < 0.001] = np.nan
        return x
    return rng.integers(-(1 << 20), 1 << 20, n).astype(dtype)


def spelling(function, params):
    """The op as the CLI and the package spell it."""
    if function in ("quantile", "nanquantile"):
        return f"{function}:{','.join(repr(q) for q in params['q'])}:{params['method']}"
    if function in ("topk", "bottomk"):
        return f"{function}:{params['k']}"
    return function


def reference(x, function, params):
    if function in ("quantile", "nanquantile"):
        return getattr(np, function)(x, params["q"], method=params["method"])
    if function in ("median", "nanmedian"):
        return getattr(np, function)(x)
    if function in ("topk", "bottomk"):
        # numpy's order (NaN after every number, -0.0 equal to 0.0), the
        # largest or smallest first, ties by the smaller index.
        rank = np.unique(x, return_inverse=True)[1].ravel()
        order = np.lexsort((np.arange(len(x)), -rank if function == "topk" else rank))
        idx = order[:min(params["k"], len(x))]
        return x[idx], idx
    return len(np.unique(x))


def wrong(x, function, params, got):
    """Why the answer differs from numpy's, or None."""
    want = reference(x, function, params)
    if function in ("topk", "bottomk"):
        values, indices = got
        if not np.array_equal(np.asarray(indices), want[1]):
            return "indices"
        same = np.array_equal(np.asarray(values, dtype=np.float64), want[0].astype(np.float64), equal_nan=True)
        return None if same else "values"
    if function == "count_distinct":
        return None if int(got) == want else f"{got} != {want}"
    g = np.atleast_1d(np.asarray(got, dtype=np.float64))
    w = np.atleast_1d(np.asarray(want, dtype=np.float64))
    if g.shape != w.shape:
        return f"shape {g.shape} != {w.shape}"
    nan = np.isnan(w)
    if not np.array_equal(nan, np.isnan(g)):
        return "NaN placement"
    if params.get("method") in PICKING:
        return None if np.array_equal(g[~nan], w[~nan]) else f"{params['method']}: not numpy's element"
    tolerance = 1e-6 if x.dtype == np.float32 else 1e-12  # float32 medians interpolate in float32, as numpy's
    ok = np.abs(g[~nan] - w[~nan]) <= tolerance * np.maximum(1.0, np.abs(w[~nan]))
    return None if np.all(ok) else f"{params.get('method', '')} off by more than rounding"


def main():
    p = load_arguments(__doc__, os.path.join(ROOT, "proto"))
    p.add_argument("--sizes", default="1000,65536,1048576,16777216")
    p.add_argument("--inline", type=int, default=1 << 20, help="arrays this small also go inline")
    args = p.parse_args()

    pb = load_messages(args.proto)
    server = start_load_server(args, pb)
    target = f"127.0.0.1:{server.port}"
    rng = np.random.default_rng(11)
    cases = []  # (label, source: dataset name or array, the array)
    with tally.Client(target) as setup:
        for n in (int(s) for s in args.sizes.split(",")):
            for dtype in DTYPES:
                x = make_array(rng, dtype, n)
                name = f"f_{np.dtype(dtype).name}_{n}"
                setup.put_dataset(name, x)
                cases.append((f"dataset {name}", name, x))
                if n <= args.inline:
                    cases.append((f"inline {name}", None, x))

    counted = LoadTally("elements")
    stop = time.monotonic() + args.seconds

    def params_for(pick, function, n):
        if function in ("quantile", "nanquantile"):
            q = [round(pick.random(), 6) for _ in range(pick.choice([1, 1, 3, 64]))]
            return {"q": q, "method": pick.choice(PICKING + INTERPOLATING)}
        if function in ("topk", "bottomk"):
            return {"k": pick.choice([1, 8, 1024, 65536])}
        return {}

    def client(seed):
        pick = random.Random(seed)
        with tally.Client(target) as c:
            while time.monotonic() < stop:
                label, name, x = pick.choice(cases)
                function = pick.choice(FUNCTIONS)
                params = params_for(pick, function, len(x))
                op = spelling(function, params)
                try:
                    answer = c.aggregate_dataset(name, op) if name is not None else c.aggregate(x, op)
                    got = answer[0]
                except tally.Error as e:
                    if e.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        # shed past --max_inflight_bytes: retried after a backoff, as a client would
                        counted.busy()
                    else:
                        counted.failed(f"{label} {op}: {str(e)[:200]}")
                    time.sleep(pick.uniform(0.05, 0.2))
                    continue
                bits = b"".join(np.asarray(a).tobytes() for a in (got if isinstance(got, tuple) else (got,)))
                counted.answered(f"{label} {op}", wrong(x, function, params, got), bits, len(x))

    seconds, peak = run_load(server, args.clients, client, stop)
    server.stop()
    return counted.report(args.backend, args.clients, len(cases), seconds, peak)


if __name__ == "__main__":
    sys.exit(main())
