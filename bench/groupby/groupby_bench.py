#!/usr/bin/env python3
"""GroupBy's server time against pandas, pyarrow and torch on the same data,
in one run.

int32 keys (uniform over G groups, or Zipf(1.1) skew) and float32 values,
ROWS of each, uploaded once as two resident datasets (with --keys sparse,
int64 keys drawn from G values spread over the whole 64-bit range; with
--keys float, float64 keys from G values of a normal distribution); then GroupBy over
them (sum, count, min, max, mean of the values per key, or --ops, ascending keys), best
of --reps, checked against numpy. The baselines that are installed run on
the same arrays: pandas' and pyarrow's group-by on the host's cores, and
torch's index_add_/bincount/scatter_reduce on the GPU (with --torch).

    python3 bench/groupby/groupby_bench.py --server build/server/tally-server \\
        [--backend cpu|cuda] [--rows 2**26] [--groups 16,65536,1000000] [--zipf] \\
        [--keys dense|sparse|float] \\
        [--reps 3] [--baselines pandas,pyarrow,torch] [--proto proto]

TALLY_PB2_DIR may name a folder holding generated tally/v1/tally_pb2.py
(for hosts without protoc). Prints one tab-separated row per case.
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from best_of import best  # noqa: E402
from tally_test_server import TallyServer, load_messages  # noqa: E402

OPS = ("sum", "count", "min", "max", "mean")


def keys_for(rng, rows, groups, zipf, kind="dense"):
    if not zipf:
        codes = rng.integers(0, groups, rows, dtype=np.int32)
    else:
        # Zipf(1.1) over `groups` ranks: a few keys hold most rows.
        ranks = np.arange(1, groups + 1, dtype=np.float64)
        p = ranks ** -1.1
        p /= p.sum()
        codes = rng.choice(groups, size=rows, p=p).astype(np.int32)
    if kind == "dense":
        return codes
    if kind == "sparse":
        pool = np.unique(rng.integers(-2**63, 2**63 - 1, groups + groups // 8 + 16, dtype=np.int64))
        return rng.permutation(pool)[:groups][codes]
    pool = np.unique(rng.standard_normal(groups + groups // 8 + 16) * 1000.0)
    return rng.permutation(pool)[:groups][codes]


KEY_DTYPES = {"dense": "DTYPE_INT32", "sparse": "DTYPE_INT64", "float": "DTYPE_FLOAT64"}


def upload(server, pb, name, x, dtype, chunk=8 << 20):
    data = x.tobytes()

    def messages():
        yield pb.PutDatasetRequest(header=pb.PutDatasetRequest.Header(
            name=name, replace=True, spec=pb.ArraySpec(dtype=dtype, length=len(x))))
        for at in range(0, len(data), chunk):
            yield pb.PutDatasetRequest(chunk=data[at:at + chunk])
    server.put_dataset(messages(), timeout=600)


def check(pages, pb, k, v, ops):
    """The answer against numpy: keys, counts exact; sums, means to float
    rounding; min and max exact (each of `ops` asked)."""
    from tally._arrays import result_values  # the client's reading of either form of the numbers
    keys = np.concatenate([np.frombuffer(p.keys[0].data, k.dtype) for p in pages])
    res = {op: np.concatenate([result_values(p.results[j]) for p in pages]) for j, op in enumerate(ops)}
    try:  # pandas' hash factorize: numpy's sort of 2^28 int64 keys takes half a minute
        import pandas as pd
        inverse, uniq = pd.factorize(k, sort=True)
        counts = np.bincount(inverse, minlength=len(uniq))
    except ImportError:
        uniq, inverse, counts = np.unique(k, return_inverse=True, return_counts=True)
    assert np.array_equal(keys, uniq), "keys differ"
    for op in ops:
        assert len(res[op]) == len(uniq), f"{op}: {len(res[op])} groups, not {len(uniq)}"
    if "count" in res:
        assert np.array_equal(res["count"], counts), "counts differ"
    sums = np.bincount(inverse, weights=v.astype(np.float64), minlength=len(uniq))
    scale = np.bincount(inverse, weights=np.abs(v.astype(np.float64)), minlength=len(uniq))
    if "sum" in res:
        assert np.all(np.abs(res["sum"] - sums) <= 1e-5 * scale + 1e-30), "sums differ"
    if "mean" in res:
        assert np.all(np.abs(res["mean"] - sums / counts) <= (1e-5 * scale + 1e-30) / counts), "means differ"
    for op, extreme, start in (("min", np.minimum, np.inf), ("max", np.maximum, -np.inf)):
        if op in res:
            want = np.full(len(uniq), start)
            extreme.at(want, inverse, v.astype(np.float64))
            assert np.array_equal(res[op], want), f"{op} differs"
    return len(uniq)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--rows", type=lambda s: int(eval(s)), default=1 << 22)
    p.add_argument("--groups", default="16,65536,1000000")
    p.add_argument("--zipf", action="store_true", help="also Zipf(1.1) keys")
    p.add_argument("--keys", default="dense", choices=sorted(KEY_DTYPES),
                   help="int32 keys 0..G-1, int64 keys over every bit, or float64 keys")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ops", default=",".join(OPS), help="the functions asked per key, of " + ",".join(OPS))
    p.add_argument("--baselines", default="pandas")
    p.add_argument("--proto", default=os.path.join(ROOT, "proto"))
    p.add_argument("--server_args", default="", help="extra tally-server flags, space-separated")
    p.add_argument("--trace", action="store_true",
                   help="run the server with --log_level=trace and print each GroupBy's phases at the end")
    args = p.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    if not ops or any(o not in OPS for o in ops):
        p.error(f"--ops: a list of {','.join(OPS)}, not {args.ops!r}")

    pb = load_messages(args.proto)
    extra = [f"--backend={args.backend}", "--health_listen=", "--max_groups=67108864"] + args.server_args.split()
    if args.trace:
        extra.append("--log_level=trace")
    server = TallyServer(args.server, pb, [a for a in extra if a])
    group_by = server.channel.unary_stream("/tally.v1.Aggregator/GroupBy",
                                          request_serializer=pb.GroupByRequest.SerializeToString,
                                          response_deserializer=pb.GroupByResponse.FromString)
    baselines = [b for b in args.baselines.split(",") if b]
    rng = np.random.default_rng(1)
    print("keys\tgroups\trows\tengine\tseconds\tG rows/s")
    try:
        for zipf in ([False, True] if args.zipf else [False]):
            for groups in (int(g) for g in args.groups.split(",")):
                k = keys_for(rng, args.rows, groups, zipf, args.keys)
                v = rng.standard_normal(args.rows, dtype=np.float32)
                upload(server, pb, "gb_k", k, getattr(pb, KEY_DTYPES[args.keys]))
                upload(server, pb, "gb_v", v, pb.DTYPE_FLOAT32)
                request = pb.GroupByRequest(
                    columns=[pb.Column(name="k", dataset="gb_k"), pb.Column(name="v", dataset="gb_v")], keys=["k"],
                    aggregations=[pb.GroupAggregation(column="v", aggregation=pb.Aggregation(
                        op=getattr(pb, "OP_" + o.upper()), values_as_bytes=True)) for o in ops])
                seconds = float("inf")
                pages = None
                for _ in range(args.reps):
                    pages = list(group_by(request, timeout=600))
                    seconds = min(seconds, pages[-1].execution.server_seconds)
                made = check(pages, pb, k, v, ops)
                label = ("zipf1.1" if zipf else "uniform") + ("" if args.keys == "dense" else " " + args.keys)
                print(f"{label}\t{made}\t{args.rows}\ttally-{args.backend}\t{seconds:.6f}\t{args.rows / seconds / 1e9:.2f}",
                      flush=True)
                for b in baselines:
                    t = run_baseline(b, k, v, args.reps)
                    if t is not None:
                        print(f"{label}\t{made}\t{args.rows}\t{b}\t{t:.6f}\t{args.rows / t / 1e9:.3f}", flush=True)
    finally:
        log = server.stop() or ""
        if args.trace:
            print("\n".join(line for line in log.splitlines()
                            if "GroupBy" in line or "segments:" in line or "direct pass:" in line))


def run_baseline(name, k, v, reps):
    if name == "pandas":
        import pandas as pd
        df = pd.DataFrame({"k": k, "v": v})
        return best(lambda: df.groupby("k").agg(s=("v", "sum"), c=("v", "count"), lo=("v", "min"), hi=("v", "max"),
                                                m=("v", "mean")), reps)[1]
    if name == "pyarrow":
        import pyarrow as pa
        t = pa.table({"k": k, "v": v})
        return best(lambda: t.group_by("k").aggregate([("v", "sum"), ("v", "count"), ("v", "min"), ("v", "max"),
                                                       ("v", "mean")]), reps)[1]
    if name == "torch":
        import torch
        if not torch.cuda.is_available():
            return None
        keys = torch.from_numpy(k.astype(np.int64) if k.dtype.kind == "i" else k).cuda()
        vv = torch.from_numpy(v).cuda()
        dense = k.dtype == np.int32
        groups = int(k.max()) + 1 if dense else 0  # known before the call, as tally's server knows it

        def run():
            # Keys 0..G-1 index the groups; others are numbered by a sort
            # first (torch.unique), as a sparse key needs.
            if dense:
                kk, g = keys, groups
            else:
                uniq, kk = torch.unique(keys, return_inverse=True)
                g = len(uniq)
            s = torch.zeros(g, device="cuda").index_add_(0, kk, vv)
            c = torch.bincount(kk, minlength=g)
            lo = torch.full((g,), float("inf"), device="cuda").scatter_reduce(0, kk, vv, "amin")
            hi = torch.full((g,), float("-inf"), device="cuda").scatter_reduce(0, kk, vv, "amax")
            m = s / c
            torch.cuda.synchronize()
            return m, lo, hi
        run()
        return best(run, reps)[1]
    return None


if __name__ == "__main__":
    main()
