"""tally's answers against numpy's, over the wire: every op and dtype, NaNs,
ties, empty arrays, rows, and numpy.histogram's bin edges exactly.

usage: numpy_semantics_test.py TALLY_SERVER_BINARY PROTO_ROOT [--backend=cpu]
"""
import math
import os
import struct
import sys
import unittest

import warnings

import numpy as np

from tally_test_server import TallyServer, load_messages

SERVER_BINARY = PROTO_ROOT = None
BACKEND = "cpu"
pb = None
# numpy warns on ddof >= n; the test compares its answer (inf or NaN) instead.
warnings.filterwarnings("ignore", message="Degrees of freedom <= 0")
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))

DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32,
          "int64": np.int64, "uint32": np.uint32, "uint8": np.uint8, "int8": np.int8,
          "int16": np.int16, "uint16": np.uint16, "uint64": np.uint64, "bool": np.bool_,
          "float16": np.float16}
FLOATS = (np.float16, np.float32, np.float64)


def random_array(rng, dtype, n):
    if dtype == np.bool_:
        return rng.integers(0, 2, size=n).astype(np.bool_)
    if dtype in FLOATS:
        return (rng.standard_normal(n) * 3 + 0.5).astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = (max(info.min, -10**6), min(info.max, 10**6)) if dtype != np.uint8 else (0, 255)
    return rng.integers(lo, hi, size=n, endpoint=True).astype(dtype)


def agg(op, **kw):
    a = pb.Aggregation(op=op)
    if "ddof" in kw:
        a.ddof = kw["ddof"]
    if "bins" in kw:
        a.histogram.bins, a.histogram.lo, a.histogram.hi = kw["bins"], kw["lo"], kw["hi"]
    return a


def values(result):
    kind = result.WhichOneof("values")
    if kind == "histograms":
        return list(result.histograms.histograms)
    return list(getattr(result, kind).values)


def numpy_histogram(x, bins, lo, hi):
    """numpy.histogram plus the three counters tally adds, in numpy's own arithmetic."""
    counts, _ = np.histogram(x, bins=bins, range=(lo, hi))
    work = x.astype(np.float64) if x.dtype.kind in "iub" else x
    lo_t, hi_t = work.dtype.type(lo), work.dtype.type(hi)
    return counts, int(np.sum(work < lo_t)), int(np.sum(work > hi_t)), int(np.sum(np.isnan(work)))


# numpy 2.1 and later raise "Too many bins for data range" for a range whose
# edges are not strictly increasing; older ones (Debian 12's 1.24) count anyway.
NUMPY_REFUSES_NARROW_RANGES = tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 1)


def edge_dtype(dtype):
    return dtype if dtype in (np.float16, np.float32) else np.float64


def numpy2_accepts(bins, lo, hi, edges_in):
    """numpy 2's rule for a histogram range, computed here so that it holds with
    any numpy: the edges, linspace(lo, hi, bins + 1) in the edge dtype, must be
    strictly increasing. Where numpy applies the rule itself, they must agree."""
    edges = np.linspace(lo, hi, bins + 1, dtype=edges_in)
    accepted = bool(np.all(edges[:-1] < edges[1:]))
    # An empty range (hi == lo, in doubles) is refused by tally's own lo < hi
    # rule; numpy widens it to (lo - 0.5, hi + 0.5) instead, so the two are
    # compared only where the range has width.
    if NUMPY_REFUSES_NARROW_RANGES and hi > lo:
        try:
            np.histogram(np.zeros(1, edges_in), bins=bins, range=(lo, hi))
            refused = False
        except ValueError as e:
            refused = "Too many bins" in str(e)
        assert refused == (not accepted), (bins, lo, hi, edges_in)
    return accepted


def bfloat16_round(x):
    """float64 x rounded once, to nearest even, to bfloat16 (8 significant
    bits), as a float. Normal range only: what the tests use."""
    if x == 0:
        return 0.0
    m, e = math.frexp(abs(x))  # abs(x) = m * 2^e, m in [0.5, 1)
    q = m * 256
    r = math.floor(q)
    if q - r > 0.5 or (q - r == 0.5 and r % 2 == 1):
        r += 1
    return math.copysign(math.ldexp(r, e - 8), x)


def double_order(x):
    """The doubles in order as integers (-0 next to +0), and back."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return bits if bits >= 0 else -(2**63) - bits


def double_at(order):
    return struct.unpack("<d", struct.pack("<q", order if order >= 0 else -(2**63) - order))[0]


def narrowest_accepted_hi(bins, lo, edges_in):
    """The smallest hi above lo that numpy 2 accepts for `bins` bins, with the
    double below it refused (as tests/unit/numpy_edges.h finds it)."""
    lo_t = edges_in(lo)
    spacing = float(np.nextafter(lo_t, edges_in(np.inf))) - float(lo_t)
    width = max(5e-324, bins * spacing / 8)
    while not numpy2_accepts(bins, lo, lo + width, edges_in):
        width *= 2
    refused, accepted = double_order(lo), double_order(lo + width)
    while accepted - refused > 1:
        mid = refused + (accepted - refused) // 2
        if numpy2_accepts(bins, lo, double_at(mid), edges_in):
            accepted = mid
        else:
            refused = mid
    return double_at(accepted)


def histogram_by_edges(x, bins, lo, hi):
    """numpy.histogram as its documentation defines it, on numpy's own edges:
    x is in bin i when edge[i] <= x < edge[i + 1], the last bin closed."""
    work = x.astype(np.float64) if x.dtype.kind in "iu" else x
    edges = np.linspace(lo, hi, bins + 1, dtype=work.dtype)
    inside = work[(work >= edges[0]) & (work <= edges[-1])]
    counts = np.bincount(np.searchsorted(edges[:-1], inside, side="right") - 1, minlength=bins)
    return (counts, int(np.sum(work < edges[0])), int(np.sum(work > edges[-1])),
            int(np.sum(np.isnan(work))))


class NumpySemantics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # TALLY_SERVER_ARGS adds server flags, e.g. "--routing=size
        # --small_request_bytes=0" to send even the smallest arrays to the GPU.
        extra = os.environ.get("TALLY_SERVER_ARGS", "").split()
        cls.server = TallyServer(SERVER_BINARY, pb, [f"--backend={BACKEND}", *extra])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.rng = np.random.default_rng(SEED + hash(self.id()) % 1000)

    def ask(self, x, aggregations, row_length=0, stream=False, offsets=None, valid=None):
        spec = pb.ArraySpec(dtype=pb.DType.Value("DTYPE_" + x.dtype.name.upper()), row_length=row_length)
        if offsets is not None:
            spec.offsets = np.asarray(offsets, "<i8").tobytes()
        if valid is not None:
            spec.validity = np.packbits(np.asarray(valid, bool).reshape(-1), bitorder="little").tobytes()
        data = np.ascontiguousarray(x).tobytes()
        if not stream:
            return self.server.aggregate(pb.AggregateRequest(spec=spec, data=data, aggregations=aggregations),
                                         timeout=60)
        spec.length = x.size

        def messages():
            yield pb.AggregateStreamRequest(header=pb.AggregateStreamRequest.Header(spec=spec,
                                                                                  aggregations=aggregations))
            for at in range(0, len(data), 1 << 20):
                yield pb.AggregateStreamRequest(chunk=data[at:at + (1 << 20)])
        return self.server.aggregate_stream(messages(), timeout=120)

    def check_scalar_ops(self, x, label):
        ops = [agg(pb.OP_SUM), agg(pb.OP_MIN), agg(pb.OP_MAX), agg(pb.OP_MEAN), agg(pb.OP_COUNT),
               agg(pb.OP_SUM_SQUARES), agg(pb.OP_VARIANCE), agg(pb.OP_VARIANCE, ddof=1),
               agg(pb.OP_STDDEV, ddof=1), agg(pb.OP_ARGMIN), agg(pb.OP_ARGMAX)]
        r = self.ask(x, ops).results
        f64 = x.astype(np.float64)
        with np.errstate(all="ignore"):
            # Rounding in a sum scales with the sum of magnitudes, not with the
            # result: with values of both signs the result can be far smaller
            # than what its rounding errors are relative to.
            magnitude = float(np.sum(np.abs(f64)))
            if x.dtype.kind == "f":
                expect_sum = np.sum(f64)
                self.assertClose(values(r[0])[0], expect_sum, 1e-12, label + " sum", scale=magnitude)
                # and the float32 answer numpy itself gives, to float32 precision
                # (numpy adds float16 in float32 and rounds the sum to float16)
                own = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-6}.get(x.dtype, 1e-12)
                self.assertClose(values(r[0])[0], float(np.sum(x)), own,
                                 label + " sum vs numpy's own", scale=magnitude)
            else:
                acc = np.int64 if x.dtype.kind == "i" else np.uint64
                self.assertEqual(values(r[0])[0], int(np.sum(x, dtype=acc)), label + " sum")
            self.assertSame(values(r[1])[0], np.min(x), label + " min")
            self.assertSame(values(r[2])[0], np.max(x), label + " max")
            self.assertClose(values(r[3])[0], np.mean(f64), 1e-12, label + " mean",
                             scale=magnitude / max(x.size, 1))
            self.assertEqual(values(r[4])[0], x.size, label + " count")
            self.assertClose(values(r[5])[0], np.sum(f64 * f64), 1e-12, label + " sum_squares")
            self.assertClose(values(r[6])[0], np.var(f64), 1e-9, label + " var")
            self.assertClose(values(r[7])[0], np.var(f64, ddof=1), 1e-9, label + " var ddof=1")
            self.assertClose(values(r[8])[0], np.std(f64, ddof=1), 1e-9, label + " std ddof=1")
        self.assertEqual(values(r[9])[0], int(np.argmin(x)), label + " argmin")
        self.assertEqual(values(r[10])[0], int(np.argmax(x)), label + " argmax")

    def assertClose(self, got, want, rel, label, scale=0.0):
        """|got - want| <= rel * max(|want|, scale): `scale` is what the
        rounding is relative to, when that exceeds |want| (a sum's magnitudes)."""
        want = float(want)
        if math.isnan(want):
            self.assertTrue(math.isnan(got), f"{label}: got {got}, numpy says NaN")
        elif math.isinf(want):
            self.assertEqual(got, want, label)
        else:
            self.assertLessEqual(abs(got - want), rel * max(abs(want), scale, 1e-300) + 1e-300,
                                 f"{label}: got {got!r}, numpy {want!r}")

    def assertSame(self, got, want, label):
        if isinstance(want, (np.floating, float)) and math.isnan(want):
            self.assertTrue(math.isnan(got), f"{label}: got {got}, numpy says NaN")
        else:
            self.assertEqual(got, want.item() if hasattr(want, "item") else want, label)

    def test_every_op_and_dtype_on_random_data(self):
        for name, dtype in DTYPES.items():
            for n in (1, 31, 32, 33, 1009, 100003):
                with self.subTest(dtype=name, n=n):
                    self.check_scalar_ops(random_array(self.rng, dtype, n), f"{name}[{n}] seed {SEED}")

    def test_nan_rules(self):
        for dtype in FLOATS:
            for where in ([0], [500], [999], [3, 700]):
                x = random_array(self.rng, dtype, 1000)
                x[where] = np.nan
                with self.subTest(dtype=dtype.__name__, nan_at=where):
                    self.check_scalar_ops(x, f"{dtype.__name__} NaN at {where}")

    def test_ties_take_the_first_occurrence(self):
        for name, dtype in DTYPES.items():
            x = random_array(self.rng, dtype, 5000)
            x[[17, 4000]] = x.max()
            x[[123, 4444]] = x.min()
            with self.subTest(dtype=name):
                self.check_scalar_ops(x, f"{name} ties")

    def test_empty_array(self):
        r = self.ask(np.zeros(0, np.float32), [agg(pb.OP_SUM), agg(pb.OP_COUNT), agg(pb.OP_MEAN)]).results
        self.assertEqual(values(r[0]), [0.0])
        self.assertEqual(values(r[1]), [0])
        self.assertTrue(math.isnan(values(r[2])[0]))

    def check_histogram(self, x, bins, lo, hi, label):
        r = self.ask(x, [agg(pb.OP_HISTOGRAM, bins=bins, lo=lo, hi=hi)]).results
        h = values(r[0])[0]
        counts, below, above, nans = numpy_histogram(x, bins, lo, hi)
        self.assertEqual(list(h.counts), counts.tolist(), label)
        self.assertEqual((h.below, h.above, h.nan), (below, above, nans), label)

    def test_histogram_matches_numpy(self):
        for name, dtype in DTYPES.items():
            for bins, lo, hi in ((1, -2.0, 3.0), (10, -1.0, 1.0), (256, -5.0, 5.0), (4096, -7.3, 8.1),
                                 (65536, -4.0, 4.0), (7, 0.0, 200.0)):
                x = random_array(self.rng, dtype, 20011)
                if dtype in FLOATS:
                    x[::97] = np.nan
                with self.subTest(dtype=name, bins=bins):
                    if not numpy2_accepts(bins, lo, hi, edge_dtype(dtype)):
                        # float16 edges: 4096 bins over [-7.3, 8.1] repeat some
                        self.assertEqual(dtype, np.float16)
                        self.assertRefusedAsTooManyBins(x, bins, lo, hi)
                        continue
                    self.check_histogram(x, bins, lo, hi, f"{name} bins={bins} [{lo}, {hi}] seed {SEED}")

    def test_histogram_values_on_and_next_to_every_edge(self):
        # Edges as numpy computes them, in float32 for float32 input: values on
        # an edge, one ulp either side, and the range's ends.
        for dtype in FLOATS:
            for bins, lo, hi in ((10, -1.0, 1.0), (3, 0.1, 0.7), (1000 if dtype != np.float16 else 300, -3.3, 9.1)):
                edges = np.linspace(lo, hi, bins + 1).astype(dtype)
                x = np.concatenate([edges, np.nextafter(edges, dtype(-np.inf)), np.nextafter(edges, dtype(np.inf)),
                                    np.array([lo, hi], dtype=dtype)]).astype(dtype)
                with self.subTest(dtype=dtype.__name__, bins=bins):
                    self.check_histogram(x, bins, lo, hi, f"{dtype.__name__} edges bins={bins}")

    def assertRefusedAsTooManyBins(self, x, bins, lo, hi, stream=False):
        import grpc
        with self.assertRaises(grpc.RpcError) as caught:
            self.ask(x, [agg(pb.OP_HISTOGRAM, bins=bins, lo=lo, hi=hi)], stream=stream)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("histogram.bins", caught.exception.details())
        self.assertIn(f"cannot create {bins} finite-sized bins", caught.exception.details())

    def test_histogram_ranges_narrower_than_the_float_spacing_are_refused(self):
        cases = ((np.array([1, 1 + 2e-16] * 10), 10, 1.0, 1.0 + 2e-16),  # every float64 edge is 1.0
                 (np.array([1, 1, 0.5, 2], np.float32), 4, 1.0, 1.0 + 1e-12),  # (1, 1) in float32
                 (np.zeros(1, np.float32), 65536, 0.0, 1e-300),  # bins / (hi - lo) overflows
                 (np.zeros(1, np.float64), 65536, 0.0, 5e-324))
        for x, bins, lo, hi in cases:
            with self.subTest(dtype=x.dtype.name, bins=bins, lo=lo, hi=hi):
                self.assertFalse(numpy2_accepts(bins, lo, hi, edge_dtype(x.dtype)))
                self.assertRefusedAsTooManyBins(x, bins, lo, hi)
        self.assertRefusedAsTooManyBins(*cases[0], stream=True)

    def test_histogram_ranges_just_above_the_limit(self):
        # The narrowest range numpy 2 accepts for 1, 256 and 65536 bins, in
        # float32 and float64: the counts are numpy's; the double below is
        # refused when numpy 2 refuses it.
        for dtype in (np.float32, np.float64):
            for bins in (1, 256, 65536):
                for lo in (1.0, 0.0, -3.7, 1e-300):
                    hi = narrowest_accepted_hi(bins, lo, dtype)
                    edges = np.linspace(lo, hi, bins + 1, dtype=dtype)
                    inside = self.rng.uniform(lo, hi, 5000).astype(dtype)
                    x = np.concatenate([edges, np.nextafter(edges, dtype(-np.inf)), np.nextafter(edges, dtype(np.inf)),
                                        inside, np.array([lo, hi, np.nan], dtype=dtype)]).astype(dtype)
                    with self.subTest(dtype=dtype.__name__, bins=bins, lo=lo, hi=hi):
                        try:
                            with np.errstate(all="ignore"):
                                expect = numpy_histogram(x, bins, lo, hi)
                        except IndexError:
                            # numpy's equal-width fast path computes an index
                            # outside its own edges for some of these ranges
                            # (those of one bin in float32, subnormal ones in
                            # float64) and raises; the answer is then what its
                            # edges define. Where numpy does answer, the two agree.
                            expect = histogram_by_edges(x, bins, lo, hi)
                        h = values(self.ask(x, [agg(pb.OP_HISTOGRAM, bins=bins, lo=lo, hi=hi)]).results[0])[0]
                        self.assertEqual(list(h.counts), expect[0].tolist())
                        self.assertEqual((h.below, h.above, h.nan), expect[1:])
                        below = double_at(double_order(hi) - 1)
                        if below > lo and not numpy2_accepts(bins, lo, below, dtype):
                            self.assertRefusedAsTooManyBins(x, bins, lo, below)

    def test_rows(self):
        for name, dtype in DTYPES.items():
            for rows, n in ((1000, 1), (300, 32), (7, 1000), (2, 50000)):
                x = random_array(self.rng, dtype, rows * n)
                if dtype in FLOATS:
                    x[5] = np.nan
                m = x.reshape(rows, n)
                ops = [agg(pb.OP_SUM), agg(pb.OP_MAX), agg(pb.OP_ARGMIN), agg(pb.OP_VARIANCE, ddof=1),
                       agg(pb.OP_HISTOGRAM, bins=16, lo=-3.0, hi=60.0)]
                with self.subTest(dtype=name, rows=rows, n=n), np.errstate(all="ignore"):
                    r = self.ask(x, ops, row_length=n).results
                    got_sum, got_max, got_arg, got_var, got_hist = (values(v) for v in r)
                    self.assertEqual(len(got_sum), rows)
                    if x.dtype.kind == "f":
                        # A sum's rounding error is bounded by n * eps * sum|x|, not by
                        # the sum itself: rows that nearly cancel have tiny sums.
                        wide = m.astype(np.float64)
                        bound = n * np.finfo(np.float64).eps * np.sum(np.abs(wide), axis=1)
                        nan_rows = np.isnan(bound)
                        self.assertEqual(np.isnan(got_sum).tolist(), nan_rows.tolist())
                        error = np.abs(np.array(got_sum) - np.sum(wide, axis=1))[~nan_rows]
                        np.testing.assert_array_less(error, bound[~nan_rows] + 1e-300)
                    else:
                        acc = np.int64 if x.dtype.kind == "i" else np.uint64
                        self.assertEqual(got_sum, np.sum(m, axis=1, dtype=acc).tolist())
                    np.testing.assert_array_equal(np.array(got_max), np.max(m, axis=1).astype(np.float64))
                    self.assertEqual(got_arg, np.argmin(m, axis=1).tolist())
                    np.testing.assert_allclose(got_var, np.var(m.astype(np.float64), axis=1, ddof=1), rtol=1e-9)
                    for i in (0, rows // 2, rows - 1):
                        counts, below, above, nans = numpy_histogram(m[i], 16, -3.0, 60.0)
                        self.assertEqual(list(got_hist[i].counts), counts.tolist(), f"row {i}")
                        self.assertEqual((got_hist[i].below, got_hist[i].above, got_hist[i].nan),
                                         (below, above, nans), f"row {i}")

    def test_streamed_answers_equal_unary_answers(self):
        x = random_array(self.rng, np.float32, 3_000_001)
        ops = [agg(pb.OP_SUM), agg(pb.OP_MIN), agg(pb.OP_ARGMAX), agg(pb.OP_STDDEV),
               agg(pb.OP_HISTOGRAM, bins=100, lo=-1.0, hi=1.0)]
        unary = self.ask(x, ops).results
        streamed = self.ask(x, ops, stream=True).results
        for a, b in zip(unary, streamed):
            self.assertEqual(a.SerializeToString(), b.SerializeToString())

    def check_nan_ops(self, x, row_length, label, stream=False):
        """Every NaN-skipping op against numpy's nan-functions, row by row
        (axis=1); nanargmin/nanargmax only where no row is all NaN."""
        m = x.reshape(-1, row_length) if row_length else x.reshape(1, -1)
        floats = x.dtype.kind == "f"
        all_nan_row = floats and bool(np.isnan(m).all(axis=1).any())
        ops = [agg(pb.OP_NANSUM), agg(pb.OP_NANMEAN), agg(pb.OP_NANMIN), agg(pb.OP_NANMAX),
               agg(pb.OP_NANVAR), agg(pb.OP_NANVAR, ddof=1), agg(pb.OP_NANSTD, ddof=1), agg(pb.OP_NANCOUNT)]
        if not all_nan_row:
            ops += [agg(pb.OP_NANARGMIN), agg(pb.OP_NANARGMAX)]
        r = [values(v) for v in self.ask(x, ops, row_length=row_length, stream=stream).results]
        # numpy.nanvar of integers is numpy.var (computed in float64); of floats
        # it is compared in float64, where numpy's float32 rounding is no issue.
        src = m.astype(np.float64) if floats else m
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scale = np.nansum(np.abs(m.astype(np.float64)), axis=1)
            if floats:
                self.assertCloseRows(r[0], np.nansum(src, axis=1), 1e-12, scale, label + " nansum")
            else:
                acc = np.int64 if x.dtype.kind == "i" else np.uint64
                self.assertEqual(r[0], np.nansum(m, axis=1, dtype=acc).tolist(), label + " nansum")
            count = np.sum(~np.isnan(src), axis=1) if floats else np.full(m.shape[0], m.shape[1])
            self.assertCloseRows(r[1], np.nanmean(src, axis=1), 1e-12, scale / np.maximum(count, 1),
                                 label + " nanmean")
            np.testing.assert_array_equal(np.array(r[2], np.float64), np.nanmin(m, axis=1).astype(np.float64),
                                          label + " nanmin")
            np.testing.assert_array_equal(np.array(r[3], np.float64), np.nanmax(m, axis=1).astype(np.float64),
                                          label + " nanmax")
            self.assertCloseRows(r[4], np.nanvar(src, axis=1), 1e-9, 0, label + " nanvar")
            self.assertCloseRows(r[5], np.nanvar(src, axis=1, ddof=1), 1e-9, 0, label + " nanvar ddof=1")
            self.assertCloseRows(r[6], np.nanstd(src, axis=1, ddof=1), 1e-9, 0, label + " nanstd ddof=1")
            self.assertEqual(r[7], count.tolist(), label + " nancount")
        if not all_nan_row:
            self.assertEqual(r[8], np.nanargmin(m, axis=1).tolist(), label + " nanargmin")
            self.assertEqual(r[9], np.nanargmax(m, axis=1).tolist(), label + " nanargmax")

    def assertCloseRows(self, got, want, rel, scale, label):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        self.assertEqual(np.isnan(got).tolist(), np.isnan(want).tolist(), f"{label}: NaN rows")
        self.assertEqual(np.isinf(got).tolist(), np.isinf(want).tolist(), f"{label}: inf rows")
        ok = ~np.isnan(want) & ~np.isinf(want)
        bound = rel * np.maximum(np.abs(want), scale) + 1e-300
        np.testing.assert_array_less(np.abs(got - want)[ok], np.broadcast_to(bound, want.shape)[ok], label)

    def test_nan_ops_every_dtype(self):
        for name, dtype in DTYPES.items():
            for n in (1, 2, 33, 1009, 100003):
                x = random_array(self.rng, dtype, n)
                cases = {"no NaN": x}
                if dtype in FLOATS:
                    for where, idx in (("at the start", [0]), ("at the end", [n - 1]),
                                       ("at both ends", [0, n - 1]), ("scattered", slice(None, None, 7))):
                        y = x.copy()
                        y[idx] = np.nan
                        cases[f"NaN {where}"] = y
                for what, y in cases.items():
                    with self.subTest(dtype=name, n=n, case=what):
                        self.check_nan_ops(y, 0, f"{name}[{n}] {what} seed {SEED}")

    def test_nan_ops_rows_with_all_nan_rows(self):
        for dtype in FLOATS:
            for rows, n in ((1000, 1), (300, 32), (7, 1000), (3, 70000)):
                m = random_array(self.rng, dtype, rows * n).reshape(rows, n)
                m[:, 0] = np.nan  # every row starts with a NaN
                m[rows // 2] = np.nan  # and one row is all NaN
                m[-1, -1] = np.nan
                with self.subTest(dtype=dtype.__name__, rows=rows, n=n):
                    self.check_nan_ops(m.ravel(), n, f"{dtype.__name__} {rows}x{n} seed {SEED}")
                    for op in (pb.OP_NANARGMIN, pb.OP_NANARGMAX):
                        self.assertRefused(m.ravel(), [agg(pb.OP_NANSUM), agg(op)], n, "all NaN")
                    m[rows // 2, -1] = 1.0  # no row all NaN: every op answers
                    self.check_nan_ops(m.ravel(), n, f"{dtype.__name__} {rows}x{n} seed {SEED}")
            for name, dtype in DTYPES.items():
                with self.subTest(dtype=name, rows="integer rows"):
                    x = random_array(self.rng, dtype, 7 * 33)
                    self.check_nan_ops(x, 33, f"{name} 7x33")
                    self.check_nan_ops(x, 1, f"{name} 231x1")  # nanvar ddof=1 of one integer is var's

    def test_nan_ops_all_nan_and_empty_arrays(self):
        for dtype in FLOATS:
            x = np.full(1000, np.nan, dtype)
            self.check_nan_ops(x, 0, f"{dtype.__name__} all NaN")
            self.check_nan_ops(x, 0, f"{dtype.__name__} all NaN, streamed", stream=True)
            r = [values(v)[0] for v in self.ask(x, [agg(pb.OP_NANSUM), agg(pb.OP_NANMEAN),
                                                    agg(pb.OP_NANMIN), agg(pb.OP_NANCOUNT)]).results]
            self.assertEqual(r[0], 0.0)
            self.assertTrue(math.isnan(r[1]) and math.isnan(r[2]))
            self.assertEqual(r[3], 0)
            for op in (pb.OP_NANARGMIN, pb.OP_NANARGMAX):
                self.assertRefused(x, [agg(op)], 0, "all NaN")
            empty = np.zeros(0, dtype)
            r = [values(v)[0] for v in self.ask(empty, [agg(pb.OP_NANSUM), agg(pb.OP_NANMEAN), agg(pb.OP_NANVAR),
                                                        agg(pb.OP_NANCOUNT)]).results]
            self.assertEqual(r[0], np.nansum(empty))
            self.assertTrue(math.isnan(r[1]) and math.isnan(r[2]))
            self.assertEqual(r[3], 0)
            for op in (pb.OP_NANMIN, pb.OP_NANMAX, pb.OP_NANARGMIN, pb.OP_NANARGMAX):
                self.assertRefused(empty, [agg(op)], 0, "empty")

    def test_nanvar_ddof_at_or_above_the_count(self):
        # numpy.nanvar gives NaN where n - ddof <= 0 on floats; numpy.var (and
        # so nanvar of integers) gives inf there.
        for dtype, want in ((np.float64, math.isnan), (np.float32, math.isnan), (np.int32, math.isinf)):
            x = np.array([1, 2, 4], dtype)
            for ddof in (3, 3.5):
                got = values(self.ask(x, [agg(pb.OP_NANVAR, ddof=ddof)]).results[0])[0]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.assertTrue(want(np.nanvar(x, ddof=ddof)), (dtype, ddof))
                self.assertTrue(want(got), (dtype, ddof, got))

    def test_nan_ops_streamed_equal_unary(self):
        x = random_array(self.rng, np.float32, 3_000_001)
        x[::1013] = np.nan
        ops = [agg(pb.OP_NANSUM), agg(pb.OP_NANMIN), agg(pb.OP_NANARGMAX), agg(pb.OP_NANSTD), agg(pb.OP_NANCOUNT)]
        unary = self.ask(x, ops).results
        streamed = self.ask(x, ops, stream=True).results
        for a, b in zip(unary, streamed):
            self.assertEqual(a.SerializeToString(), b.SerializeToString())

    def test_nan_op_partial_states_cover_the_non_nan_elements(self):
        # The plain op's state over the non-NaN elements (count is theirs)
        # and every element counted in `elements`; an all-NaN row's state is
        # the empty one, not a refusal (the parts are merged before any answer).
        x = np.array([[1, np.nan, 3, np.nan], [np.nan, np.nan, np.nan, np.nan]], np.float32)
        ops = [agg(pb.OP_NANSUM), agg(pb.OP_NANMIN), agg(pb.OP_NANARGMAX), agg(pb.OP_NANVAR)]
        for a in ops:
            a.partial.base_index = 10
        results = self.ask(x, ops, row_length=4).results
        for r, kind in zip(results, ("nansum", "nanmin", "nanargmax", "nanvar")):
            s = r.partials.states
            self.assertEqual([st.count for st in s], [2, 0], kind)
            self.assertEqual([st.elements for st in s], [4, 4], kind)
        self.assertEqual(results[0].partials.states[0].float_sum, 4.0)
        self.assertEqual(results[1].partials.states[0].float_extreme, 1.0)
        self.assertEqual(results[2].partials.states[0].index, 12)
        self.assertEqual((results[3].partials.states[0].mean, results[3].partials.states[0].m2), (2.0, 2.0))

    def check_prod_logical_ops(self, x, row_length, label):
        """prod, count_nonzero, any, all and ptp against numpy, row by row
        (axis=1): integer products exactly (numpy's int64 / uint64
        accumulators, wrapping), float ones to rounding (tally multiplies in
        float64), ptp exactly in the input's dtype."""
        m = x.reshape(-1, row_length) if row_length else x.reshape(1, -1)
        ops = [agg(pb.OP_PROD), agg(pb.OP_COUNT_NONZERO), agg(pb.OP_ANY), agg(pb.OP_ALL)]
        with_ptp = m.shape[1] > 0 and x.dtype != np.bool_  # numpy refuses ptp of bool
        if with_ptp:
            ops.append(agg(pb.OP_PTP))
        r = [values(v) for v in self.ask(x, ops, row_length=row_length).results]
        with np.errstate(all="ignore"):
            if x.dtype.kind == "f":
                want = np.prod(m.astype(np.float64), axis=1)
                self.assertCloseRows(r[0], want, 1e-10, 0, label + " prod")
                # numpy's own float32 product, where it does not overflow or underflow.
                native = np.prod(m, axis=1).astype(np.float64)
                ok = np.isfinite(native) & (np.abs(native) > 1e-30)
                # numpy rounds each float16 and float32 product to the dtype
                rtol = {np.dtype(np.float16): 5e-2, np.dtype(np.float32): 1e-3}.get(x.dtype, 1e-10)
                np.testing.assert_allclose(np.array(r[0])[ok], native[ok], rtol=rtol,
                                           err_msg=label + " prod against numpy's")
            else:
                self.assertEqual(r[0], np.prod(m, axis=1).tolist(), label + " prod")
                self.assertEqual(np.prod(m, axis=1).dtype, np.int64 if x.dtype.kind in "ib" else np.uint64)
            self.assertEqual(r[1], np.count_nonzero(m, axis=1).tolist(), label + " count_nonzero")
            self.assertEqual(r[2], np.any(m, axis=1).astype(int).tolist(), label + " any")
            self.assertEqual(r[3], np.all(m, axis=1).astype(int).tolist(), label + " all")
            if with_ptp:
                want = np.ptp(m, axis=1)
                self.assertEqual(want.dtype, x.dtype)
                if x.dtype.kind == "f":
                    np.testing.assert_array_equal(np.array(r[4], np.float64), want.astype(np.float64), label + " ptp")
                else:
                    self.assertEqual(r[4], want.tolist(), label + " ptp")

    def prod_friendly(self, dtype, n):
        """Values whose products neither overflow nor underflow float64 (floats
        near +-1), or wrap (integers), with zeros, -0.0 and NaNs added by the
        callers."""
        if dtype in FLOATS:
            return (self.rng.uniform(0.9, 1.1, n) * self.rng.choice([-1.0, 1.0], n)).astype(dtype)
        return random_array(self.rng, dtype, n)

    def test_prod_logical_ops_every_dtype(self):
        for name, dtype in DTYPES.items():
            for n in (1, 2, 33, 1009, 100003):
                x = self.prod_friendly(dtype, n)
                cases = {"no zero": x}
                y = x.copy()
                y[::13] = 0
                cases["zeros"] = y
                if dtype in FLOATS:
                    z = x.copy()
                    z[::7] = -0.0
                    cases["-0.0"] = z
                    for where, idx in (("at the start", [0]), ("at the end", [n - 1]), ("scattered", slice(None, None, 11))):
                        w = x.copy()
                        w[idx] = np.nan
                        cases[f"NaN {where}"] = w
                for what, v in cases.items():
                    with self.subTest(dtype=name, n=n, case=what):
                        self.check_prod_logical_ops(v, 0, f"{name}[{n}] {what} seed {SEED}")

    def test_prod_logical_ops_rows(self):
        for name, dtype in DTYPES.items():
            for rows, n in ((1000, 1), (300, 32), (7, 1000), (3, 70000)):
                m = self.prod_friendly(dtype, rows * n).reshape(rows, n)
                m[rows // 2] = 0  # a row of zeros only
                m[0, ::5] = 0
                if dtype in FLOATS:
                    m[-1, -1] = np.nan
                with self.subTest(dtype=name, rows=rows, n=n):
                    self.check_prod_logical_ops(m.ravel(), n, f"{name} {rows}x{n} seed {SEED}")

    def test_prod_logical_ops_edge_cases(self):
        for name, dtype in DTYPES.items():
            empty = np.zeros(0, dtype)
            r = [values(v)[0] for v in self.ask(empty, [agg(pb.OP_PROD), agg(pb.OP_COUNT_NONZERO), agg(pb.OP_ANY),
                                                        agg(pb.OP_ALL)]).results]
            self.assertEqual(r, [np.prod(empty), np.count_nonzero(empty), int(np.any(empty)), int(np.all(empty))], name)
            self.assertEqual(r, [1, 0, 0, 1], name)
            self.assertRefused(empty, [agg(pb.OP_PTP)], 0, "ptp of a bool array" if dtype == np.bool_ else "empty")
        # Integer wrap-around: prod modulo 2^64, ptp at the dtype's width.
        for dtype in (np.int32, np.int64, np.uint32, np.uint8, np.int8, np.int16, np.uint16, np.uint64):
            info = np.iinfo(dtype)
            x = np.array([info.max, info.min, info.max - 1, 3], dtype)
            r = [values(v)[0] for v in self.ask(x, [agg(pb.OP_PROD), agg(pb.OP_PTP)]).results]
            with np.errstate(all="ignore"):
                self.assertEqual(r, [int(np.prod(x)), int(np.ptp(x))], dtype.__name__)
        self.assertEqual(values(self.ask(np.array([-2**31, 2**31 - 1], np.int32), [agg(pb.OP_PTP)]).results[0]), [-1])
        # numpy refuses ptp of bool (no boolean subtraction): so does tally.
        with self.assertRaises(TypeError):
            np.ptp(np.array([True, False]))
        self.assertRefused(np.array([True, False]), [agg(pb.OP_PTP)], 0, "ptp of a bool array")
        # inf * 0 is NaN, as in numpy; NaN counts as nonzero and as True.
        x = np.array([np.inf, 0.0, 2.0], np.float64)
        with np.errstate(all="ignore"):
            self.assertTrue(math.isnan(values(self.ask(x, [agg(pb.OP_PROD)]).results[0])[0]) and np.isnan(np.prod(x)))
        x = np.array([np.nan, 0.0, -0.0], np.float32)
        r = [values(v)[0] for v in self.ask(x, [agg(pb.OP_COUNT_NONZERO), agg(pb.OP_ANY), agg(pb.OP_ALL)]).results]
        self.assertEqual(r, [np.count_nonzero(x), int(np.any(x)), int(np.all(x))])
        self.assertEqual(r, [1, 1, 0])
        # float32 ptp is rounded (and overflows) in float32, as numpy's.
        for x in (np.array([1.0, -1e-8], np.float32), np.array([3e38, -3e38], np.float32)):
            with np.errstate(all="ignore"):
                self.assertEqual(values(self.ask(x, [agg(pb.OP_PTP)]).results[0])[0], float(np.ptp(x)))
        # Documented difference: float32 products are taken in float64, so
        # where numpy's float32 product overflows to inf tally's does not.
        x = np.full(10, 1e10, np.float32)
        got = values(self.ask(x, [agg(pb.OP_PROD)]).results[0])[0]
        with np.errstate(all="ignore"):
            self.assertTrue(np.isinf(np.prod(x)))
        self.assertAlmostEqual(got / float(np.prod(x.astype(np.float64))), 1.0, places=12)

    def test_prod_logical_partial_states_carry_what_tally_proto_says(self):
        # Per row: the product (by dtype, as the sums), the nonzero count, and
        # ptp's min and max (its difference is the finish's); merging two
        # halves by the proto's rules and finishing gives numpy's answers.
        for dtype, acc in ((np.int32, "int"), (np.uint16, "uint"), (np.float64, "float")):
            x = np.array([[3, 0, -2 if dtype != np.uint16 else 2, 7], [1, 5, 5, 2]], dtype)
            ops = [agg(op) for op in (pb.OP_PROD, pb.OP_COUNT_NONZERO, pb.OP_ANY, pb.OP_ALL, pb.OP_PTP)]
            for a in ops:
                a.partial.SetInParent()
            halves = [self.ask(np.ascontiguousarray(x[:, h * 2:h * 2 + 2]), ops, row_length=2).results
                      for h in (0, 1)]
            for r in range(2):
                row = x[r]
                prod = [getattr(halves[h][0].partials.states[r], f"{acc}_product") for h in (0, 1)]
                merged = prod[0] * prod[1]
                if acc == "int":
                    merged = (merged + 2**63) % 2**64 - 2**63
                elif acc == "uint":
                    merged %= 2**64
                self.assertEqual(merged, np.prod(row), (dtype, r))
                nonzero = sum(halves[h][1].partials.states[r].nonzero for h in (0, 1))
                self.assertEqual(nonzero, np.count_nonzero(row), (dtype, r))
                self.assertEqual([halves[h][k].partials.states[r].nonzero for h in (0, 1) for k in (1, 2, 3)],
                                 [np.count_nonzero(row[h * 2:h * 2 + 2]) for h in (0, 1) for _ in range(3)])
                lo = min(getattr(halves[h][4].partials.states[r], f"{acc}_extreme") for h in (0, 1))
                hi = max(getattr(halves[h][4].partials.states[r], f"{acc}_max") for h in (0, 1))
                self.assertEqual((lo, hi), (row.min(), row.max()), (dtype, r))
                self.assertEqual(np.array(hi, dtype) - np.array(lo, dtype), np.ptp(row), (dtype, r))

    def assertRefused(self, x, aggregations, row_length, why):
        import grpc
        with self.assertRaises(grpc.RpcError) as caught:
            self.ask(x, aggregations, row_length=row_length)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(why, caught.exception.details())

    def segment_lengths(self, empties):
        """Lengths mixing single elements, short segments, runs of empty ones
        (leading, inside, trailing) and one long one."""
        lengths = [0, 0] if empties else []
        for i in range(200):
            lengths.append(int(self.rng.integers(1, 65)))
            if empties and i % 29 == 0:
                lengths += [0, 0]
        lengths += [1, 70000, 3] + ([0] if empties else [])
        return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def test_variable_length_segments(self):
        """Every segment's answer is numpy's for its slice; empty ones take the
        empty array's (sum 0, mean NaN, prod 1, any False, all True)."""
        for name, dtype in DTYPES.items():
            for empties in (True, False):
                off = self.segment_lengths(empties)
                x = random_array(self.rng, dtype, int(off[-1]))
                if dtype in FLOATS:
                    x[self.rng.choice(x.size, 5, replace=False)] = np.nan
                slices = [x[a:b] for a, b in zip(off[:-1], off[1:])]
                ops = [agg(pb.OP_SUM), agg(pb.OP_MEAN), agg(pb.OP_COUNT), agg(pb.OP_VARIANCE, ddof=1),
                       agg(pb.OP_NANSUM), agg(pb.OP_ANY), agg(pb.OP_ALL),
                       agg(pb.OP_HISTOGRAM, bins=8, lo=-3.0, hi=60.0)]
                if not empties:
                    ops += [agg(pb.OP_MIN), agg(pb.OP_MAX), agg(pb.OP_ARGMIN), agg(pb.OP_NANARGMAX)
                            if dtype not in FLOATS else agg(pb.OP_ARGMAX)]
                for stream in (False, True):
                    with self.subTest(dtype=name, empties=empties, stream=stream), np.errstate(all="ignore"), \
                            warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        response = self.ask(x, ops, offsets=off, stream=stream)
                        self.assertEqual(response.execution.rows, len(slices))
                        r = [values(v) for v in response.results]
                        wide = [s.astype(np.float64) for s in slices]
                        scale = np.array([np.nansum(np.abs(w)) for w in wide])
                        if x.dtype.kind == "f":
                            self.assertCloseRows(r[0], [np.sum(w) for w in wide], 1e-12, scale, "sum")
                        else:
                            acc = np.int64 if x.dtype.kind == "i" else np.uint64
                            self.assertEqual(r[0], [int(np.sum(s, dtype=acc)) for s in slices], "sum")
                        counts = np.array([s.size for s in slices])
                        self.assertCloseRows(r[1], [np.mean(w) if w.size else np.nan for w in wide], 1e-12,
                                             scale / np.maximum(counts, 1), "mean")
                        self.assertEqual(r[2], counts.tolist(), "count")
                        self.assertCloseRows(r[3], [np.var(w, ddof=1) if w.size else np.nan for w in wide],
                                             1e-9, 0, "var ddof=1")
                        self.assertCloseRows(r[4], [np.nansum(w) for w in wide], 1e-12, scale, "nansum")
                        self.assertEqual([bool(v) for v in r[5]], [bool(np.any(s)) for s in slices], "any")
                        self.assertEqual([bool(v) for v in r[6]], [bool(np.all(s)) for s in slices], "all")
                        for i in (0, 1, 2, len(slices) // 2, len(slices) - 3, len(slices) - 1):
                            counts_i, below, above, nans = numpy_histogram(slices[i], 8, -3.0, 60.0)
                            h = r[7][i]
                            self.assertEqual((list(h.counts), h.below, h.above, h.nan),
                                             (counts_i.tolist(), below, above, nans), f"histogram {i}")
                        if not empties:
                            np.testing.assert_array_equal(np.array(r[8], np.float64),
                                                          [np.float64(np.min(s)) for s in slices], "min")
                            np.testing.assert_array_equal(np.array(r[9], np.float64),
                                                          [np.float64(np.max(s)) for s in slices], "max")
                            self.assertEqual(r[10], [int(np.argmin(s)) for s in slices], "argmin")
                            self.assertEqual(r[11], [int(np.argmax(s)) for s in slices], "argmax")

    def test_bad_offsets_are_refused_naming_the_field(self):
        import grpc
        x = np.arange(10, dtype=np.float32)
        cases = (([0, 5, 3, 10], "spec.offsets[2] = 3 is less than"),
                 ([1, 5, 10], "spec.offsets[0] = 1: the first offset must be 0"),
                 ([0, 5, 11], "spec.offsets[2] = 11 is past the end"),
                 ([0, 5, 9], "spec.offsets[2] = 9: the last offset must be the array's length, 10"),
                 ([0, -1, 10], "spec.offsets[1] = -1 is less than"))
        for off, why in cases:
            with self.subTest(offsets=off):
                with self.assertRaises(grpc.RpcError) as caught:
                    self.ask(x, [agg(pb.OP_SUM)], offsets=off)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(why, caught.exception.details())
        spec = pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, offsets=b"\0" * 12)
        with self.assertRaises(grpc.RpcError) as caught:
            self.server.aggregate(pb.AggregateRequest(spec=spec, data=x.tobytes(), aggregations=[agg(pb.OP_SUM)]),
                                  timeout=60)
        self.assertIn("12 bytes is not a whole number of int64 offsets", caught.exception.details())
        for op, why in ((pb.OP_MIN, "segment 1 (offsets[1] = offsets[2] = 5) is empty"),
                        (pb.OP_NANARGMAX, "segment 1"), (pb.OP_PTP, "segment 1")):
            with self.subTest(op=op), self.assertRaises(grpc.RpcError) as caught:
                self.ask(x, [agg(pb.OP_SUM), agg(op)], offsets=[0, 5, 5, 10])
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(why, caught.exception.details())
        with self.assertRaises(grpc.RpcError) as caught:
            self.ask(x, [agg(pb.OP_SUM)], row_length=5, offsets=[0, 5, 10])
        self.assertIn("not both", caught.exception.details())
        # The server carries on.
        self.assertEqual(values(self.ask(x, [agg(pb.OP_SUM)], offsets=[0, 4, 10]).results[0]), [6.0, 39.0])

    def check_masked_rows(self, x, valid, bounds, ops_extremes, response, label):
        """Each row [a, b) of `bounds` answers as numpy on x[a:b][valid[a:b]];
        argmin and argmax at the valid element's position in the row."""
        r = [values(v) for v in response.results]
        rows = [(x[a:b][valid[a:b]], np.flatnonzero(valid[a:b])) for a, b in bounds]
        wide = [v.astype(np.float64) for v, _ in rows]
        scale = np.array([np.nansum(np.abs(w)) for w in wide])
        counts = np.array([w.size for w in wide])
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if x.dtype.kind == "f":
                self.assertCloseRows(r[0], [np.sum(w) for w in wide], 1e-12, scale, label + " sum")
            else:
                acc = np.int64 if x.dtype.kind in "ib" else np.uint64
                self.assertEqual(r[0], [int(np.sum(v, dtype=acc)) for v, _ in rows], label + " sum")
            self.assertCloseRows(r[1], [np.mean(w) if w.size else np.nan for w in wide], 1e-12,
                                 scale / np.maximum(counts, 1), label + " mean")
            self.assertEqual(r[2], counts.tolist(), label + " count")
            self.assertCloseRows(r[3], [np.var(w, ddof=1) if w.size else np.nan for w in wide], 1e-9, 0,
                                 label + " var ddof=1")
            self.assertCloseRows(r[4], [np.nansum(w) for w in wide], 1e-12, scale, label + " nansum")
            for i in sorted({0, len(rows) // 2, len(rows) - 1}):
                c, below, above, nans = numpy_histogram(rows[i][0], 8, -3.0, 60.0)
                h = r[5][i]
                self.assertEqual((list(h.counts), h.below, h.above, h.nan), (c.tolist(), below, above, nans),
                                 f"{label} histogram {i}")
            if ops_extremes:
                np.testing.assert_array_equal(np.array(r[6], np.float64), [np.float64(np.min(v)) for v, _ in rows],
                                              label + " min")
                self.assertEqual(r[7], [int(w[np.argmin(v)]) for v, w in rows], label + " argmin")
                self.assertEqual(r[8], [int(w[np.argmax(v)]) for v, w in rows], label + " argmax")
                pairs = np.array(r[9], np.float64).reshape(-1, 2)
                np.testing.assert_array_equal(pairs[:, 0], [np.float64(np.min(v)) for v, _ in rows],
                                              label + " minmax's min")
                np.testing.assert_array_equal(pairs[:, 1], [np.float64(np.max(v)) for v, _ in rows],
                                              label + " minmax's max")

    def test_validity_masks(self):
        """Every op answers as numpy on x[valid], whole, by rows and by
        segments, unary and streamed; indices count every element."""
        n, row = 20000, 400
        off = np.array([0, 3, 3000, 3001, 9000, 15000, n])
        for name, dtype in DTYPES.items():
            x = random_array(self.rng, dtype, n)
            if dtype in FLOATS:
                x[self.rng.choice(x.size, 7, replace=False)] = np.nan
            masks = {"random": self.rng.random(n) < 0.5, "every 7th missing": np.arange(n) % 7 != 3,
                     "all valid": np.ones(n, bool), "valid runs": (np.arange(n) // 2500) % 2 == 0}
            ops = [agg(pb.OP_SUM), agg(pb.OP_MEAN), agg(pb.OP_COUNT), agg(pb.OP_VARIANCE, ddof=1),
                   agg(pb.OP_NANSUM), agg(pb.OP_HISTOGRAM, bins=8, lo=-3.0, hi=60.0)]
            extremes = [agg(pb.OP_MIN), agg(pb.OP_ARGMIN), agg(pb.OP_ARGMAX), agg(pb.OP_MINMAX)]
            for mask_name, valid in masks.items():
                shapes = [("whole", dict(), [(0, n)], True),
                          (f"rows of {row}", dict(row_length=row), [(a, a + row) for a in range(0, n, row)],
                           mask_name != "valid runs"),
                          ("segments", dict(offsets=off), list(zip(off[:-1], off[1:])), mask_name == "all valid")]
                for shape, kw, bounds, with_extremes in shapes:
                    for stream in (False, True):
                        with self.subTest(dtype=name, mask=mask_name, shape=shape, stream=stream):
                            response = self.ask(x, ops + (extremes if with_extremes else []), stream=stream,
                                                valid=valid, **kw)
                            self.check_masked_rows(x, valid, bounds, with_extremes, response,
                                                   f"{name} {mask_name} {shape}")

    def test_masked_arrays_agree_with_numpy_ma(self):
        """numpy.ma's answers, the reference for masked arrays in numpy."""
        x = random_array(self.rng, np.float64, 5000)
        valid = self.rng.random(x.size) < 0.3
        m = np.ma.masked_array(x, mask=~valid)
        r = [values(v)[0] for v in self.ask(x, [agg(pb.OP_SUM), agg(pb.OP_MEAN), agg(pb.OP_STDDEV, ddof=1),
                                                agg(pb.OP_ARGMIN), agg(pb.OP_ARGMAX), agg(pb.OP_COUNT)],
                                             valid=valid).results]
        self.assertClose(r[0], m.sum(), 1e-12, "sum", scale=float(np.abs(m).sum()))
        self.assertClose(r[1], m.mean(), 1e-12, "mean", scale=float(np.abs(m).mean()))
        self.assertClose(r[2], m.std(ddof=1), 1e-9, "std ddof=1")
        self.assertEqual((r[3], r[4], r[5]), (int(m.argmin()), int(m.argmax()), int(m.count())))

    def test_rows_with_no_valid_element(self):
        """Empty-array answers; ops with no value there are refused naming the row."""
        import grpc
        x = np.arange(12, dtype=np.int32)
        valid = np.ones(12, bool)
        valid[4:8] = False  # row 1 of rows of 4
        r = [values(v) for v in self.ask(x, [agg(pb.OP_SUM), agg(pb.OP_MEAN), agg(pb.OP_COUNT)], row_length=4,
                                         valid=valid).results]
        self.assertEqual(r[0], [6, 0, 38])
        self.assertTrue(math.isnan(r[1][1]))
        self.assertEqual(r[2], [4, 0, 4])
        for op in (pb.OP_MIN, pb.OP_ARGMAX, pb.OP_MINMAX, pb.OP_PTP):
            for stream in (False, True):
                with self.subTest(op=op, stream=stream), self.assertRaises(grpc.RpcError) as caught:
                    self.ask(x, [agg(pb.OP_SUM), agg(op)], row_length=4, valid=valid, stream=stream)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("row 1 has no valid elements", caught.exception.details())
        nothing = np.zeros(12, bool)
        self.assertEqual(values(self.ask(x, [agg(pb.OP_SUM)], valid=nothing).results[0]), [0])
        with self.assertRaises(grpc.RpcError) as caught:
            self.ask(x.astype(np.float32), [agg(pb.OP_NANMIN)], valid=nothing)
        self.assertIn("the array has no valid elements", caught.exception.details())

    def test_bad_masks_are_refused_naming_the_field(self):
        import grpc
        x = np.arange(10, dtype=np.float32)
        for size in (1, 3):
            spec = pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, validity=b"\xff" * size)
            with self.subTest(size=size), self.assertRaises(grpc.RpcError) as caught:
                self.server.aggregate(pb.AggregateRequest(spec=spec, data=x.tobytes(), aggregations=[agg(pb.OP_SUM)]),
                                      timeout=60)
            self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(f"spec.validity: {size} bytes, but a mask of 10 elements takes ceil(10 / 8) = 2 bytes",
                          caught.exception.details())

        def stream():
            yield pb.AggregateStreamRequest(header=pb.AggregateStreamRequest.Header(
                spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, length=10, validity=b"\xff"),
                aggregations=[agg(pb.OP_SUM)]))
            yield pb.AggregateStreamRequest(chunk=x.tobytes())
        with self.assertRaises(grpc.RpcError) as caught:
            self.server.aggregate_stream(stream(), timeout=60)
        self.assertIn("header.spec.validity: 1 bytes", caught.exception.details())
        # Bits past the length are ignored; the server carries on.
        spec = pb.ArraySpec(dtype=pb.DTYPE_FLOAT32, validity=bytes([0b11111110, 0b11111111]))
        got = self.server.aggregate(pb.AggregateRequest(spec=spec, data=x.tobytes(),
                                                        aggregations=[agg(pb.OP_SUM), agg(pb.OP_COUNT)]), timeout=60)
        self.assertEqual([values(v)[0] for v in got.results], [45.0, 9])

    def test_minmax(self):
        """(min, max) in one answer: two values per row, min first."""
        import grpc
        for name, dtype in DTYPES.items():
            x = random_array(self.rng, dtype, 3000)
            with self.subTest(dtype=name):
                got = values(self.ask(x, [agg(pb.OP_MINMAX), agg(pb.OP_SUM)]).results[0])
                self.assertEqual(len(got), 2)
                self.assertSame(got[0], np.min(x), "min")
                self.assertSame(got[1], np.max(x), "max")
                rows = values(self.ask(x, [agg(pb.OP_MAX), agg(pb.OP_MINMAX)], row_length=300).results[1])
                want = np.stack([x.reshape(-1, 300).min(axis=1), x.reshape(-1, 300).max(axis=1)], axis=1)
                np.testing.assert_array_equal(np.array(rows, np.float64), want.astype(np.float64).reshape(-1))
        y = np.array([1.0, np.nan, 3.0], np.float64)
        self.assertTrue(all(math.isnan(v) for v in values(self.ask(y, [agg(pb.OP_MINMAX)]).results[0])))
        partial = agg(pb.OP_MINMAX)
        partial.partial.base_index = 0
        for a, why in (([partial], "aggregations[0].partial: minmax has no partial state"),):
            with self.assertRaises(grpc.RpcError) as caught:
                self.ask(y, a)
            self.assertIn(why, caught.exception.details())
        with self.assertRaises(grpc.RpcError) as caught:
            self.ask(np.zeros(0, np.float32), [agg(pb.OP_MINMAX)])
        self.assertIn("empty array has no minmax", caught.exception.details())

    def test_infinities_in_mean_and_variance(self):
        # numpy's mean is the sum's: inf with +inf alone, NaN with both
        # infinities; its variance is NaN (x - mean is inf - inf).
        for dtype in FLOATS:
            for n in (3, 1009, 100003):
                for infs in ([np.inf], [-np.inf], [np.inf, -np.inf]):
                    x = random_array(self.rng, dtype, n)
                    x[self.rng.choice(n, len(infs), replace=False)] = infs
                    ops = [agg(pb.OP_MEAN), agg(pb.OP_VARIANCE), agg(pb.OP_NANMEAN), agg(pb.OP_SUM)]
                    r = [values(v)[0] for v in self.ask(x, ops).results]
                    label = f"{dtype.__name__}[{n}] {infs} seed {SEED}"
                    with np.errstate(all="ignore"):
                        want = float(np.mean(x.astype(np.float64)))
                        self.assertSame(r[0], want, label + " mean")
                        self.assertSame(r[2], want, label + " nanmean")
                        self.assertSame(r[3], float(np.sum(x.astype(np.float64))), label + " sum")
                        self.assertTrue(math.isnan(r[1]) and math.isnan(np.var(x)), label + " var")

    def test_float16_sum_past_float16s_range(self):
        # numpy adds float16 in float32 and rounds the sum to float16: inf past
        # 65504. tally answers the float64 sum (the proto's DTYPE_FLOAT16).
        x = np.full(10000, 100.0, np.float16)
        r = values(self.ask(x, [agg(pb.OP_SUM), agg(pb.OP_MEAN), agg(pb.OP_PTP)]).results[0])
        self.assertEqual(r, [1e6])
        with np.errstate(over="ignore"):
            self.assertEqual(np.sum(x), np.inf)
        y = np.array([-60000.0, 60000.0], np.float16)  # ptp is rounded to float16: inf, as numpy's
        with np.errstate(all="ignore"):
            self.assertEqual(values(self.ask(y, [agg(pb.OP_PTP)]).results[0]), [float(np.ptp(y))])
        self.assertEqual(values(self.ask(y, [agg(pb.OP_PTP)]).results[0]), [math.inf])

    def test_bfloat16_is_float32s_top_half(self):
        # numpy has no bfloat16: the array travels as its bits, and every
        # answer is the answer for the same values as float32 (the proto's
        # DTYPE_BFLOAT16), histogram edges rounded to bfloat16 aside.
        for n in (1, 33, 100003):
            f32 = (self.rng.standard_normal(n) * 3 + 0.5).astype(np.float32)
            bits = (f32.view(np.uint32) >> 16).astype(np.uint16)
            if n > 1:
                bits[n // 2] = 0x7FC0  # a NaN
            wide = (bits.astype(np.uint32) << 16).view(np.float32)
            spec = pb.ArraySpec(dtype=pb.DTYPE_BFLOAT16)
            ops = [agg(pb.OP_SUM), agg(pb.OP_MIN), agg(pb.OP_NANMAX), agg(pb.OP_NANARGMIN), agg(pb.OP_MEAN),
                   agg(pb.OP_NANVAR, ddof=1), agg(pb.OP_HISTOGRAM, bins=20, lo=-4.0, hi=4.0), agg(pb.OP_PTP)]
            r = [values(v) for v in self.server.aggregate(
                pb.AggregateRequest(spec=spec, data=bits.tobytes(), aggregations=ops), timeout=60).results]
            label = f"bfloat16[{n}] seed {SEED}"
            w64 = wide.astype(np.float64)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if n > 1:
                    self.assertTrue(math.isnan(r[0][0]) and math.isnan(r[1][0]) and math.isnan(r[7][0]), label)
                else:
                    self.assertClose(r[0][0], np.sum(w64), 1e-12, label)
                    self.assertEqual(r[1][0], float(wide[0]), label)
                self.assertEqual(r[2][0], float(np.nanmax(wide)), label)
                self.assertEqual(r[3][0], int(np.nanargmin(wide)), label)
                self.assertClose(r[5][0] if n > 1 else 0.0, np.nanvar(w64, ddof=1) if n > 1 else 0.0, 1e-9, label)
            # Edges: linspace in float64 rounded once to bfloat16 (8 bits).
            edges = np.array([bfloat16_round(e) for e in np.linspace(-4.0, 4.0, 21)])
            h = r[6][0]
            finite = w64[~np.isnan(w64)]
            inside = finite[(finite >= edges[0]) & (finite <= edges[-1])]
            counts = np.bincount(np.minimum(np.searchsorted(edges, inside, side="right") - 1, 19), minlength=20)
            self.assertEqual(list(h.counts), counts.tolist(), label)
            self.assertEqual((h.below, h.above, h.nan),
                             (int(np.sum(finite < edges[0])), int(np.sum(finite > edges[-1])), int(np.sum(np.isnan(w64)))))

    def test_float32_sum_of_ten_million_positive_values_is_accurate(self):
        x = self.rng.random(10_000_000, dtype=np.float32)
        got = values(self.ask(x, [agg(pb.OP_SUM)], stream=True).results[0])[0]
        exact = math.fsum(x.astype(np.float64).tolist())
        self.assertLessEqual(abs(got - exact) / exact, 1e-6)


if __name__ == "__main__":
    SERVER_BINARY, PROTO_ROOT = sys.argv[1], sys.argv[2]
    for arg in sys.argv[3:]:
        if arg.startswith("--backend="):
            BACKEND = arg.split("=", 1)[1]
    pb = load_messages(PROTO_ROOT)
    print(f"numpy {np.__version__}, backend {BACKEND}, seed {SEED} (set TALLY_TEST_SEED to repeat)")
    unittest.main(argv=[sys.argv[0], "-v"])
