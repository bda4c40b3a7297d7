#!/usr/bin/python3
"""Float sums through tally's cpu backend against math.fsum, bit for bit, on
ill-conditioned arrays, beside numpy's sum of the same elements; and sums
of squares, variances and standard deviations against their exact values.

Each case is sent whole (Aggregate) and streamed in odd chunk sizes
(AggregateStream); sum and nansum must equal math.fsum of the (non-NaN)
elements (the exact sum rounded once to float64) in every way, and mean
that over the count. sum_squares must be the exact sum of the squares
rounded once, var (ddof=1) the stated formula, RN(RN(M2) / (n - 1)) with
M2 = sum((x - S/n)^2) computed exactly (Python integers), and std its
square root: 0 ulps. The tables give numpy's errors in float64 ulps of the
correctly rounded answer, for scale, and tally's variance's distance from
the correctly rounded variance. Exits 1 if any tally answer is off by a
bit.

    /usr/bin/python3 bench/cpu/exact_sum_accuracy.py [--server build/server/tally-server]
"""
import argparse
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from tally_test_server import TallyServer, load_messages  # noqa: E402


def ulps(x, want):
    """|x - want| in float64 ulps of want (inf where one is not finite and they differ)."""
    if x == want or (x != x and want != want):
        return 0.0
    if not (math.isfinite(x) and math.isfinite(want)):
        return math.inf
    return abs(x - want) / math.ulp(want if want != 0 else 5e-324)


UNIT = 1 << 1074  # exact sums in units of 2^-1074, as tally's rules keep them


def exact_moments(x):
    """The exact S and Q (Python integers, units of 2^-1074 and 2^-2148)
    of float64 values, and their count."""
    s = q = 0
    for v in x.tolist():
        p, d = v.as_integer_ratio()
        u = p * (UNIT // d)
        s += u
        q += u * u
    return s, q, len(x)


def divide(a, b):
    """a / b rounded once to float64 (Python's division of integers)."""
    try:
        return a / b
    except OverflowError:
        return math.inf


def squares_exact(x):
    """Whether tally's rules hold every square of x exactly (none
    underflows or overflows)."""
    a = np.abs(x[x != 0].astype(np.float64))
    return a.size == 0 or (a.min() > 2.0 ** -480 and a.max() < 2.0 ** 510)


def cases(rng):
    n = 100_000
    normal = rng.standard_normal(n)
    big = rng.standard_normal(n // 2) * 10.0 ** rng.integers(0, 300, n // 2)
    cancel = np.concatenate([big, -big, rng.standard_normal(1000)])
    rng.shuffle(cancel)
    yield "cancellation: pairs x, -x over 1e0..1e300, plus 1,000 normal", cancel, np.float64
    plus_small = np.concatenate([[1e16], np.full(n, 0.5), [-1e16]])
    yield "1e16, 100,000 x 0.5, -1e16", plus_small, np.float64
    alternating = (np.arange(n) % 2 * 2 - 1) * (1.0 + np.arange(n) * 2.0 ** -40)
    yield "alternating signs, 1 + i 2^-40", alternating, np.float64
    subnormal = rng.integers(-2**40, 2**40, n) * 5e-324
    yield "subnormals and their cancellations", np.concatenate([subnormal, [2.2250738585072014e-308]]), np.float64
    wide = rng.lognormal(0, 30, n) * rng.choice([-1, 1], n)
    yield "lognormal(0, 30), random signs", wide, np.float64
    yield "normal(0, 1)", normal, np.float64
    yield "normal(0, 1) as float32", normal.astype(np.float32), np.float32
    with np.errstate(over="ignore"):
        f32_cancel = np.concatenate([big.astype(np.float32), -big.astype(np.float32),
                                     rng.standard_normal(10).astype(np.float32)])
    f32_cancel = f32_cancel[np.isfinite(f32_cancel)]
    rng.shuffle(f32_cancel)
    yield "float32 cancellation", f32_cancel, np.float32
    yield "float16, normal(0, 100)", (rng.standard_normal(n) * 100).astype(np.float16), np.float16
    with_nan = normal.copy()
    with_nan[rng.integers(0, n, 1000)] = np.nan
    yield "normal(0, 1) with 1,000 NaN (nansum)", with_nan, np.float64


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", default=os.path.join(ROOT, "build", "server", "tally-server"))
    args = p.parse_args()
    pb = load_messages(os.path.join(ROOT, "proto"))
    dtypes = {np.float64: pb.DTYPE_FLOAT64, np.float32: pb.DTYPE_FLOAT32, np.float16: pb.DTYPE_FLOAT16}
    server = TallyServer(args.server, pb, ["--backend=cpu"])
    bad = 0
    moment_rows = []
    try:
        print("| data | elements | tally sum, nansum, mean: ulps from math.fsum (whole / streamed) | numpy.sum ulps |")
        print("|---|---:|---|---:|")
        for name, x, dt in cases(np.random.default_rng(20261127)):
            x = np.ascontiguousarray(x.astype(dt))
            finite = x[~np.isnan(x)].astype(np.float64)
            want_sum = math.fsum(x.astype(np.float64)) if not np.isnan(x).any() else math.nan
            want_nansum = math.fsum(finite)
            want_mean = want_sum / len(x)
            spec = pb.ArraySpec(dtype=dtypes[dt], length=len(x))
            aggs = [pb.Aggregation(op=pb.OP_SUM), pb.Aggregation(op=pb.OP_NANSUM), pb.Aggregation(op=pb.OP_MEAN),
                    pb.Aggregation(op=pb.OP_SUM_SQUARES), pb.Aggregation(op=pb.OP_VARIANCE, ddof=1),
                    pb.Aggregation(op=pb.OP_STDDEV, ddof=1)]
            whole = server.aggregate(pb.AggregateRequest(spec=spec, data=x.tobytes(), aggregations=aggs), timeout=120)
            data = x.tobytes()
            cuts = [0]
            while cuts[-1] < len(data):
                cuts.append(min(len(data), cuts[-1] + 1 + (len(cuts) * 7919) % 65537))
            stream = server.aggregate_stream(
                iter([pb.AggregateStreamRequest(header=pb.AggregateStreamRequest.Header(spec=spec, aggregations=aggs))] +
                     [pb.AggregateStreamRequest(chunk=data[a:b]) for a, b in zip(cuts, cuts[1:])]), timeout=120)
            errs = []
            for r in (whole, stream):
                got = [r.results[k].doubles.values[0] for k in range(3)]
                e = [ulps(got[0], want_sum), ulps(got[1], want_nansum), ulps(got[2], want_mean)]
                errs.append(e)
                bad += sum(v != 0 for v in e)
            if not np.isnan(x).any() and squares_exact(x):
                s, q, n = exact_moments(x.astype(np.float64))
                n_m2 = n * q - s * s  # n M2, in units of 2^-2148
                want_squares = divide(q, UNIT * UNIT)
                want_var = divide(n_m2, n * UNIT * UNIT) / (n - 1)  # the stated formula
                want_std = math.sqrt(want_var)
                true_var = divide(n_m2, n * (n - 1) * UNIT * UNIT)  # the variance rounded once
                moment_errs = []
                for r in (whole, stream):
                    got = [r.results[k].doubles.values[0] for k in range(3, 6)]
                    e = [ulps(got[0], want_squares), ulps(got[1], want_var), ulps(got[2], want_std)]
                    moment_errs.append(e)
                    bad += sum(v != 0 for v in e)
                with np.errstate(all="ignore"):
                    np_var = float(np.var(x.astype(np.float64), ddof=1))
                    np_squares = float(np.sum(np.square(x.astype(np.float64))))
                moment_rows.append(
                    f"| {name} | {moment_errs[0][0]:g}, {moment_errs[0][1]:g}, {moment_errs[0][2]:g} / "
                    f"{moment_errs[1][0]:g}, {moment_errs[1][1]:g}, {moment_errs[1][2]:g} | "
                    f"{ulps(whole.results[4].doubles.values[0], true_var):g} | {ulps(np_squares, want_squares):.3g} | "
                    f"{ulps(np_var, true_var):.3g} |")
            with np.errstate(all="ignore"):
                np_sum = float(np.sum(x, dtype=np.float64))
            print(f"| {name} | {len(x):,} | {errs[0][0]:g}, {errs[0][1]:g}, {errs[0][2]:g} / "
                  f"{errs[1][0]:g}, {errs[1][1]:g}, {errs[1][2]:g} | {ulps(np_sum, want_sum):.3g} |")
        print()
        print("| data | tally sum_squares, var, std: ulps from the stated answers (whole / streamed) | "
              "tally var: ulps from the variance rounded once | numpy sum of squares ulps | numpy.var ulps |")
        print("|---|---|---:|---:|---:|")
        for row in moment_rows:
            print(row)
    finally:
        server.stop()
    print(f"{bad} tally answers off their exact ones" + ("" if bad == 0 else " (FAILED)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
