#!/usr/bin/python3
"""hll and ddsketch against exact answers, checked against their contracts.

For each distribution and each size n (1, 10, 100, ... and 2^--max_log2),
draws R rows of n elements (R = --seeds while R * n fits in --row_budget
elements, else one row), uploads them to a tally server as one resident
dataset (a 2-D array, answered per row; a single row is uploaded 1-D and
answered whole) and asks, in one AggregateDataset call, for hll at every
--precisions and ddsketch at every --accuracies with the quantiles --q.
The exact answers come from numpy on the same rows: the number of distinct
values (runs of the sorted row, which is len(numpy.unique(row))) and
numpy.quantile(row, q, method="lower"), the element at sorted position
floor(q * (n - 1)) that tally.proto's OP_DDSKETCH names. Then, for each
precision p, up to --seeds rows holding exactly 2^p / 4 distinct values
(each twice), the most hll answers exactly.

The contracts (tally.proto, OP_HLL and OP_DDSKETCH) and how they are checked:
  hll        exact while a row has at most 2^p / 4 distinct values: every
             such answer must equal the exact count. Beyond, a relative
             standard error of about sigma = 1.04 / sqrt(2^p): the root mean
             square error of a precision's runs must be within
             --hll_rms_slack sigma, and from precision --hll_tail_precision
             on (2^8 registers: there the error of an ideal HyperLogLog is
             close to normal; at 16 registers it passes 5 sigma in 0.3% of
             runs) each answer within --hll_sigmas sigma.
  ddsketch   every answer within relative_accuracy * |x| of the exact x.

Prints a markdown table of every (distribution, n, function, q) with its
worst run, then the hll error spread per precision (the share of runs
within 1, 2 and 3 sigma; a normal error gives 68.3%, 95.4%, 99.7%) and the
worst ddsketch error per distribution and accuracy. Exits 1 if any answer is
outside its contract, so it serves as a check too (too slow for CTest:
--max_log2=28 --row_budget=67108864 takes 8 minutes on 2 cores and 2.2 GB
here, as much again in the server). Needs numpy, grpcio and the tally
package with its generated stubs on PYTHONPATH (copy client/python/tally
into DIR, then python3 client/python/setup.py generate DIR); from the
repository root:

    PYTHONPATH=DIR /usr/bin/python3 bench/cpu/sketch_accuracy.py [--max_log2 20] [--server build/server/tally-server]
"""
import argparse
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from tally_test_server import TallyServer  # noqa: E402
import tally  # noqa: E402
from tally.v1 import tally_pb2  # noqa: E402

INT32_MAX = np.iinfo(np.int32).max
CHUNK = 1 << 22  # elements drawn at a time, so that a 2^28-element draw needs no float64 copy of it

# name -> (dtype, draw(rng, k): k elements, the largest n whose runs join
# hll's error spread). Integers uniform over [0, 2^31); floats uniform over
# [-1, 1) (2^24 values); Zipf with a = 1.1 (about 11% of its draws clipped
# to 2^31 - 1) and a = 1.5; lognormal with mu = 0, sigma = 2. hll's hash is
# fixed, so rows that share many values are not independent runs of its
# error: the spread takes a size's rows only while two of them share under
# about 5% of their values (uniform int32 to 10^8; the float32 ones to 10^6,
# where uniform shares 6% and lognormal 1%, against 45% and 11% at 10^7),
# and no Zipf rows (they share 1, 2, 3, ...). Every run is still checked on
# its own.
DISTRIBUTIONS = {
    "uniform_int32": (np.int32, lambda rng, k: rng.integers(0, INT32_MAX, k, dtype=np.int32, endpoint=True),
                      10 ** 8),
    "uniform_float32": (np.float32, lambda rng, k: rng.random(k, dtype=np.float32) * np.float32(2) - np.float32(1),
                        10 ** 6),
    "zipf1.1_int32": (np.int32, lambda rng, k: np.minimum(rng.zipf(1.1, k), INT32_MAX).astype(np.int32), 0),
    "zipf1.5_int32": (np.int32, lambda rng, k: np.minimum(rng.zipf(1.5, k), INT32_MAX).astype(np.int32), 0),
    "lognormal_float32": (np.float32, lambda rng, k: rng.lognormal(0.0, 2.0, k).astype(np.float32), 10 ** 6),
}


def draw(distribution, rng, rows, n):
    dtype, fn, _ = DISTRIBUTIONS[distribution]
    x = np.empty(rows * n, dtype=dtype)
    for at in range(0, x.size, CHUNK):
        x[at:at + CHUNK] = fn(rng, min(CHUNK, x.size - at))
    return x.reshape(rows, n)


def sizes(max_log2):
    top = 1 << max_log2
    out = [10 ** k for k in range(0, 20) if 10 ** k < top]
    return out + [top]


def exact_answers(x, qs):
    """Sorts x's rows in place; returns each row's distinct count and its
    numpy.quantile(method="lower") values, shape (rows, len(qs)), float64."""
    x.sort(axis=1)
    distinct = 1 + np.count_nonzero(x[:, 1:] != x[:, :-1], axis=1)
    if not qs:
        return distinct, None
    lower = np.quantile(x, qs, axis=1, method="lower").T.astype(np.float64)
    # The rank OP_DDSKETCH names, floor(q * (n - 1)), is numpy's "lower".
    ranks = [math.floor(q * (x.shape[1] - 1)) for q in qs]
    assert np.array_equal(lower, x[:, ranks].astype(np.float64)), "numpy's lower is not floor(q * (n - 1))"
    if x.shape[1] <= 10000:
        assert all(len(np.unique(r)) == d for r, d in zip(x[:4], distinct))
    return distinct, lower


def fmt_value(v):
    v = float(v)
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.7g}"


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def hll_rows(distribution, n, distinct, got, pr, args, spread):
    """Checks one precision's answers for one size's rows; returns its table
    row and the runs in the exact range (all, and exact), and adds the runs
    beyond it to `spread` unless that is None."""
    m = 1 << pr
    sigma = 1.04 / math.sqrt(m)
    rel = (got - distinct) / distinct
    in_exact = distinct <= m // 4
    tail = pr >= args.hll_tail_precision
    ok = np.where(in_exact, got == distinct, np.abs(rel) <= args.hll_sigmas * sigma if tail else True)
    if spread is not None:
        spread.extend(zip((distinct[~in_exact] / m).tolist(), rel[~in_exact].tolist()))
    beyond = f"{args.hll_sigmas:g} sigma = {args.hll_sigmas * sigma:.2%}" if tail else "spread"
    if in_exact.all():
        bound = "exact"
    elif not in_exact.any():
        bound = beyond
    else:
        bound = f"exact to 2^{pr - 2}, then {beyond}"
    w = int(np.argmax(np.abs(rel)))
    return (distribution, n, len(got), f"hll p={pr}", fmt_value(distinct[w]), fmt_value(got[w]), f"{rel[w]:+.3%}",
            bound, bool(ok.all())), int(in_exact.sum()), int((in_exact & (got == distinct)).sum())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default=os.path.join(ROOT, "build", "server", "tally-server"))
    p.add_argument("--backend", default="cpu")
    p.add_argument("--max_log2", type=int, default=20, help="largest size, 2^max_log2 elements")
    p.add_argument("--distributions", default=",".join(DISTRIBUTIONS),
                   help="comma-separated, of: " + ", ".join(DISTRIBUTIONS))
    p.add_argument("--precisions", default="4,10,12,14,16,18")
    p.add_argument("--accuracies", default="0.001,0.01,0.5")
    p.add_argument("--q", default="0,0.001,0.01,0.25,0.5,0.75,0.99,0.999,1")
    p.add_argument("--seeds", type=int, default=200, help="rows (independent draws) per size where they fit")
    p.add_argument("--row_budget", type=int, default=1 << 23, help="elements per size drawn as several rows")
    p.add_argument("--hll_sigmas", type=float, default=5.0, help="hll: the largest error of one run, in sigma")
    p.add_argument("--hll_tail_precision", type=int, default=8,
                   help="hll: the least precision whose runs are held to --hll_sigmas one by one")
    p.add_argument("--hll_rms_slack", type=float, default=1.25,
                   help="hll: the largest root mean square error of a precision's runs, in sigma")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    distributions = args.distributions.split(",")
    for d in distributions:
        if d not in DISTRIBUTIONS:
            sys.exit(f"unknown distribution {d!r}; expected one of {', '.join(DISTRIBUTIONS)}")
    precisions = [int(v) for v in args.precisions.split(",")]
    accuracies = [float(v) for v in args.accuracies.split(",")]
    qs = [float(v) for v in args.q.split(",")]
    ops = ([tally.Op("hll", precision=pr) for pr in precisions]
           + [tally.Op("ddsketch", relative_accuracy=a, q=qs) for a in accuracies])

    server = TallyServer(args.server, tally_pb2, [f"--backend={args.backend}"])
    client = tally.Client(f"127.0.0.1:{server.port}", timeout=3600)
    table = []  # (distribution, n, runs, function, exact, answer, error, bound, within)
    spread = {pr: [] for pr in precisions}  # (distinct / 2^p, relative error) of the runs beyond the exact range
    exact_runs = {pr: [0, 0] for pr in precisions}  # runs in the exact range, and of them exact
    dd_worst = {}  # (distribution, alpha) -> (worst relative error, every answer within)
    execution = None
    started, head = time.time(), commit()
    try:
        for di, distribution in enumerate(distributions):
            spread_max_n = DISTRIBUTIONS[distribution][2]
            for n in sizes(args.max_log2):
                rows = max(1, min(args.seeds, args.row_budget // n))
                t0 = time.time()
                x = draw(distribution, np.random.default_rng([args.seed, di, n]), rows, n)
                client.put_dataset("x", x if rows > 1 else x.reshape(n), replace=True)
                answer = client.aggregate_dataset("x", ops)
                execution = answer.execution
                client.delete_dataset("x")
                distinct, lower = exact_answers(x, qs)
                del x

                for i, pr in enumerate(precisions):
                    got = np.asarray(answer[i], dtype=np.int64).reshape(rows)
                    row, runs, exact = hll_rows(distribution, n, distinct, got, pr, args,
                                                spread[pr] if n <= spread_max_n else None)
                    table.append(row)
                    exact_runs[pr][0] += runs
                    exact_runs[pr][1] += exact

                for j, alpha in enumerate(accuracies):
                    got = np.asarray(answer[len(precisions) + j], dtype=np.float64).reshape(rows, len(qs))
                    err = np.abs(got - lower)
                    ok = err <= alpha * np.abs(lower)  # a NaN answer fails; an exact 0 needs 0
                    with np.errstate(divide="ignore", invalid="ignore"):
                        rel = np.where(err == 0, 0.0, err / np.abs(lower))
                    rel = np.where(np.isnan(got), np.inf, rel)
                    worst, within = dd_worst.get((distribution, alpha), (0.0, True))
                    dd_worst[(distribution, alpha)] = (max(worst, float(rel.max())), within and bool(ok.all()))
                    for k, q in enumerate(qs):
                        w = int(np.argmax(rel[:, k]))
                        table.append((distribution, n, rows, f"ddsketch {alpha:g}, q={q:g}", fmt_value(lower[w, k]),
                                      fmt_value(got[w, k]), f"{rel[w, k]:.3e}", f"{alpha:g}", bool(ok[:, k].all())))
                print(f"{distribution}, n={n}, {rows} rows: {time.time() - t0:.1f} s", file=sys.stderr, flush=True)

        # The edge of hll's exact range: rows of exactly 2^p / 4 distinct values, each twice.
        for i, pr in enumerate(precisions):
            k = 1 << (pr - 2)
            rng = np.random.default_rng([args.seed, len(DISTRIBUTIONS), pr])
            rows = max(1, min(args.seeds, args.row_budget // (2 * k)))
            x = np.empty((rows, 2 * k), dtype=np.int32)
            for r in range(rows):
                values = rng.choice(INT32_MAX, size=k, replace=False).astype(np.int32)
                x[r] = rng.permutation(np.concatenate([values, values]))
            got = np.asarray(client.aggregate(x if rows > 1 else x.reshape(-1), [ops[i]])[0], dtype=np.int64)
            distinct = exact_answers(x, [])[0]
            row, runs, exact = hll_rows(f"uniform_int32, 2^{pr - 2} distinct each twice", 2 * k, distinct,
                                        got.reshape(rows), pr, args, None)
            table.append(row)
            exact_runs[pr][0] += runs
            exact_runs[pr][1] += exact
    finally:
        client.close()
        server.stop()

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"tally commit {head} ({os.path.relpath(args.server, ROOT)}), backend {execution.backend} on "
          f"{execution.device}; numpy {np.__version__} on {os.cpu_count()} CPUs ({cpu}); seed {args.seed}; "
          f"{time.time() - started:.0f} s")
    print(f"command: {' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}")
    print()
    print("Each row: the worst of `runs` independent rows of n elements (their exact answer and tally's).")
    print()
    print("| distribution | n | runs | function | exact | answer | error (relative) | bound | within |")
    print("|---|---:|---:|---|---:|---:|---:|---|---|")
    for dist, n, rows, fn, exact, got, err, bound, ok in table:
        print(f"| {dist} | {n} | {rows} | {fn} | {exact} | {got} | {err} | {bound} | {'yes' if ok else 'NO'} |")
    failed = sum(1 for row in table if not row[-1])

    print()
    print("hll beyond its exact range, the runs of rows that share few values (see DISTRIBUTIONS): relative error "
          "e = answer / exact - 1 against sigma = 1.04 / sqrt(2^p). Exact range: the runs with at most 2^p / 4 "
          "distinct values (every distribution), and how many were answered exactly.")
    print()
    print("| precision | sigma | exact range: runs, exact | runs beyond | mean e | rms e | rms / sigma | "
          "within 1 / 2 / 3 sigma | worst abs(e) / sigma | within |")
    print("|---:|---:|---|---:|---:|---:|---:|---|---:|---|")
    bands = ((0.25, 1), (1, 10), (10, 100), (100, math.inf))
    band_rows = []
    for pr in precisions:
        sigma = 1.04 / math.sqrt(1 << pr)
        runs, exact = exact_runs[pr]
        e = np.array([r for _, r in spread[pr]])
        ratio = np.array([d for d, _ in spread[pr]])
        if e.size == 0:
            print(f"| {pr} | {sigma:.3%} | {runs}, {exact} | 0 | | | | | | {'yes' if runs == exact else 'NO'} |")
            failed += runs != exact
            continue
        rms = float(np.sqrt(np.mean(e ** 2)))
        worst = float(np.abs(e).max())
        ok = (runs == exact and rms <= args.hll_rms_slack * sigma
              and (pr < args.hll_tail_precision or worst <= args.hll_sigmas * sigma))
        failed += not ok
        share = [float(np.mean(np.abs(e) <= s * sigma)) for s in (1, 2, 3)]
        print(f"| {pr} | {sigma:.3%} | {runs}, {exact} | {e.size} | {e.mean():+.3%} | {rms:.3%} | {rms / sigma:.2f} | "
              f"{share[0]:.1%} / {share[1]:.1%} / {share[2]:.1%} | {worst / sigma:.2f} | {'yes' if ok else 'NO'} |")
        for lo, hi in bands:
            sel = (ratio > lo) & (ratio <= hi)
            if sel.any():
                eb = e[sel]
                band_rows.append((pr, f"({lo:g}, {hi:g}]", int(sel.sum()), float(eb.mean()),
                                  float(np.sqrt(np.mean(eb ** 2))) / sigma,
                                  [float(np.mean(np.abs(eb) <= s * sigma)) for s in (1, 2, 3)]))
    print()
    print("The same runs by d / m, the row's distinct values over the registers:")
    print()
    print("| precision | d / m | runs | mean e | rms / sigma | within 1 / 2 / 3 sigma |")
    print("|---:|---|---:|---:|---:|---|")
    for pr, band, count, mean, rms_sigma, share in band_rows:
        print(f"| {pr} | {band} | {count} | {mean:+.3%} | {rms_sigma:.2f} | "
              f"{share[0]:.1%} / {share[1]:.1%} / {share[2]:.1%} |")

    print()
    print("ddsketch, the worst relative error over every size, q and run:")
    print()
    print("| distribution | relative_accuracy | worst error | worst / bound | within |")
    print("|---|---:|---:|---:|---|")
    for (dist, alpha), (worst, within) in dd_worst.items():
        print(f"| {dist} | {alpha:g} | {worst:.3e} | {worst / alpha:.3f} | {'yes' if within else 'NO'} |")

    print()
    print("every answer within its contract" if failed == 0 else f"{failed} rows OUTSIDE the contract")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
