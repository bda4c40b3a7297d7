#!/usr/bin/env python3
"""The h2o db-benchmark's group-by questions through tally's Python client,
beside pandas and pyarrow on the same data, every tally answer checked
against pandas'.

The data as the benchmark's generator (groupby-datagen.R) makes it, N rows
and K groups per id column: id1 and id2 strings of K values ("id001"),
id3 strings of N/K values ("id0000000001"), id4 and id5 integers in 1..K,
id6 integers in 1..N/K, v1 in 1..5, v2 in 1..15, v3 uniform in [0, 100)
rounded to 6 decimals. The string ids are pandas categories, as the
benchmark's pandas solution reads them, so tally's client sends their codes
(the strings are factorised on the client) and pandas groups them with
observed=True.

The questions these functions express (the benchmark's numbering):
    q1  sum v1 by id1                  q5  sum v1, v2, v3 by id6
    q2  sum v1 by id1, id2             q6  median and std of v3 by id4, id5
    q3  sum v1, mean v3 by id3         q7  max v1 - min v2 by id3
    q4  mean v1, v2, v3 by id4         q8  largest two v3 by id6
                                       q10 sum v3, count by id1..id6
(q8 is Client.groupby_nlargest against pandas' groupby(...).nlargest(2),
without pyarrow, which has no such aggregation, and not of datasets, whose
float column's nlargest needs the values on the client.)
Groups are asked in ascending key order (sort=True) of every engine.

    python3 bench/groupby/h2o_bench.py --server build/server/tally-server \\
        [--backend cpu|cuda] [--rows 1e7] [--k 100] [--questions q1,q2,...] \\
        [--reps 3] [--baselines pandas,pyarrow] [--inline | --datasets]

By default each question sends its columns of the DataFrame (through
shared memory to a server on this host; with --inline over gRPC, as to a
server on another host: in chunks, GroupByStream, past 4 MiB), as a user
of Client.groupby(df, ...) would. With --datasets the columns are
uploaded once as resident datasets (the category ids as their codes; the
upload's time printed apart, as pandas' and pyarrow's data is in memory
before their questions) and every question names them: the question
alone, as a service that keeps its tables on the server asks it.

Needs the tally package (the build's client/python) and tests/python on
PYTHONPATH, numpy and pandas; pyarrow where installed. Prints one
tab-separated row per question and engine: seconds (best of --reps, the
call's wall time, data sent each time) and whether tally's answer equals
pandas' (floats to rtol 1e-9: sums in another order); exits 1 when one
does not.
"""
import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from best_of import best  # noqa: E402

QUESTIONS = {
    "q1": (["id1"], {"v1": "sum"}),
    "q2": (["id1", "id2"], {"v1": "sum"}),
    "q3": (["id3"], {"v1": "sum", "v3": "mean"}),
    "q4": (["id4"], {"v1": "mean", "v2": "mean", "v3": "mean"}),
    "q5": (["id6"], {"v1": "sum", "v2": "sum", "v3": "sum"}),
    "q6": (["id4", "id5"], {"v3": ["median", "std"]}),
    "q7": (["id3"], {"v1": "max", "v2": "min"}),
    "q10": (["id1", "id2", "id3", "id4", "id5", "id6"], {"v3": "sum", "v1": "size"}),
}
# Questions of each group's largest values: (keys, column, how many).
LARGEST = {"q8": (["id6"], "v3", 2)}


def make_data(n, k, seed):
    """The generator's columns, string ids as categories."""
    rng = np.random.default_rng(seed)
    nk = max(1, n // k)

    def strings(fmt, count):
        return pd.Categorical.from_codes(rng.integers(0, count, n), categories=[fmt % (i + 1) for i in range(count)])

    return pd.DataFrame({
        "id1": strings("id%03d", k), "id2": strings("id%03d", k), "id3": strings("id%010d", nk),
        "id4": rng.integers(1, k + 1, n), "id5": rng.integers(1, k + 1, n), "id6": rng.integers(1, nk + 1, n),
        "v1": rng.integers(1, 6, n), "v2": rng.integers(1, 16, n), "v3": np.round(rng.uniform(0, 100, n), 6)})


def finish(q, out):
    """q7's range, computed from the two aggregations as the benchmark does."""
    if q == "q7":
        out = out.assign(range_v1_v2=out["v1"] - out["v2"])[["range_v1_v2"]]
    return out


def pandas_answer(df, q):
    if q in LARGEST:
        by, column, n = LARGEST[q]
        return df.groupby(by, sort=True, observed=True)[column].nlargest(n).to_frame()
    by, agg = QUESTIONS[q]
    return finish(q, df.groupby(by, sort=True, observed=True).agg(agg))


def pyarrow_answer(table, q):
    by, agg = QUESTIONS[q]
    names = {"sum": "sum", "mean": "mean", "max": "max", "min": "min", "size": "count_all", "median": "approximate_median",
             "std": "stddev"}
    aggs = []
    for column, funcs in agg.items():
        for f in ([funcs] if isinstance(funcs, str) else funcs):
            if f == "size":
                aggs.append(([], "count_all"))
            elif f == "std":
                import pyarrow.compute as pc
                aggs.append((column, "stddev", pc.VarianceOptions(ddof=1)))
            else:
                aggs.append((column, names[f]))
    return table.group_by(by).aggregate(aggs)


def plain(index):
    """An index's values without their dtype's trappings (categories)."""
    if isinstance(index, pd.MultiIndex):
        return pd.MultiIndex.from_arrays([np.asarray(index.get_level_values(i)) for i in range(index.nlevels)])
    return pd.Index(np.asarray(index))


def upload(client, df):
    """Each column as a resident dataset (a category as its codes)."""
    out = {}
    for c in df.columns:
        s = df[c]
        a = s.cat.codes.to_numpy() if isinstance(s.dtype, pd.CategoricalDtype) else s.to_numpy()
        out[c] = client.put_dataset(f"h2o-{c}", np.ascontiguousarray(a), replace=True)
    return out


def dataset_answer(client, df, resident, q):
    """The question over the resident columns, as a DataFrame like pandas'
    (the keys' codes turned back into their categories, as the client does
    for a DataFrame's: a Categorical of the codes, not 10M strings that
    the index would factorise again)."""
    by, agg = QUESTIONS[q]
    got = client.groupby({c: resident[c] for c in dict.fromkeys(by + list(agg))}, by, agg, sort=True)
    levels = []
    for c in by:
        keys = got.pop(c)
        s = df[c]
        levels.append(pd.Categorical.from_codes(keys, dtype=s.dtype) if isinstance(s.dtype, pd.CategoricalDtype)
                      else keys)
    index = pd.MultiIndex.from_arrays(levels, names=by) if len(by) > 1 else pd.Index(levels[0], name=by[0])
    return finish(q, pd.DataFrame(got, index=index))


def same(a, b):
    """Whether tally's frame equals pandas' (floats to rtol 1e-9), both
    sorted by their keys: pandas before 2.0 lists observed categories in the
    order they are first seen even with sort=True; tally, as pandas 2, in
    the categories' order."""
    a, b = a.sort_index(), b.sort_index()
    a.index, b.index = plain(a.index), plain(b.index)
    try:
        pd.testing.assert_frame_equal(a, b, check_dtype=False, check_exact=False, rtol=1e-9,
                                      check_index_type=False, check_column_type=False, check_names=False)
        return "yes"
    except AssertionError as e:
        return "NO: " + str(e).splitlines()[0][:120]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", help="a tally-server binary to start (else --target)")
    p.add_argument("--target", help="a running server's host:port")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--rows", type=lambda s: int(float(s)), default=10_000_000)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--questions", default=",".join(sorted({**QUESTIONS, **LARGEST}, key=lambda q: int(q[1:]))))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--baselines", default="pandas,pyarrow")
    p.add_argument("--seed", type=int, default=108)
    p.add_argument("--inline", action="store_true",
                   help="send the frame over gRPC even to a server on this host (the client's "
                        "shared_memory=False): in the request, or in chunks (GroupByStream) past 4 MiB")
    p.add_argument("--datasets", action="store_true",
                   help="upload the columns once as resident datasets and ask every question of them")
    p.add_argument("--server_flag", action="append", default=[],
                   help="a flag for the started server, e.g. --server_flag=--max_inflight_bytes=17179869184")
    p.add_argument("--trace", action="store_true",
                   help="run the server with --log_level=trace and print each GroupBy's phases at the end")
    args = p.parse_args()

    import tally
    server = None
    if args.server:
        from tally_test_server import TallyServer
        from tally.v1 import tally_pb2
        server = TallyServer(args.server, tally_pb2, [f"--backend={args.backend}", "--health_listen=",
                                                      "--max_groups=67108864"] +
                             (["--log_level=trace"] if args.trace else []) + args.server_flag)
        target = f"127.0.0.1:{server.port}"
    elif args.target:
        target = args.target
    else:
        p.error("give --server or --target")
    t0 = time.perf_counter()
    df = make_data(args.rows, args.k, args.seed)
    print(f"# {args.rows} rows, K={args.k}, made in {time.perf_counter() - t0:.1f} s; tally {args.backend} at {target}",
          flush=True)
    table = None
    if "pyarrow" in args.baselines:
        try:
            import pyarrow as pa
            table = pa.Table.from_pandas(df, preserve_index=False)
        except ImportError:
            pass
    print("question\tengine\tseconds\tgroups\tequal to pandas")
    wrong = 0
    try:
        client = tally.Client(target, shared_memory=False if args.inline else None)
        resident = None
        if args.datasets:
            t0 = time.perf_counter()
            resident = upload(client, df)
            print(f"# the {len(resident)} columns uploaded as datasets in {time.perf_counter() - t0:.2f} s "
                  f"({resident['v1'].place})", flush=True)
        for q in args.questions.split(","):
            if q in LARGEST and resident is not None:
                print(f"{q}\ttally-{args.backend}-datasets\tn/a\t\t(a float column's nlargest needs its values "
                      f"on the client)", flush=True)
                continue
            by, agg = QUESTIONS.get(q, (None, None))
            if q in LARGEST:
                by, column, n = LARGEST[q]
                mine, t = best(lambda: client.groupby_nlargest(df, by, column, n, sort=True, timeout=3600).to_frame(),
                               args.reps)
            elif resident is not None:
                mine, t = best(lambda: dataset_answer(client, df, resident, q), args.reps)
            else:
                mine, t = best(lambda: finish(q, client.groupby(df, by, agg, sort=True, observed=True,
                                                                timeout=3600)), args.reps)
            ref, t_pandas = best(lambda: pandas_answer(df, q), args.reps if "pandas" in args.baselines else 1)
            verdict = same(mine, ref)
            wrong += verdict != "yes"
            engine = f"tally-{args.backend}" + ("-datasets" if resident is not None else "")
            print(f"{q}\t{engine}\t{t:.4f}\t{len(mine)}\t{verdict}", flush=True)
            if "pandas" in args.baselines:
                print(f"{q}\tpandas\t{t_pandas:.4f}\t{len(ref)}\t", flush=True)
            if table is not None and q not in LARGEST:
                try:
                    arrow, t_arrow = best(lambda: pyarrow_answer(table, q), args.reps)
                    print(f"{q}\tpyarrow\t{t_arrow:.4f}\t{arrow.num_rows}\t", flush=True)
                except Exception as e:  # an aggregation or key type this pyarrow lacks
                    print(f"{q}\tpyarrow\tn/a\t\t{type(e).__name__}: {str(e)[:80]}", flush=True)
    finally:
        if server is not None:
            log = server.stop() or ""
            if args.trace:
                print("\n".join(line for line in log.splitlines() if "GroupBy" in line))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
