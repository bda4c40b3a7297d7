"""The tally Python package against the real server: every op and dtype
compared with numpy (whole arrays and rows, contiguous or not, unary and
streamed), partial states merged and finished against one-shot answers,
resident datasets, errors, deadlines and the credential arguments.

usage: tally_client_test.py TALLY_SERVER_BINARY [--backend=cpu]
(the package, built with its stubs, on PYTHONPATH)
"""
import os
import sys
import unittest
import warnings

import grpc
import numpy as np

import tally
from tally import partial as tp
from tally.v1 import tally_pb2
from tally_test_server import ClientTestCase

SERVER_BINARY = None
BACKEND = "cpu"
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint8, np.int8, np.int16, np.uint16, np.uint64, np.bool_,
          np.float16]
ALL_OPS = ["sum", "min", "max", "mean", "count", "sumsq", "var", "std:1", "argmin", "argmax",
           "hist:37:-3.5:60.25"]
warnings.filterwarnings("ignore", message="Degrees of freedom <= 0")


def random_array(rng, dtype, shape, nans=False):
    if np.dtype(dtype).kind == "f":
        # float16 values small enough that numpy's float16 variance (squares
        # rounded to float16, summed into float16) does not overflow.
        scale, shift = (0.5, 0.25) if dtype == np.float16 else (20, 10)
        x = (rng.standard_normal(shape) * scale + shift).astype(dtype)
        if nans:
            x.reshape(-1)[rng.integers(0, x.size, 3)] = np.nan
        return x
    # Small values repeat, so ties test the first-occurrence rule.
    lo = -5 if np.dtype(dtype).kind == "i" else 0
    return rng.integers(lo, 70, size=shape).astype(dtype)


def numpy_histogram(x, bins, lo, hi):
    counts, edges = np.histogram(x, bins=bins, range=(lo, hi))
    work = x.astype(np.float64) if x.dtype.kind in "iub" else x
    lo_t, hi_t = work.dtype.type(lo), work.dtype.type(hi)
    return counts, edges, int(np.sum(work < lo_t)), int(np.sum(work > hi_t)), int(np.sum(np.isnan(work)))


class Base(ClientTestCase):
    pass


class AgainstNumpy(Base):
    def check_row(self, r, x, where):
        """Every answer for the 1-D array x (r's answers are scalars)."""
        wide = x.astype(np.float64)
        n = x.size
        abs_sum = float(np.sum(np.abs(wide)))
        has_nan = bool(np.isnan(wide).any())
        msg = f"{x.dtype} {where}"
        # Dtypes numpy's own reductions return.
        for op, ref in (("sum", np.sum(x)), ("min", np.min(x)), ("max", np.max(x)), ("mean", np.mean(x)),
                        ("var", np.var(x)), ("std:1", np.std(x, ddof=1)), ("argmin", np.argmin(x))):
            self.assertEqual(np.asarray(r[op]).dtype, np.asarray(ref).dtype, f"{op} {msg}")
        if x.dtype.kind == "f":
            eps = np.finfo(x.dtype).eps
            if has_nan:
                self.assertTrue(np.isnan(r["sum"]), msg)
            elif x.dtype == np.float16:
                # numpy adds float16 in float32 (pairwise) and rounds to
                # float16; the client rounds tally's float64 sum to float16:
                # a float16 ulp apart, plus float32's error.
                eps32 = np.finfo(np.float32).eps
                for op, ref in (("sum", float(np.sum(x))), ("mean", float(np.mean(x)))):
                    bound = eps * abs(ref) + (np.log2(n) + 2) * eps32 * abs_sum / (n if op == "mean" else 1)
                    self.assertLessEqual(abs(float(r[op]) - ref), bound, f"{op} {msg}")
                # numpy's float16 variance squares and sums in float16.
                np.testing.assert_allclose(r["var"], np.var(x), rtol=5e-3, err_msg=msg)
                np.testing.assert_allclose(r["std:1"], np.std(x, ddof=1), rtol=5e-3, err_msg=msg)
            else:
                # numpy adds float32 in float32 (pairwise), tally in float64.
                bound = (np.log2(n) + 2) * eps * abs_sum if x.dtype == np.float32 else n * eps * abs_sum
                self.assertLessEqual(abs(float(r["sum"]) - float(np.sum(x))), bound + 1e-300, msg)
                self.assertLessEqual(abs(float(r["mean"]) - float(np.mean(x))), bound / n + 1e-300, msg)
                rtol = 1e-4 if x.dtype == np.float32 else 1e-10
                np.testing.assert_allclose(r["var"], np.var(x), rtol=rtol, err_msg=msg)
                np.testing.assert_allclose(r["std:1"], np.std(x, ddof=1), rtol=rtol, err_msg=msg)
        else:
            self.assertEqual(r["sum"], np.sum(x), msg)
            np.testing.assert_allclose(r["mean"], np.mean(x), rtol=1e-13, err_msg=msg)
            np.testing.assert_allclose(r["var"], np.var(x), rtol=1e-10, err_msg=msg)
            np.testing.assert_allclose(r["std:1"], np.std(x, ddof=1), rtol=1e-10, err_msg=msg)
        np.testing.assert_array_equal(r["min"], np.min(x), err_msg=msg)
        np.testing.assert_array_equal(r["max"], np.max(x), err_msg=msg)
        self.assertEqual(r["count"], n, msg)
        if not has_nan:
            np.testing.assert_allclose(r["sumsq"], np.sum(wide * wide), rtol=1e-12, err_msg=msg)
        self.assertEqual(r["argmin"], np.argmin(x), msg)
        self.assertEqual(r["argmax"], np.argmax(x), msg)
        counts, edges, below, above, nan = numpy_histogram(x, 37, -3.5, 60.25)
        h = r["hist:37:-3.5:60.25"]
        got_counts, got_edges = h
        np.testing.assert_array_equal(got_counts, counts, err_msg=msg)
        np.testing.assert_array_equal(got_edges, edges, err_msg=msg)
        self.assertEqual(got_edges.dtype, edges.dtype, msg)
        self.assertEqual((h.below, h.above, h.nan), (below, above, nan), msg)

    def test_every_op_and_dtype_on_whole_arrays(self):
        for dtype in DTYPES:
            for nans in ([False, True] if np.dtype(dtype).kind == "f" else [False]):
                x = random_array(self.rng, dtype, 20011, nans)
                self.check_row(self.client.aggregate(x, ALL_OPS), x, f"whole nans={nans}")

    def test_every_op_and_dtype_by_row(self):
        for dtype in DTYPES:
            m = random_array(self.rng, dtype, (7, 3001))
            r = self.client.aggregate(m, ALL_OPS)
            self.assertEqual(r["sum"].shape, (7,))
            self.assertEqual(r["hist:37:-3.5:60.25"].counts.shape, (7, 37))
            for i in range(m.shape[0]):
                row = tally.Results([tally.Op.parse(o) for o in ALL_OPS],
                                    [self._row(v, i) for v in r.values()], r.execution)
                self.check_row(row, m[i], f"row {i}")

    @staticmethod
    def _row(value, i):
        if isinstance(value, tally.Histogram):
            return tally.Histogram(value.counts[i], value.edges, value.below[i], value.above[i], value.nan[i])
        return value[i]

    def test_answers_numbers_as_bytes_where_asked(self):
        """Aggregation.values_as_bytes over rows: the answer's numbers in its
        Values message's data bytes, the repeated values' numbers; and the
        client asks for them so."""
        pb = tally_pb2
        m = random_array(self.rng, np.float64, (1000, 30))
        aggregate = self.server.channel.unary_unary("/tally.v1.Aggregator/Aggregate",
                                                   request_serializer=pb.AggregateRequest.SerializeToString,
                                                   response_deserializer=pb.AggregateResponse.FromString)
        got = {}
        for as_bytes in (False, True):
            aggs = [pb.Aggregation(op=op, values_as_bytes=as_bytes, k=2 if op == pb.OP_TOPK else 0)
                    for op in (pb.OP_SUM, pb.OP_ARGMAX, pb.OP_COUNT, pb.OP_TOPK)]
            reply = aggregate(pb.AggregateRequest(spec=pb.ArraySpec(dtype=pb.DTYPE_FLOAT64, length=m.size, row_length=30),
                                                  data=m.tobytes(), aggregations=aggs), timeout=60)
            numbers = []
            for r in reply.results:
                kind = r.WhichOneof("values")
                fields = [(getattr(r, kind), {"doubles": "<f8", "int64s": "<i8", "uint64s": "<u8"}[kind])]
                if r.HasField("indices"):
                    fields += [(r.indices, "<i8"), (r.lengths, "<u8")]
                for message, dtype in fields:
                    self.assertEqual(len(message.values) == 0, as_bytes)
                    self.assertEqual(len(message.data) > 0, as_bytes)
                    numbers.append(np.frombuffer(message.data, dtype) if as_bytes else np.array(message.values, dtype))
            got[as_bytes] = numbers
        for a, b in zip(got[False], got[True], strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(got[True][0], np.sum(m, axis=1), rtol=1e-12)  # tally's sums are exact
        self.assertTrue(self.client._wire_op(tally.Op.parse("sum")).values_as_bytes)

    def test_arrays_that_are_not_c_contiguous_or_little_endian_are_copied(self):
        m = random_array(self.rng, np.int32, (300, 200))
        for view, where in ((m[:, ::3], "strided"), (m.T, "transposed"),
                            (m.astype(">i4"), "big-endian"), (m[::2].astype(">f8"), "big-endian float64")):
            r = self.client.aggregate(view, ["sum", "argmax", "min"])
            np.testing.assert_array_equal(r["sum"], np.sum(view, axis=1), err_msg=where)
            np.testing.assert_array_equal(r["argmax"], np.argmax(view, axis=1), err_msg=where)
            np.testing.assert_array_equal(r["min"], np.min(view, axis=1), err_msg=where)

    def test_large_arrays_stream_with_progress(self):
        client = tally.Client(self.target, stream_threshold=1 << 16, chunk_bytes=100_003)
        x = random_array(self.rng, np.float64, 300_007)
        seen = []
        r = client.aggregate(x, ["sum", "argmax", "hist:10:0:20"], progress=lambda s, t: seen.append((s, t)))
        unary = self.client.aggregate(x, ["sum", "argmax", "hist:10:0:20"])
        self.assertEqual(r["sum"], unary["sum"])  # the same cuts, the same bits
        self.assertEqual(r["argmax"], unary["argmax"])
        self.assertEqual(seen[0], (0, x.nbytes))
        self.assertEqual(seen[-1], (x.nbytes, x.nbytes))
        self.assertEqual([s for s, _ in seen], sorted(s for s, _ in seen))
        self.assertGreater(len(seen), 20)
        client.close()

    def test_op_objects_and_lookup_by_any_spelling(self):
        x = random_array(self.rng, np.float64, 1000)
        r = self.client.aggregate(x, [tally.Op("stddev", ddof=1), "hist:4:0:1", "sum, max", "var:1"])
        # Keys are the spellings asked for; an Op object is keyed by its canonical one.
        self.assertEqual(list(r), ["stddev:1.0", "hist:4:0:1", "sum", "max", "var:1"])
        # Float moments agree with numpy's to rounding (another summation order).
        np.testing.assert_allclose(dict(r)["var:1"], np.var(x, ddof=1), rtol=1e-12)
        self.assertEqual(r["std:1"], r[tally.Op("stddev", ddof=1.0)])
        self.assertEqual(r[0], r["stddev:1"])
        self.assertEqual(r["variance:1.0"], r["var:1"])
        self.assertNotIn("min", r)
        self.assertNotIn("not an op", r)
        # What the server did, as a plain object.
        e = r.execution
        self.assertIsInstance(e, tally.Execution)
        self.assertEqual((e.elements, e.bytes, e.rows), (1000, 8000, 1))
        # A cuda server routes an array this small to its cpu backend
        # (--small_request_bytes) unless told otherwise: either names itself.
        self.assertIn(e.backend, {BACKEND, "cpu"})
        self.assertTrue(e.device)
        self.assertGreaterEqual(e.seconds, 0.0)
        # Its repr names every field, so printing a result says what ran where.
        self.assertRegex(repr(e), rf"^Execution\(elements=1000, bytes=8000, rows=1, backend='{e.backend}', "
                                  r"device='.+', seconds=[0-9.e-]+\)$")


    def test_nan_ops_answer_as_numpy_nan_functions(self):
        for dtype in (np.float32, np.float64, np.int32, np.uint8):
            x = random_array(self.rng, dtype, 1000)
            if x.dtype.kind == "f":
                x[[0, 500, 999]] = np.nan
            r = self.client.aggregate(x, "nansum,nanmean,nanmin,nanmax,nanargmin,nanargmax,nanvar:1,nanstd,nancount")
            self.assertEqual(list(r)[6], "nanvar:1")
            want = [np.nansum(x), np.nanmean(x), np.nanmin(x), np.nanmax(x), np.nanargmin(x), np.nanargmax(x),
                    np.nanvar(x, ddof=1), np.nanstd(x), np.count_nonzero(~np.isnan(x.astype(np.float64)))]
            for k, (got, expect) in enumerate(zip(r.values(), want)):
                with self.subTest(dtype=np.dtype(dtype).name, op=list(r)[k]):
                    self.assertEqual(np.asarray(got).dtype, np.asarray(expect).dtype if k != 8 else np.int64)
                    np.testing.assert_allclose(got, expect, rtol=1e-5)
        m = np.ones((3, 4), np.float64)
        m[1] = np.nan
        r = self.client.aggregate(m, "nansum,nanmin,nancount")
        np.testing.assert_array_equal(r["nansum"], [4.0, 0.0, 4.0])
        np.testing.assert_array_equal(r["nanmin"], [1.0, np.nan, 1.0])
        np.testing.assert_array_equal(r["nancount"], [4, 0, 4])
        with self.assertRaises(tally.Error):
            self.client.aggregate(m, "nanargmax")

    def test_masks_answer_as_numpy_on_the_valid_elements(self):
        x = random_array(self.rng, np.float32, 5000, False)
        valid = self.rng.random(x.size) < 0.6
        r = self.client.aggregate(x, "sum,mean,count,argmax,minmax", valid=valid)
        np.testing.assert_allclose(r["sum"], np.sum(x[valid], dtype=np.float64), rtol=1e-6)
        np.testing.assert_allclose(r["mean"], np.mean(x[valid], dtype=np.float64), rtol=1e-6)
        self.assertEqual(r["count"], np.count_nonzero(valid))
        self.assertEqual(r["argmax"], np.ma.masked_array(x, ~valid).argmax())
        self.assertEqual(r["minmax"], (np.min(x[valid]), np.max(x[valid])))
        self.assertEqual(r["minmax"][0].dtype, np.float32)
        # A numpy.ma.MaskedArray brings its own mask; rows mask row by row.
        m = np.ma.masked_array(x.reshape(10, 500), mask=~valid.reshape(10, 500))
        rows = self.client.aggregate(m, "sum,minmax,count")
        np.testing.assert_allclose(rows["sum"], m.sum(axis=1).astype(np.float64), rtol=1e-5)
        np.testing.assert_array_equal(rows["minmax"], np.stack([m.min(axis=1), m.max(axis=1)], axis=1))
        np.testing.assert_array_equal(rows["count"], m.count(axis=1))
        with self.assertRaises(ValueError):
            self.client.aggregate(m, "sum", valid=valid.reshape(10, 500))
        with self.assertRaises(ValueError):
            self.client.aggregate(x, "sum", valid=valid[:-1])
        with self.assertRaises(ValueError):
            self.client.partial(x, "minmax")
        self.client.put_dataset("ds-masked", x, replace=True)
        try:
            d = self.client.aggregate_dataset("ds-masked", "sum,min", range=(1000, 3000), valid=valid[1000:3000])
            np.testing.assert_allclose(d["sum"], np.sum(x[1000:3000][valid[1000:3000]], dtype=np.float64), rtol=1e-6)
            self.assertEqual(d["min"], np.min(x[1000:3000][valid[1000:3000]]))
        finally:
            self.client.delete_dataset("ds-masked")

    def test_prod_logical_ops_answer_in_numpy_dtypes(self):
        for dtype in (np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint8):
            x = random_array(self.rng, dtype, 1000)
            x[::7] = 0
            if x.dtype.kind == "f":
                x = (np.where(x == 0, 0, 1) * (1 + x / 1e4)).astype(dtype)  # products near 1: no overflow
                x[3] = np.nan
            r = self.client.aggregate(x, "prod,nnz,any,all,ptp")
            self.assertEqual(list(r), ["prod", "nnz", "any", "all", "ptp"])
            with np.errstate(all="ignore"):
                want = [np.prod(x), np.count_nonzero(x), np.any(x), np.all(x), np.ptp(x)]
            for k, (got, expect) in enumerate(zip(r.values(), want)):
                with self.subTest(dtype=np.dtype(dtype).name, op=list(r)[k]):
                    # numpy.count_nonzero gives a Python int; tally int64 (numpy's intp).
                    self.assertEqual(np.asarray(got).dtype, np.asarray(expect).dtype if k != 1 else np.int64)
                    np.testing.assert_allclose(got, expect, rtol=1e-5)
        m = np.array([[1, 2, 3], [0, 0, 0], [-1, 0, 5]], np.int32)
        r = self.client.aggregate(m, ["prod", "count_nonzero", "any", "all", "ptp"])
        np.testing.assert_array_equal(r["prod"], np.prod(m, axis=1))
        self.assertEqual(r["prod"].dtype, np.int64)
        np.testing.assert_array_equal(r["count_nonzero"], [3, 0, 2])
        np.testing.assert_array_equal(r["any"], [True, False, True])
        np.testing.assert_array_equal(r["all"], [True, False, False])
        self.assertEqual(r["all"].dtype, np.bool_)
        np.testing.assert_array_equal(r["ptp"], np.ptp(m, axis=1))
        self.assertEqual(r["ptp"].dtype, np.int32)
        with self.assertRaises(tally.Error):
            self.client.aggregate(np.zeros(0, np.float32), "ptp")

class PartialStates(Base):
    def parts(self, x, cuts, ops, how):
        """Partial states of x[cuts[k]:cuts[k+1]] (of those columns, for 2-D x)."""
        out = []
        for k in range(len(cuts) - 1):
            part = x[..., cuts[k]:cuts[k + 1]]
            if how[k % len(how)] == "dataset":
                name = f"part-{self.id()}-{k}"
                self.client.put_dataset(name, part.reshape(-1), replace=True)
                out.append(self.client.partial_dataset(name, ops, row_length=part.shape[1] if part.ndim == 2 else 0,
                                                       base_index=cuts[k]))
                self.client.delete_dataset(name)
            else:
                client = tally.Client(self.target, stream_threshold=0 if how[k % len(how)] == "stream" else 1 << 30,
                                      chunk_bytes=4099)
                out.append(client.partial(part, ops, base_index=cuts[k]))
                client.close()
        return out

    def assert_same_answer(self, got, want, op, x, msg):
        exact = op.kind in ("min", "max", "count", "argmin", "argmax", "histogram") or \
            (op.kind == "sum" and x.dtype.kind != "f")
        if op.kind == "histogram":
            for a, b in zip((got.counts, got.below, got.above, got.nan), (want.counts, want.below, want.above, want.nan)):
                np.testing.assert_array_equal(a, b, err_msg=msg)
            return
        self.assertEqual(np.asarray(got).dtype, np.asarray(want).dtype, msg)
        if exact:
            np.testing.assert_array_equal(got, want, err_msg=msg)
            return
        # Float sums and moments: to rounding. Sums at n * eps of sum|x|,
        # positive moments relatively; float32 answers at float32's rounding.
        wide = x.astype(np.float64)
        abs_sum = np.sum(np.abs(wide), axis=-1)
        eps = np.finfo(np.asarray(want).dtype).eps if np.asarray(want).dtype == np.float32 else 1e-13
        if op.kind == "sum":
            bound = eps * abs_sum
        elif op.kind == "mean":
            bound = eps * abs_sum / x.shape[-1]
        else:
            bound = 4 * eps * np.abs(np.asarray(want, dtype=np.float64))
        err = np.abs(np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64))
        both_nan = np.isnan(np.asarray(got, dtype=np.float64)) & np.isnan(np.asarray(want, dtype=np.float64))
        self.assertTrue(np.all((err <= bound) | both_nan), f"{msg}: error {err} over {bound}")

    def test_merged_parts_finish_to_the_whole_arrays_answer(self):
        ops = [tally.Op.parse(o) for o in ALL_OPS]
        for dtype in DTYPES:
            for shape in ((100_003,), (5, 20_011)):
                x = random_array(self.rng, dtype, shape, nans=(np.dtype(dtype) == np.float64 and len(shape) == 1))
                n = shape[-1]
                want = self.client.aggregate(x, ops)
                cuts = [0, 1, n // 3 + 5, 2 * n // 3, n]
                states = self.parts(x, cuts, ops, ["unary", "stream", "dataset"])
                for k, op in enumerate(ops):
                    column = [s[k] for s in states]
                    left = tally.merge_all(column)
                    right = column[-1]
                    for s in reversed(column[:-1]):
                        right = tally.merge(s, right)
                    for tree, merged in (("left", left), ("right", right)):
                        self.assert_same_answer(tally.finish(merged), want[k], op, x,
                                                f"{np.dtype(dtype)} {shape} {op} {tree}")

    def test_merged_infinities_give_numpys_mean_and_variance(self):
        # numpy's mean of values holding an infinity is the sum's (inf, -inf,
        # or NaN for both), and the variance NaN: Chan's merge alone would
        # give NaN for the mean too (inf - inf).
        for inf_parts in (([np.inf], []), ([-np.inf], [-np.inf]), ([np.inf], [-np.inf])):
            a = np.array([1.0, 2.0] + inf_parts[0])
            b = np.array([3.0] + inf_parts[1])
            whole = np.concatenate([a, b])
            for op in ("mean", "var"):
                states = [self.client.partial(a, [op])[0], self.client.partial(b, [op], base_index=a.size)[0]]
                got = float(tally.finish(tally.merge_all(states)))
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = float(np.mean(whole) if op == "mean" else np.var(whole))
                self.assertTrue(got == want or (np.isnan(got) and np.isnan(want)), f"{op} of {whole}: {got} vs {want}")

    def test_nan_skipping_partials_merge_to_numpys_nan_functions(self):
        # Each part's state covers its non-NaN elements; merged they give
        # numpy's nan-functions over the whole array, on floats with NaNs (a
        # part all NaN included) and on integers (where they are the plain
        # ops: nanvar with ddof >= n is inf, as var's).
        nan_ops = ["nansum", "nanmean", "nanmin", "nanmax", "nanargmin", "nanargmax", "nanvar", "nanstd:1",
                   "nancount"]
        numpy_of = {"nansum": np.nansum, "nanmean": np.nanmean, "nanmin": np.nanmin, "nanmax": np.nanmax,
                    "nanargmin": np.nanargmin, "nanargmax": np.nanargmax, "nanvar": np.nanvar,
                    "nanstd:1": lambda v: np.nanstd(v, ddof=1), "nancount": lambda v: np.count_nonzero(~np.isnan(v))}
        for dtype in (np.float64, np.float32, np.float16, np.int32):
            x = random_array(self.rng, dtype, (9_001,))
            if np.dtype(dtype).kind == "f":
                x[self.rng.integers(0, x.size, 700)] = np.nan
                x[3000:4000] = np.nan  # the second part is all NaN
            cuts = [0, 3000, 4000, 6500, x.size]
            parts = [self.client.partial(x[a:b], nan_ops, base_index=a) for a, b in zip(cuts, cuts[1:])]
            for k, op in enumerate(nan_ops):
                got = tally.finish(tally.merge_all([p[k] for p in parts]))
                want = numpy_of[op](x.astype(np.float64) if np.dtype(dtype).kind == "f" else x)
                if op in ("nanargmin", "nanargmax", "nancount", "nanmin", "nanmax"):
                    self.assertEqual(float(got), float(want), f"{np.dtype(dtype)} {op}")
                else:
                    # Answers come in the input's float type, as numpy's do.
                    rtol = {np.float32: 1e-6, np.float16: 1e-3}.get(dtype, 1e-9)
                    np.testing.assert_allclose(float(got), float(want), rtol=rtol, err_msg=f"{np.dtype(dtype)} {op}")
        for dtype, check in ((np.int32, np.isinf), (np.float64, np.isnan)):
            (p,) = self.client.partial(np.array([1, 2, 4], dtype), ["nanvar:3"])
            self.assertTrue(check(float(tally.finish(p))), np.dtype(dtype))
        # All NaN: nanmin NaN (numpy warns), nanargmin no value (numpy raises);
        # no element at all: neither has a value.
        nanmin, nanargmin = self.client.partial(np.full(5, np.nan), ["nanmin", "nanargmin"])
        self.assertTrue(np.isnan(tally.finish(tally.merge(nanmin, tp.empty(nanmin.op, np.float64)))))
        with self.assertRaises(ValueError):
            tally.finish(nanargmin)
        with self.assertRaises(ValueError):
            tally.finish(self.client.partial(np.zeros(0), ["nanmin"])[0])

    def test_one_part_finished_is_bitwise_the_servers_answer(self):
        ops = [tally.Op.parse(o) for o in ALL_OPS]
        for dtype in DTYPES:
            for shape in ((30_011,), (3, 5003)):
                x = random_array(self.rng, dtype, shape, nans=np.dtype(dtype).kind == "f")
                want = self.client.aggregate(x, ops)
                for op, p in zip(ops, self.client.partial(x, ops)):
                    got = tally.finish(p)
                    if op.kind == "histogram":
                        np.testing.assert_array_equal(got.counts, want[op].counts)
                        continue
                    self.assertEqual(np.asarray(got).tobytes(), np.asarray(want[op]).tobytes(), f"{dtype} {op}")

    def test_empty_states_are_the_identity(self):
        x = np.array([4, -2, 7, -2, 7], dtype=np.int32)
        full = self.client.partial(x, ALL_OPS, base_index=10)
        none = self.client.partial(np.zeros(0, np.int32), ALL_OPS)
        for f, e in zip(full, none):
            for merged in (tally.merge(f, e), tally.merge(e, f), tally.merge(f, tally.empty(f.op, np.int32))):
                if f.op.kind == "histogram":
                    np.testing.assert_array_equal(tally.finish(merged).counts, tally.finish(f).counts)
                else:
                    self.assertEqual(tally.finish(merged), tally.finish(f), str(f.op))
        self.assertEqual(tally.finish(full[8]), 11)  # argmin: the first -2, plus the base index
        self.assertEqual(tally.finish(full[9]), 12)
        with self.assertRaisesRegex(ValueError, "no elements"):
            tally.finish(none[1])  # min of nothing
        self.assertTrue(np.isnan(tally.finish(none[3])))  # mean of nothing

    def test_mismatched_and_unknown_states_are_refused(self):
        x = random_array(self.rng, np.float64, 100)
        h1, h2, s = self.client.partial(x, ["hist:4:0:1", "hist:4:0:2", "sum"])
        with self.assertRaisesRegex(ValueError, "different aggregations"):
            tally.merge(h1, h2)
        with self.assertRaisesRegex(ValueError, "different aggregations"):
            tally.merge(h1, s)
        (s32,) = self.client.partial(x.astype(np.float32), "sum")
        with self.assertRaisesRegex(ValueError, "float64 and float32"):
            tally.merge(s, s32)
        (rows,) = self.client.partial(x.reshape(10, 10), "sum")
        with self.assertRaisesRegex(ValueError, "rows"):
            tally.merge(s, rows)
        future = tp.Partial(**{**s.__dict__, "version": 2})
        with self.assertRaisesRegex(ValueError, "version 2"):
            tally.merge(s, future)
        with self.assertRaisesRegex(ValueError, "version 2"):
            tally.finish(future)
        wire = tally_pb2.AggregationResult(partials=tally_pb2.PartialStates(version=2, dtype=tally_pb2.DTYPE_FLOAT64))
        with self.assertRaisesRegex(ValueError, "version 2"):
            tp.Partial.from_proto(tally.Op("sum"), wire, False)


class Datasets(Base):
    def test_put_query_list_describe_delete(self):
        x = random_array(self.rng, np.uint32, 10_000)
        info = self.client.put_dataset("ds-client", x, replace=True)
        self.assertEqual((info.name, info.dtype, info.length, info.bytes), ("ds-client", np.dtype(np.uint32), 10_000, 40_000))
        self.assertEqual(info.shards, 1)  # 40 KB: under two shards' minimum
        self.assertIn("ds-client", [d.name for d in self.client.list_datasets()])
        r = self.client.aggregate_dataset("ds-client", "sum,argmax,max", range=(1000, 9000), row_length=400)
        m = x[1000:9000].reshape(20, 400)
        np.testing.assert_array_equal(r["sum"], np.sum(m, axis=1))
        np.testing.assert_array_equal(r["argmax"], np.argmax(m, axis=1))
        self.assertEqual(r["max"].dtype, np.uint32)
        self.assertEqual(self.client.describe_dataset("ds-client").queries, 1)
        self.client.delete_dataset("ds-client")
        with self.assertRaises(tally.Error) as e:
            self.client.describe_dataset("ds-client")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("ds-client", e.exception.message)


    def test_2d_datasets_keep_their_rows(self):
        m = random_array(self.rng, np.float64, (40, 25))
        info = self.client.put_dataset("ds-2d", m, replace=True)
        try:
            self.assertEqual((info.length, info.row_length, info.shape), (1000, 25, (40, 25)))
            self.assertEqual(self.client.describe_dataset("ds-2d").shape, (40, 25))
            self.assertIn((40, 25), [d.shape for d in self.client.list_datasets() if d.name == "ds-2d"])
            # Per row by default, as numpy's axis=1, and as the array sent.
            ops = "sum,max,argmin,std,count"
            r = self.client.aggregate_dataset("ds-2d", ops)
            np.testing.assert_allclose(r["sum"], np.sum(m, axis=1), rtol=1e-12)
            np.testing.assert_array_equal(r["max"], np.max(m, axis=1))
            np.testing.assert_array_equal(r["argmin"], np.argmin(m, axis=1))
            np.testing.assert_allclose(r["std"], np.std(m, axis=1), rtol=1e-12)
            self.assertEqual(r["max"].shape, (40,))
            sent = self.client.aggregate(m, ops)
            for key in ops.split(","):
                np.testing.assert_array_equal(r[key], sent[key], err_msg=key)
            # Whole rows of a range; one answer when asked for with row_length=0.
            rows = self.client.aggregate_dataset("ds-2d", "max", range=(250, 500))
            np.testing.assert_array_equal(rows["max"], np.max(m[10:20], axis=1))
            whole = self.client.aggregate_dataset("ds-2d", "max,argmax", row_length=0)
            self.assertEqual((whole["max"], whole["argmax"]), (np.max(m), np.argmax(m)))
            states = self.client.partial_dataset("ds-2d", "max")
            np.testing.assert_array_equal(tally.finish(states[0]), np.max(m, axis=1))
            with self.assertRaises(tally.Error) as e:
                self.client.aggregate_dataset("ds-2d", "max", range=(10, 60))
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            with self.assertRaises(ValueError):
                self.client.put_dataset("ds-3d", np.zeros((2, 3, 4)))
        finally:
            self.client.delete_dataset("ds-2d")

    def test_list_datasets_follows_every_page(self):
        names = [f"page-{i:02d}" for i in range(12)]
        for name in names:
            self.client.put_dataset(name, np.arange(3, dtype=np.int32), replace=True)
        try:
            listed = [d.name for d in self.client.list_datasets(page_size=5)]
            self.assertEqual([n for n in listed if n.startswith("page-")], names)
            self.assertEqual(len(listed), len(set(listed)))
            self.assertEqual(listed, [d.name for d in self.client.list_datasets()])
            with self.assertRaises(tally.Error) as e:
                self.client.list_datasets(page_size=1001)
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("page_size", e.exception.message)
        finally:
            for name in names:
                self.client.delete_dataset(name)


class BadInput(Base):
    def test_unsupported_dtypes_raise_type_error_naming_them(self):
        for bad in (np.zeros(3, np.complex128), np.array([object(), 1], dtype=object),
                    np.zeros(3, "datetime64[s]"), np.zeros(3, np.float128), np.array(["a", "b"])):
            with self.assertRaises(TypeError) as e:
                self.client.aggregate(bad, "sum")
            self.assertIn(str(bad.dtype), str(e.exception))
            self.assertIn("float32, float64, int32, int64, uint32, uint8, int8, int16, uint16, uint64, bool, float16",
                          str(e.exception))

    def test_bad_op_strings_raise_value_error(self):
        x = np.arange(10, dtype=np.float64)
        for bad in ("nope", "sum:1", "var:-1", "var:nan", "hist:0:0:1", "hist:10:1:0", "hist:10:0", "sum,,max",
                    "std:1:2", "hist:x:0:1", ""):
            with self.assertRaises(ValueError, msg=bad):
                self.client.aggregate(x, bad)

    def test_server_errors_are_tally_errors_with_code_and_message(self):
        with self.assertRaises(tally.Error) as e:
            self.client.aggregate(np.zeros(0, np.float64), "min")
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("empty", e.exception.message)
        with self.assertRaises(ValueError):
            self.client.aggregate(np.zeros((2, 2, 2), np.float64), "sum")

    def test_deadlines_end_calls(self):
        x = np.zeros(8 << 20, np.float64)  # 64 MiB, streamed
        with self.assertRaises(tally.Error) as e:
            self.client.aggregate(x, "sum", timeout=0.001)
        self.assertEqual(e.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)


class SharedMemory(Base):
    def test_a_shared_array_gives_the_sent_arrays_answers(self):
        rng = np.random.default_rng(SEED)
        for dtype in (np.float32, np.int64, np.uint8):
            x = random_array(rng, dtype, (300, 70))
            with self.subTest(dtype=dtype.__name__), self.client.share(x) as shared:
                self.assertEqual(shared.info.place, "host" if BACKEND == "cpu" else "pinned host")
                got, want = shared.aggregate(ALL_OPS), self.client.aggregate(x, ALL_OPS)
                for op in ALL_OPS[:-1]:
                    np.testing.assert_array_equal(got[op], want[op], err_msg=op)
                np.testing.assert_array_equal(got[ALL_OPS[-1]].counts, want[ALL_OPS[-1]].counts)
                self.assertIn(shared.region, [r.name for r in self.client.list_regions()])
            self.assertNotIn(shared.region, [r.name for r in self.client.list_regions()])
            self.assertFalse(os.path.exists("/dev/shm/" + shared.region))

    def test_regions_by_hand_datasets_from_them_and_refusals(self):
        from multiprocessing import shared_memory
        x = np.arange(1000, dtype=np.float64)
        m = shared_memory.SharedMemory(create=True, size=x.nbytes + 64)
        try:
            np.frombuffer(m.buf, dtype=np.float64, count=1000, offset=64)[:] = x
            info = self.client.register_host_region("by-hand", "/" + m.name, x.nbytes, offset=64)
            self.assertEqual((info.kind, info.byte_size, info.offset), ("host", x.nbytes, 64))
            r = self.client.aggregate_region("by-hand", "sum,argmax", dtype=np.float64, length=500, offset=8 * 500)
            self.assertEqual((r["sum"], r["argmax"]), (float(np.sum(x[500:])), 499))
            self.client.put_dataset_from_region("from-region", "by-hand", dtype=np.float64, length=1000, replace=True)
            self.assertEqual(self.client.aggregate_dataset("from-region", "max")["max"], 999.0)
            with self.assertRaises(tally.Error) as e:
                self.client.aggregate_region("by-hand", "sum", dtype=np.float64, length=1001)
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            with self.assertRaises(tally.Error) as e:
                self.client.register_host_region("by-hand", "/" + m.name, 8)
            self.assertEqual(e.exception.code, grpc.StatusCode.ALREADY_EXISTS)
            self.client.unregister_region("by-hand")
            with self.assertRaises(tally.Error) as e:
                self.client.aggregate_region("by-hand", "sum", dtype=np.float64, length=1)
            self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
            self.client.delete_dataset("from-region")
        finally:
            m.close()
            m.unlink()


class Credentials(Base):
    def test_tls_arguments_build_ssl_credentials(self):
        self.assertIsNone(self.client.credentials)
        c = tally.Client("127.0.0.1:1", tls=True)
        self.assertIsInstance(c.credentials, grpc.ChannelCredentials)
        c.close()
        c = tally.Client("127.0.0.1:1", ca=b"-----BEGIN CERTIFICATE-----\n", cert=b"chain", key=b"key")
        self.assertIsInstance(c.credentials, grpc.ChannelCredentials)
        c.close()
        with self.assertRaisesRegex(ValueError, "cert and key"):
            tally.Client("127.0.0.1:1", cert=b"chain")

    def test_token_goes_out_as_metadata_on_the_plaintext_path(self):
        c = tally.Client(self.target, token="s3cret", timeout=30)
        self.assertEqual(c.metadata, (("authorization", "Bearer s3cret"),))
        self.assertEqual(c.aggregate(np.arange(10, dtype=np.int64), "sum")["sum"], 45)
        c.close()


if __name__ == "__main__":
    SERVER_BINARY = sys.argv[1]
    for arg in sys.argv[2:]:
        if arg.startswith("--backend="):
            BACKEND = arg.split("=", 1)[1]
    print(f"numpy {np.__version__}, backend {BACKEND}, seed {SEED} (set TALLY_TEST_SEED to repeat)")
    unittest.main(argv=[sys.argv[0], "-v"])
