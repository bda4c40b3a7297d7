"""Float sums, means, sums of squares, variances and standard deviations
whose bits do not depend on the path (tally.proto's exact float sums):
the same ill-conditioned arrays sent whole (Aggregate), streamed in odd
chunk sizes (AggregateStream), uploaded as datasets cut into 1, 3 and 4
shards, read from a shared-memory region, and split into parts whose
partial states are merged in several orders by the Python package; then
each row of a 2-D array and each segment of the same elements against the
row sent alone. Every path must give the same bits, and the sums must be
math.fsum's. Integer dtypes' means, sums of squares and variances come
from exact sums too: the same through every path, and each the stated
formula over the Python integers' sums.

usage: exact_paths_test.py TALLY_SERVER_BINARY [--backend=cpu]
(the package, built with its stubs, on PYTHONPATH; TALLY_SERVER_ARGS adds
server flags, e.g. "--routing=size --small_request_bytes=0" to keep every
request of a cuda server on the GPU)
"""
import os
from fractions import Fraction
import math
import sys
import unittest

import numpy as np

import tally
from tally.v1 import tally_pb2
from tally_test_server import TallyServer, client_test_main

SERVER_BINARY = None
BACKEND = "cpu"
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
OPS = ["sum", "nansum", "mean", "nanmean", "sum_squares", "var", "var:1", "nanvar", "std:1", "nanstd"]
# On integer dtypes the nan-ops are the plain ones (numpy's): left out.
INTEGER_OPS = ["sum", "mean", "sum_squares", "var", "var:1", "std:1"]
INTEGER_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.bool_)
SHARD_COUNTS = (1, 3, 4)
# Not a multiple of any element size: chunks cut elements.
ODD_CHUNK = 65_537


def ill_conditioned(rng, dtype, n):
    """Values whose float64 sum in any order loses most of their digits:
    pairs x, -x spread over many binades, a few large values that cancel,
    small ones beside them, and NaN for the nan-ops (a dtype's NaN of its
    own bits, so float32's survive the cast)."""
    wide = rng.lognormal(0.0, 8.0 if dtype == np.float64 else 4.0, n // 2)
    x = np.concatenate([wide, -wide * (1 + rng.normal(0, 1e-9, wide.size)), rng.normal(0, 1, n - 2 * wide.size)])
    x[rng.integers(0, n, 4)] = [1e15, -1e15, 3e14, -3e14] if dtype == np.float64 else [1e7, -1e7, 3e6, -3e6]
    rng.shuffle(x)
    x = x.astype(dtype)
    with_nan = x.copy()
    with_nan[rng.random(n) < 0.01] = np.nan
    return with_nan


def correctly_rounded(exact, dtype):
    """The float of `dtype` nearest the Fraction `exact`, ties to even."""
    near = np.asarray(float(exact)).astype(dtype)[()]  # within an ulp of it
    candidates = [np.nextafter(near, dtype(-np.inf)), near, np.nextafter(near, dtype(np.inf))]
    uint = np.uint32 if dtype == np.float32 else np.uint64
    return min(candidates, key=lambda v: (abs(Fraction(float(v)) - exact), int(np.asarray(v).view(uint)) & 1))


def values(results, ops=OPS):
    """A Results' answers in the ops' order."""
    return [results[k] for k in range(len(ops))]


def wide_integers(rng, dtype, n):
    """Integers over the dtype's whole range, skewed to its ends, so that
    int64 sums pass 2^53 (numpy's float64 mean rounds there) and squares
    pass 2^64 and 2^128."""
    if dtype == np.bool_:
        return rng.random(n) < 0.3
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    x[rng.random(n) < 0.2] = info.max
    if info.min < 0:
        x[rng.random(n) < 0.1] = info.min
    return x


def integer_answers(x):
    """tally.proto's stated formulas over exact integer sums S and Q of n
    elements: mean = float(S) / n, sum_squares = float(Q), M2 = (nQ - S^2)
    / n rounded once, var = M2 / (n - ddof), std = sqrt(var)."""
    ints = [int(v) for v in x]
    n, s, q = len(ints), sum(ints), sum(v * v for v in ints)
    m2 = float(Fraction(n * q - s * s, n))
    wraps = (s + 2**63) % 2**64 - 2**63 if np.dtype(x.dtype).kind == "i" else s % 2**64
    return {"sum": wraps if x.dtype != np.bool_ else s, "mean": float(s) / n, "sum_squares": float(q),
            "var": m2 / n, "var:1": m2 / (n - 1), "std:1": math.sqrt(m2 / (n - 1))}


def bits(value):
    """The float64 bits of a scalar answer (NaN compared by being NaN); an
    integer answer as itself."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    v = np.float64(value)
    return "nan" if np.isnan(v) else np.asarray(v).view(np.uint64).item()


class ExactPathsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.servers = {}
        cls.clients = {}
        for shards in SHARD_COUNTS:
            server = TallyServer(SERVER_BINARY, tally_pb2, [f"--backend={BACKEND}", f"--dataset_shards={shards}",
                                                            "--dataset_min_shard_bytes=4096",
                                                            *os.environ.get("TALLY_SERVER_ARGS", "").split()])
            cls.servers[shards] = server
            cls.clients[shards] = tally.Client(f"127.0.0.1:{server.port}", timeout=120,
                                               stream_threshold=1 << 40)  # unary unless asked
        target = f"127.0.0.1:{cls.servers[1].port}"
        cls.streaming = tally.Client(target, timeout=120, stream_threshold=0, chunk_bytes=ODD_CHUNK)

    @classmethod
    def tearDownClass(cls):
        cls.streaming.close()
        for shards in SHARD_COUNTS:
            cls.clients[shards].close()
            cls.servers[shards].stop()

    def setUp(self):
        self.rng = np.random.default_rng([SEED, hash(self.id()) % (2**32)])

    def answers_by_path(self, x, ops=OPS):
        """{path: [bits per op]} for the 1-D array x."""
        unary = self.clients[1]
        out = {"unary": [bits(v) for v in values(unary.aggregate(x, ops), ops)],
               "stream": [bits(v) for v in values(self.streaming.aggregate(x, ops), ops)]}
        for shards in SHARD_COUNTS:
            client = self.clients[shards]
            name = f"exact-paths-{shards}"
            client.put_dataset(name, x, replace=True)
            try:
                held = client.describe_dataset(name).shards
                if x.nbytes >= shards * 4096:
                    self.assertEqual(shards, held, "the dataset's shards")
                out[f"dataset in {held} shards"] = [bits(v) for v in values(client.aggregate_dataset(name, ops), ops)]
            finally:
                client.delete_dataset(name)
        with unary.share(x) as shared:
            out["region"] = [bits(v) for v in values(shared.aggregate(ops), ops)]
        # Parts at random cuts (some empty, some one element), their states
        # merged left to right, right to left and in a shuffled tree.
        cuts = np.sort(np.concatenate([[0, 0, 1, x.size, x.size], self.rng.integers(0, x.size, 7)]))
        parts = [unary.partial(x[a:b], ops, base_index=int(a)) for a, b in zip(cuts[:-1], cuts[1:])]
        for order in ("forward", "backward", "tree"):
            merged = []
            for k in range(len(ops)):
                states = [p[k] for p in parts]
                if order == "forward":
                    m = states[0]
                    for s in states[1:]:
                        m = tally.merge(m, s)
                elif order == "backward":
                    m = states[-1]
                    for s in reversed(states[:-1]):
                        m = tally.merge(s, m)
                else:
                    level = states
                    while len(level) > 1:
                        nxt = [tally.merge(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
                        if len(level) % 2:
                            nxt.append(level[-1])
                        level = nxt
                    m = level[0]
                merged.append(bits(tally.finish(m)))
            out[f"partial states, {len(parts)} parts merged {order}"] = merged
        return out

    def check_one_answer(self, x):
        by_path = self.answers_by_path(x)
        first_path, first = next(iter(by_path.items()))
        for path, answers in by_path.items():
            for op, a, b in zip(OPS, first, answers):
                self.assertEqual(a, b, f"{x.dtype} {op}: {path} against {first_path}")
        # nansum is the exact sum of the numbers rounded once to the dtype
        # (numpy's float32 sum is a float32); sum the same, or NaN.
        numbers = x[~np.isnan(x)]
        exact = sum((Fraction(float(v)) for v in numbers), Fraction(0))
        self.assertEqual(first[OPS.index("nansum")], bits(correctly_rounded(exact, x.dtype.type)))
        self.assertEqual(first[OPS.index("sum")], "nan" if numbers.size < x.size else first[OPS.index("nansum")])

    def test_every_path_gives_the_same_bits(self):
        for dtype in (np.float64, np.float32):
            for n in (1, 7, 4099, 300_007):
                with self.subTest(dtype=np.dtype(dtype).name, n=n):
                    x = ill_conditioned(self.rng, dtype, n)
                    if n == 1:
                        x[0] = dtype(2.5)
                        by_path = self.answers_by_path(x)
                        self.assertEqual(len({tuple(v) for v in by_path.values()}), 1, by_path)
                        continue
                    self.check_one_answer(x)
                    # Without NaN the plain ops answer numbers, which must agree too.
                    self.check_one_answer(np.nan_to_num(x, nan=0.0))

    def test_integer_moments_are_exact_on_every_path(self):
        for dtype in INTEGER_DTYPES:
            for n in (2, 4099, 100_003):
                with self.subTest(dtype=np.dtype(dtype).name, n=n):
                    x = wide_integers(self.rng, dtype, n)
                    by_path = self.answers_by_path(x, INTEGER_OPS)
                    first_path, first = next(iter(by_path.items()))
                    for path, answers in by_path.items():
                        for op, a, b in zip(INTEGER_OPS, first, answers):
                            self.assertEqual(a, b, f"{x.dtype} {op}: {path} against {first_path}")
                    got = values(self.clients[1].aggregate(x, INTEGER_OPS), INTEGER_OPS)
                    for op, value in zip(INTEGER_OPS, got):
                        want = integer_answers(x)[op]
                        if op == "sum":
                            self.assertEqual(int(value), want, f"{x.dtype} sum")
                        else:
                            self.assertEqual(bits(value), bits(want), f"{x.dtype} {op}: {value!r} against {want!r}")

    def test_rows_and_segments_give_each_row_alone(self):
        client = self.clients[1]
        for dtype in (np.float64, np.float32, np.int64, np.uint8):
            ops = OPS if np.dtype(dtype).kind == "f" else INTEGER_OPS
            make = ill_conditioned if np.dtype(dtype).kind == "f" else wide_integers
            rows = np.stack([make(self.rng, dtype, 5003) for _ in range(6)])
            alone = [[bits(v) for v in values(client.aggregate(row, ops), ops)] for row in rows]
            as_rows = values(client.aggregate(rows, ops), ops)
            offsets = np.arange(0, rows.size + 1, rows.shape[1])
            as_segments = values(self.streaming.aggregate(rows.ravel(), ops, offsets=offsets), ops)
            for r in range(rows.shape[0]):
                for k, op in enumerate(ops):
                    self.assertEqual(alone[r][k], bits(as_rows[k][r]), f"{np.dtype(dtype).name} {op} row {r}")
                    self.assertEqual(alone[r][k], bits(as_segments[k][r]), f"{np.dtype(dtype).name} {op} segment {r}")


if __name__ == "__main__":
    client_test_main(globals())
