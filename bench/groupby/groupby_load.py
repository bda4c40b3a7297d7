#!/usr/bin/env python3
"""GroupBy under load: many clients at once over mixed group counts, sizes
and sources, every answer checked.

Uploads int32 key and float32 value columns as resident datasets for each
pair of --groups and --rows, then runs --clients threads for --seconds, each
picking a case at random and sending GroupBy (sum, count, min, max, mean per
key) over the datasets or, for cases of at most --inline_rows rows, over the
columns sent inline, or, for cases of at most --streamed_rows rows, the
columns in chunks of --chunk_bytes with GroupByStream (the key's and the
value's chunks alternating). Every answer must equal numpy's (keys, counts, min and
max exactly; sums and means to float rounding) and, bit for bit, the first
answer of its case (the same request gives the same bits). A request the
server sheds (RESOURCE_EXHAUSTED past --max_inflight_bytes) is counted as
busy and retried after a short backoff. Prints answers, failures, wrong
answers, busy replies, rows per second and the server's peak RSS, and exits
1 on any failure or wrong answer. With --composite every case has a twin
grouped by two key columns, k // 8 (int32) and k % 8 (int8): the same
groups in the same order, so the same reference. With --wide_keys every
resident case has two twins more, keyed by int64 keys spread over the
whole 64-bit range and by float64 keys (each an ascending pool's k-th
value: again the same groups in the same order).

    python3 bench/groupby/groupby_load.py --server build/server/tally-server \\
        [--backend cpu|cuda] [--clients 64] [--seconds 30] \\
        [--groups 16,65536,1000000] [--rows 65536,1048576,4194304] [--composite] [--wide_keys]

TALLY_PB2_DIR may name a folder holding generated tally/v1/tally_pb2.py.
"""
import os
import random
import sys
import time

import grpc
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from groupby_bench import OPS, upload  # noqa: E402
from tally_test_server import LoadTally, load_arguments, load_messages, run_load, start_load_server  # noqa: E402


def reference(k, v):
    """numpy's answer: keys, then one array per op of OPS."""
    uniq, inverse, counts = np.unique(k, return_inverse=True, return_counts=True)
    w = v.astype(np.float64)
    sums = np.bincount(inverse, weights=w, minlength=len(uniq))
    scale = np.bincount(inverse, weights=np.abs(w), minlength=len(uniq))
    mins = np.full(len(uniq), np.inf)
    np.minimum.at(mins, inverse, w)
    maxs = np.full(len(uniq), -np.inf)
    np.maximum.at(maxs, inverse, w)
    return uniq, sums, counts, mins, maxs, scale


# The --wide_keys twins' keys: ascending pools, the k-th value for key k.
WIDE_POOLS = {}


def answer_of(pages):
    if pages and pages[0].keys[0].dtype in WIDE_POOLS:  # back to the codes the pool was indexed by
        pool = WIDE_POOLS[pages[0].keys[0].dtype]
        wide = np.concatenate([np.frombuffer(p.keys[0].data, pool.dtype) for p in pages])
        keys = np.searchsorted(pool, wide).astype(np.int32)
        if not np.array_equal(pool[np.minimum(keys, len(pool) - 1)], wide):
            keys = np.full(len(wide), -1, np.int32)  # a key not in the pool: wrong
    else:
        keys = np.concatenate([np.frombuffer(p.keys[0].data, np.int32) for p in pages])
    if pages and len(pages[0].keys) == 2:  # a composite twin: k // 8 and k % 8
        low = np.concatenate([np.frombuffer(p.keys[1].data, np.int8) for p in pages])
        keys = keys * 8 + low.astype(np.int32)
    cols = []
    for j in range(len(OPS)):
        parts = []
        for p in pages:
            r = p.results[j]
            parts.append(np.array(r.doubles.values if r.HasField("doubles")
                                  else r.uint64s.values if r.HasField("uint64s") else r.int64s.values))
        cols.append(np.concatenate(parts))
    return keys, cols


def wrong(answer, ref):
    """Why the answer differs from numpy's, or None."""
    keys, (sums, counts, mins, maxs, means) = answer
    uniq, want_sums, want_counts, want_mins, want_maxs, scale = ref
    if not np.array_equal(keys, uniq):
        return "keys"
    if not np.array_equal(counts, want_counts):
        return "counts"
    if not (np.array_equal(mins, want_mins) and np.array_equal(maxs, want_maxs)):
        return "min/max"
    if not np.all(np.abs(sums - want_sums) <= 1e-5 * scale + 1e-30):
        return "sums"
    if not np.all(np.abs(means - want_sums / want_counts) <= 1e-5 * scale / want_counts + 1e-30):
        return "means"
    return None


def main():
    p = load_arguments(__doc__, os.path.join(ROOT, "proto"))
    p.add_argument("--groups", default="16,65536,1000000")
    p.add_argument("--rows", default="65536,1048576,4194304")
    p.add_argument("--inline_rows", type=int, default=1 << 20, help="cases this small also go inline")
    p.add_argument("--streamed_rows", type=int, default=1 << 22, help="cases this small also go in chunks")
    p.add_argument("--chunk_bytes", type=int, default=1 << 20, help="GroupByStream's chunks")
    p.add_argument("--composite", action="store_true", help="also every case grouped by two key columns")
    p.add_argument("--wide_keys", action="store_true", help="also every resident case by sparse int64 and float64 keys")
    args = p.parse_args()

    pb = load_messages(args.proto)
    server = start_load_server(args, pb, "--max_groups=67108864")
    group_by = server.channel.unary_stream("/tally.v1.Aggregator/GroupBy",
                                          request_serializer=pb.GroupByRequest.SerializeToString,
                                          response_deserializer=pb.GroupByResponse.FromString)
    group_by_stream = server.channel.stream_stream("/tally.v1.Aggregator/GroupByStream",
                                                   request_serializer=pb.GroupByStreamRequest.SerializeToString,
                                                   response_deserializer=pb.GroupByResponse.FromString)

    def streamed(bare, rows, columns):
        """GroupByStream's messages: the header, then each column's chunks,
        the columns' in turn."""
        yield pb.GroupByStreamRequest(header=pb.GroupByStreamRequest.Header(request=bare, rows=rows))
        step = args.chunk_bytes
        for at in range(0, max(len(c) for c in columns), step):
            for i, c in enumerate(columns):
                if at < len(c):
                    yield pb.GroupByStreamRequest(column=i, chunk=c[at:at + step])

    aggregations = [pb.GroupAggregation(column="v", aggregation=pb.Aggregation(op=getattr(pb, "OP_" + o.upper())))
                    for o in OPS]
    rng = np.random.default_rng(7)
    if args.wide_keys:
        most = max(int(g) for g in args.groups.split(","))
        WIDE_POOLS[pb.DTYPE_INT64] = np.unique(rng.integers(-2**63, 2**63 - 1, 2 * most + 16, dtype=np.int64))[:most]
        WIDE_POOLS[pb.DTYPE_FLOAT64] = np.unique(rng.standard_normal(2 * most + 16) * 1e6)[:most]
    cases = []  # (label, request, rows, reference)
    for groups in (int(g) for g in args.groups.split(",")):
        for rows in (int(r) for r in args.rows.split(",")):
            k = rng.integers(0, groups, rows, dtype=np.int32)
            v = rng.standard_normal(rows, dtype=np.float32)
            ref = reference(k, v)
            name = f"{groups}_{rows}"
            upload(server, pb, f"k_{name}", k, pb.DTYPE_INT32)
            upload(server, pb, f"v_{name}", v, pb.DTYPE_FLOAT32)
            cases.append((f"dataset {name}", pb.GroupByRequest(
                columns=[pb.Column(name="k", dataset=f"k_{name}"), pb.Column(name="v", dataset=f"v_{name}")],
                keys=["k"], aggregations=aggregations), rows, ref))
            for dtype, pool in WIDE_POOLS.items():
                kind = pb.DType.Name(dtype).lower()
                upload(server, pb, f"k{kind}_{name}", pool[k], dtype)
                cases.append((f"dataset {name}, {kind} keys", pb.GroupByRequest(
                    columns=[pb.Column(name="k", dataset=f"k{kind}_{name}"),
                             pb.Column(name="v", dataset=f"v_{name}")],
                    keys=["k"], aggregations=aggregations), rows, ref))
            if rows <= args.inline_rows:
                cases.append((f"inline {name}", pb.GroupByRequest(
                    columns=[pb.Column(name="k", dtype=pb.DTYPE_INT32, data=k.tobytes()),
                             pb.Column(name="v", dtype=pb.DTYPE_FLOAT32, data=v.tobytes())],
                    keys=["k"], aggregations=aggregations), rows, ref))
            if rows <= args.streamed_rows:
                bare = pb.GroupByRequest(columns=[pb.Column(name="k", dtype=pb.DTYPE_INT32),
                                                  pb.Column(name="v", dtype=pb.DTYPE_FLOAT32)],
                                         keys=["k"], aggregations=aggregations)
                cases.append((f"streamed {name}", (bare, [k.tobytes(), v.tobytes()]), rows, ref))
            if args.composite:
                high, low = (k // 8).astype(np.int32), (k % 8).astype(np.int8)
                upload(server, pb, f"kh_{name}", high, pb.DTYPE_INT32)
                upload(server, pb, f"kl_{name}", low, pb.DTYPE_INT8)
                cases.append((f"dataset {name}, two keys", pb.GroupByRequest(
                    columns=[pb.Column(name="kh", dataset=f"kh_{name}"), pb.Column(name="kl", dataset=f"kl_{name}"),
                             pb.Column(name="v", dataset=f"v_{name}")],
                    keys=["kh", "kl"], aggregations=aggregations), rows, ref))
                if rows <= args.inline_rows:
                    cases.append((f"inline {name}, two keys", pb.GroupByRequest(
                        columns=[pb.Column(name="kh", dtype=pb.DTYPE_INT32, data=high.tobytes()),
                                 pb.Column(name="kl", dtype=pb.DTYPE_INT8, data=low.tobytes()),
                                 pb.Column(name="v", dtype=pb.DTYPE_FLOAT32, data=v.tobytes())],
                        keys=["kh", "kl"], aggregations=aggregations), rows, ref))

    tally = LoadTally("rows")
    stop = time.monotonic() + args.seconds

    def client(seed):
        pick = random.Random(seed)
        while time.monotonic() < stop:
            label, request, rows, ref = pick.choice(cases)
            try:
                if isinstance(request, tuple):
                    answer = answer_of(list(group_by_stream(streamed(request[0], rows, request[1]), timeout=600)))
                else:
                    answer = answer_of(list(group_by(request, timeout=600)))
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    # The server sheds load past --max_inflight_bytes and
                    # asks for a retry with backoff, as a client would.
                    tally.busy()
                else:
                    tally.failed(f"{label}: {e.code().name}: {e.details()[:200]}")
                time.sleep(pick.uniform(0.05, 0.2))
                continue
            bits = answer[0].tobytes() + b"".join(c.tobytes() for c in answer[1])
            tally.answered(label, wrong(answer, ref), bits, rows)

    seconds, peak = run_load(server, args.clients, client, stop)
    server.stop()
    return tally.report(args.backend, args.clients, len(cases), seconds, peak)


if __name__ == "__main__":
    sys.exit(main())
