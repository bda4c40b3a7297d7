"""tally's quantile, median, topk/bottomk, distinct-count and sketch
functions (tally.proto, OP_QUANTILE ... OP_COUNT_DISTINCT) through the
Python package against numpy itself: every quantile method over float64,
float32 and int32, whole arrays, rows (axis=1 and other axes) and segments,
NaN and all-NaN rows, masks, ties and signed zeros for topk, k beyond a
row, empty rows; the ops' spelling, the errors that name a field, partial
states merged by the package's native module, pandas' median, quantile and
nunique, and tally.dask.aggregate of these functions.

usage: quantile_functions_test.py TALLY_SERVER_BINARY [--backend=cpu]
(the package, built with its stubs, on PYTHONPATH)
"""
import importlib.util
import os
import unittest
import warnings

import numpy as np

import tally
from tally import _ops
from tally.v1 import tally_pb2
from tally_test_server import ClientTestCase, client_test_main

SERVER_BINARY = None
BACKEND = "cpu"
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
DTYPES = [np.float64, np.float32, np.int32]
METHODS = _ops.QUANTILE_METHODS
HAVE_NATIVE = importlib.util.find_spec("tally._states") is not None
HAVE_PANDAS = importlib.util.find_spec("pandas") is not None
HAVE_DASK = importlib.util.find_spec("dask") is not None


def random_array(rng, dtype, shape, nans=0.0):
    """Values with ties (a few repeat), both signs and signed zeros for the
    float dtypes, NaN at a rate of ``nans``."""
    if np.dtype(dtype).kind == "f":
        x = rng.normal(0, 100, shape)
        ties = rng.random(shape) < 0.2
        x[ties] = np.round(x[ties] / 50)  # a handful of repeated small integers
        x[rng.random(shape) < 0.03] = 0.0
        x[rng.random(shape) < 0.03] = -0.0
        x = x.astype(dtype)
        if nans:
            x[rng.random(shape) < nans] = np.nan
        return x
    return rng.integers(-40, 40, size=shape).astype(dtype)


def random_q(rng, scalar):
    """A scalar q or a list of them, with the ends 0 and 1 now and then."""
    pool = np.concatenate([rng.random(6), [0.0, 1.0, 0.5, 0.25]])
    if scalar:
        return float(rng.choice(pool))
    return list(rng.choice(pool, size=int(rng.integers(1, 6))))


def random_offsets(rng, n, segments, empty=True):
    """Segment offsets over n elements, some segments empty when ``empty``."""
    cuts = np.sort(rng.integers(0, n + 1, segments - 1))
    offsets = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    if not empty:
        offsets = np.unique(offsets)
    return offsets


def bits(a, signed_zeros=False):
    """An array's values as bits, for bitwise comparisons: every NaN one,
    and -0.0 as 0.0 unless ``signed_zeros`` (which of two equal zeros a
    selection picks is numpy's partition's choice, not a rule)."""
    a = np.asarray(a, dtype=np.float64)
    if not signed_zeros:
        a = np.where(a == 0, 0.0, a)
    return np.where(np.isnan(a), np.uint64(0x7FF8000000000000), a.view(np.uint64))


def topk_reference(x, k, largest):
    """torch.topk's answer in numpy.sort's order: NaN above every number,
    -0.0 equal to 0.0, ties to the smaller index."""
    x = np.asarray(x)
    nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
    v = np.where(nan, 0, x).astype(np.float64)
    index = np.arange(x.size)
    # lexsort: the last key is the primary one.
    order = np.lexsort((index, -v, ~nan)) if largest else np.lexsort((index, v, nan))
    top = order[:k]
    return x[top], top.astype(np.int64)


class Base(ClientTestCase):
    def setUp(self):
        super().setUp()
        # numpy warns of all-NaN and empty slices; tally does not.
        warnings.simplefilter("ignore", RuntimeWarning)

    def assertQuantiles(self, got, want, in_dtype, method, msg):
        """numpy's type, shape and dtype; bitwise numpy's values for float64
        input and the methods that pick an element, within float64
        rounding for the others (tally.proto, OP_QUANTILE)."""
        self.assertIs(type(got), type(want), msg)
        self.assertEqual(np.shape(got), np.shape(want), msg)
        self.assertEqual(np.asarray(got).dtype, np.asarray(want).dtype, msg)
        g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=msg)
        if np.dtype(in_dtype) == np.float64 or method in _ops.PICKING_METHODS:
            np.testing.assert_array_equal(bits(g), bits(w), err_msg=msg)
        else:
            scale = np.max(np.abs(w[~np.isnan(w)]), initial=1.0)
            np.testing.assert_allclose(g, w, rtol=4e-16, atol=4e-16 * scale, equal_nan=True, err_msg=msg)


class Quantiles(Base):
    """numpy.quantile, nanquantile, percentile, median and nanmedian over
    every layout."""

    def sweep(self, name, nans, layouts):
        checked = 0
        for dtype in DTYPES:
            if nans and np.dtype(dtype).kind != "f":
                continue
            for method in METHODS:
                for shape, axis in layouts:
                    x = random_array(self.rng, dtype, shape, nans)
                    if nans and x.ndim == 2:
                        x[self.rng.integers(0, x.shape[0])] = np.nan  # an all-NaN row
                    for scalar in (True, False):
                        q = random_q(self.rng, scalar)
                        for keepdims in (False, True):
                            msg = f"{name}({x.dtype}{x.shape}, q={q}, axis={axis}, method={method}, " \
                                  f"keepdims={keepdims})"
                            want = getattr(np, name)(x, q, axis=axis, method=method, keepdims=keepdims)
                            got = getattr(self.client, name)(x, q, axis=axis, method=method, keepdims=keepdims)
                            self.assertQuantiles(got, want, dtype, method, msg)
                            checked += 1
        return checked

    LAYOUTS = [((1,), None), ((int(np.random.default_rng(SEED).integers(2, 300)),), None), ((7, 31), 1),
               ((7, 31), -1), ((9, 6), 0), ((3, 4, 5), (0, 2)), ((3, 4, 5), None)]

    def test_quantile_every_method_dtype_and_layout(self):
        self.assertGreater(self.sweep("quantile", 0.0, self.LAYOUTS), 1000)

    def test_nan_propagates_through_quantile(self):
        self.assertGreater(self.sweep("quantile", 0.1, [((40,), None), ((6, 17), 1)]), 200)

    def test_nanquantile_skips_nan_and_answers_nan_for_all_nan_rows(self):
        self.assertGreater(self.sweep("nanquantile", 0.3, [((40,), None), ((6, 17), 1), ((5, 8), 0)]), 300)
        self.assertGreater(self.sweep("nanquantile", 0.0, [((25,), None), ((4, 9), 1)]), 300)

    def test_percentile_and_nanpercentile(self):
        x = random_array(self.rng, np.float64, (8, 33), nans=0.2)
        for name in ("percentile", "nanpercentile"):
            for q in (50, [0, 12.5, 99.9, 100], 37.2):
                for method in ("linear", "nearest", "weibull"):
                    for axis in (None, 1, 0):
                        want = getattr(np, name)(x, q, axis=axis, method=method)
                        got = getattr(self.client, name)(x, q, axis=axis, method=method)
                        self.assertQuantiles(got, want, x.dtype, method, f"{name}({q}, axis={axis}, {method})")
        with self.assertRaisesRegex(ValueError, r"\[0, 100\]"):
            self.client.percentile(x, 101)

    def test_q_of_any_shape_and_more_than_one_aggregation_holds(self):
        x = random_array(self.rng, np.float64, (5, 40))
        q = self.rng.random((2, 3))
        self.assertQuantiles(self.client.quantile(x, q, axis=1), np.quantile(x, q, axis=1), x.dtype, "linear",
                             "q of shape (2, 3)")
        many = self.rng.random(2500)  # three aggregations of at most 1024 q each, one call
        self.assertQuantiles(self.client.quantile(x, many, axis=1, method="hazen"),
                             np.quantile(x, many, axis=1, method="hazen"), x.dtype, "hazen", "2500 q")
        self.assertEqual(self.client.quantile(x, []).shape, np.quantile(x, []).shape)

    def test_median_and_nanmedian(self):
        checked = 0
        for dtype in DTYPES + [np.uint8, np.int64, np.bool_]:
            for shape, axis in [((1,), None), ((2,), None), ((51,), None), ((52,), None), ((6, 9), 1), ((6, 10), 1),
                                ((6, 9), 0), ((3, 4, 5), (1, 2)), ((3, 4, 5), None)]:
                if dtype == np.bool_:
                    x = self.rng.random(shape) < 0.5
                elif dtype in (np.uint8,):
                    x = self.rng.integers(0, 255, shape).astype(dtype)
                else:
                    x = random_array(self.rng, dtype, shape, 0.15 if np.dtype(dtype).kind == "f" else 0.0)
                for name in ("median", "nanmedian"):
                    for keepdims in (False, True):
                        msg = f"{name}({x.dtype}{x.shape}, axis={axis}, keepdims={keepdims})"
                        want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
                        got = getattr(self.client, name)(x, axis=axis, keepdims=keepdims)
                        # numpy.mean's arithmetic for the middle two: bitwise.
                        self.assertQuantiles(got, want, np.float64, "linear", msg)
                        checked += 1
        self.assertEqual(checked, 6 * 9 * 2 * 2)

    def test_all_nan_rows_of_median(self):
        x = random_array(self.rng, np.float32, (4, 7))
        x[2] = np.nan
        x[0, 3] = np.nan
        for name in ("median", "nanmedian"):
            self.assertQuantiles(getattr(self.client, name)(x, axis=1), getattr(np, name)(x, axis=1), x.dtype,
                                 "linear", name)

    def test_empty_input_answers_as_numpy(self):
        for shape, axis in (((0,), None), ((3, 0), 1), ((0, 4), 0), ((0, 4), 1)):
            x = np.empty(shape, np.float64)
            for name in ("median", "nanmedian"):
                want = getattr(np, name)(x, axis=axis)
                self.assertQuantiles(getattr(self.client, name)(x, axis=axis), want, x.dtype, "linear",
                                     f"{name}{shape} axis={axis}")
            for name in ("quantile", "nanquantile"):
                try:
                    want = getattr(np, name)(x, [0.5, 0.1], axis=axis)
                except IndexError:
                    with self.assertRaises(IndexError):
                        getattr(self.client, name)(x, [0.5, 0.1], axis=axis)
                    continue
                self.assertQuantiles(getattr(self.client, name)(x, [0.5, 0.1], axis=axis), want, x.dtype,
                                     "linear", f"{name}{shape} axis={axis}")
        self.assertTrue(np.isnan(self.client.nanquantile(np.empty(0, np.int32), 0.5)))

    def test_int32_differences_wrap_as_numpys(self):
        # numpy subtracts the neighbours in the dtype: int32 extremes wrap.
        x = np.array([-2**31, 2**31 - 1, 5, -7], np.int32)
        for method in METHODS:
            for q in (0.4, 0.6, 0.9):
                self.assertQuantiles(self.client.quantile(x, q, method=method), np.quantile(x, q, method=method),
                                     x.dtype, method, f"int32 extremes, q={q}, {method}")

    def test_bool_picks_elements_and_refuses_interpolation(self):
        x = self.rng.random(31) < 0.4
        for method in _ops.PICKING_METHODS:
            self.assertQuantiles(self.client.quantile(x, [0.2, 0.7], method=method),
                                 np.quantile(x, [0.2, 0.7], method=method), x.dtype, method, method)
        with self.assertRaises(TypeError):
            self.client.quantile(x, 0.5)


class AggregateAndSegments(Base):
    """The fused call: per-q shapes, scalar q, segments with empty ones,
    masks, and the other functions beside them."""

    def test_every_method_over_segments(self):
        checked = 0
        for dtype in DTYPES:
            x = random_array(self.rng, dtype, 400)
            offsets = random_offsets(self.rng, x.size, 12, empty=False)
            for method in METHODS:
                q = random_q(self.rng, False)
                op = tally.Op("quantile", q=q, method=method)
                got = self.client.aggregate(x, [op], offsets=offsets)[0]
                self.assertEqual(got.shape, (len(offsets) - 1, len(q)))
                for s in range(len(offsets) - 1):
                    part = x[offsets[s]:offsets[s + 1]]
                    self.assertQuantiles(got[s], np.quantile(part, q, method=method), dtype, method,
                                         f"{op} segment {s} of {dtype.__name__}")
                    checked += 1
        self.assertGreater(checked, 300)

    def test_scalar_q_answers_a_scalar_and_rows_an_array(self):
        x = random_array(self.rng, np.float64, (5, 30))
        r = self.client.aggregate(x[0], ["quantile:0.3", "quantile:0.3,0.8:lower", tally.Op("quantile", q=[0.3])])
        self.assertIsInstance(r["quantile:0.3"], np.float64)
        self.assertEqual(r["quantile:0.3,0.8:lower"].shape, (2,))
        self.assertEqual(r[2].shape, (1,))
        rows = self.client.aggregate(x, ["q:0.3", "quantile:0.3,0.8:lower", "median", "ddsketch:0.01"])
        self.assertEqual(rows[0].shape, (5,))
        self.assertEqual(rows[1].shape, (5, 2))
        self.assertQuantiles(rows[1], np.quantile(x, [0.3, 0.8], axis=1, method="lower").T, x.dtype, "lower",
                             "rows")
        self.assertQuantiles(rows["median"], np.median(x, axis=1), x.dtype, "linear", "median rows")
        self.assertEqual(rows[3].shape, (5,))

    def test_empty_segments(self):
        x = random_array(self.rng, np.float64, 60, nans=0.1)
        offsets = np.array([0, 10, 10, 30, 30, 60])
        r = self.client.aggregate(x, ["nanquantile:0.5,0.9", "median", "nanmedian", "topk:3", "count_distinct",
                                      "hll:8", "ddsketch:0.02"], offsets=offsets)
        for s in range(5):
            part = x[offsets[s]:offsets[s + 1]]
            # numpy answers an empty array's nanquantile with one NaN (np.nanmean's); tally one per q.
            want = np.nanquantile(part, [0.5, 0.9]) if part.size else np.full(2, np.nan)
            self.assertQuantiles(r[0][s], want, x.dtype, "linear", f"segment {s}")
            self.assertQuantiles(r["median"][s], np.median(part), x.dtype, "linear", f"median {s}")
            self.assertQuantiles(r["nanmedian"][s], np.nanmedian(part), x.dtype, "linear", f"nanmedian {s}")
            self.assertEqual(len(r["topk:3"][s][0]), min(3, part.size))
            self.assertEqual(r["count_distinct"][s], len(np.unique(part)))
            self.assertEqual(r["hll:8"][s], len(np.unique(part)))
        self.assertTrue(np.isnan(r["ddsketch:0.02"][1]))
        with self.assertRaises(tally.Error) as e:
            self.client.aggregate(x, ["quantile:0.5"], offsets=offsets)
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        self.assertIn("1", e.exception.message)  # the first empty segment

    def test_masks(self):
        checked = 0
        for dtype in DTYPES:
            x = random_array(self.rng, dtype, (6, 25), nans=0.1 if np.dtype(dtype).kind == "f" else 0.0)
            valid = self.rng.random(x.shape) < 0.7
            floats = np.dtype(dtype).kind == "f"
            valid[4] = not floats  # a row with no valid element (integers' nanquantile is quantile: refused)
            valid[5] = True
            ops = ["nanquantile:0.2,0.5,0.95:nearest", "median", "nanmedian", "topk:4", "bottomk:30",
                   "count_distinct", "hll:10"]
            r = self.client.aggregate(x, ops, valid=valid)
            for row in range(x.shape[0]):
                part = x[row][valid[row]]
                msg = f"{dtype.__name__} row {row} of a masked batch"
                want = np.nanquantile(part, [0.2, 0.5, 0.95], method="nearest") if part.size else \
                    np.full(3, np.nan, dtype)
                self.assertQuantiles(r[0][row], want, dtype, "nearest", msg)
                self.assertQuantiles(r["median"][row], np.median(part).astype(r["median"].dtype), dtype, "lower",
                                     msg)
                self.assertQuantiles(r["nanmedian"][row], np.nanmedian(part).astype(r["median"].dtype), dtype,
                                     "lower", msg)
                for name, k, largest in (("topk:4", 4, True), ("bottomk:30", 30, False)):
                    values, index = r[name][row]
                    want_v, want_i = topk_reference(x[row], x.shape[1], largest)
                    keep = valid[row][want_i]
                    want_v, want_i = want_v[keep][:k], want_i[keep][:k]
                    np.testing.assert_array_equal(index, want_i, err_msg=f"{name} {msg}")
                    np.testing.assert_array_equal(bits(values), bits(want_v), err_msg=f"{name} {msg}")
                self.assertEqual(r["count_distinct"][row], len(np.unique(part)), msg)
                self.assertEqual(r["hll:10"][row], len(np.unique(part)), msg)
                checked += 1
            # A masked array brings its own mask.
            m = np.ma.masked_array(x[5], ~valid[3])
            self.assertQuantiles(self.client.aggregate(m, "median")[0],
                                 np.median(x[5][valid[3]]).astype(r["median"].dtype), dtype, "lower", "numpy.ma")
        self.assertEqual(checked, 18)

    def test_quantile_of_a_row_with_no_valid_element_is_refused(self):
        for dtype, op in ((np.float64, "quantile:0.5"), (np.int32, "quantile:0.5")):
            x = random_array(self.rng, dtype, (3, 5))
            valid = np.ones(x.shape, bool)
            valid[1] = False
            with self.assertRaises(tally.Error, msg=f"{op} {dtype.__name__}") as e:
                self.client.aggregate(x, op, valid=valid)
            self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        # nanquantile's answer for such a row is NaN, on integers too, as
        # numpy's nanquantile of an empty int slice is.
        x = random_array(self.rng, np.int32, (3, 5))
        valid = np.ones(x.shape, bool)
        valid[1] = False
        got = self.client.aggregate(x, "nanquantile:0.5", valid=valid)[0]
        self.assertTrue(np.isnan(got[1]), got)
        self.assertEqual(got[0], np.nanquantile(x[0], 0.5))
        self.assertTrue(np.isnan(np.nanquantile(np.array([], np.int32), 0.5)))

    def test_big_arrays_stream(self):
        x = random_array(self.rng, np.float64, 700_000, nans=0.01)  # 5.6 MB: AggregateStream
        r = self.client.aggregate(x, ["nanquantile:0.01,0.5,0.99", "nanmedian", "topk:5", "count_distinct"])
        self.assertQuantiles(r[0], np.nanquantile(x, [0.01, 0.5, 0.99]), x.dtype, "linear", "streamed")
        self.assertQuantiles(r[1], np.nanmedian(x), x.dtype, "linear", "streamed")
        np.testing.assert_array_equal(r[2][1], topk_reference(x, 5, True)[1])
        self.assertEqual(r[3], len(np.unique(x)))


class TopK(Base):
    def check(self, x, k, axis, largest):
        msg = f"topk({x.dtype}{x.shape}, k={k}, axis={axis}, largest={largest})"
        values, index = self.client.topk(x, k, axis=axis, largest=largest)
        a = x.reshape(-1) if axis is None else x
        ax = 0 if axis is None else axis
        moved = np.moveaxis(a, ax, -1)
        m = min(k, moved.shape[-1])
        self.assertEqual(values.dtype, x.dtype, msg)
        self.assertEqual(index.dtype, np.int64, msg)
        self.assertEqual(np.moveaxis(values, ax, -1).shape, moved.shape[:-1] + (m,), msg)
        got_v, got_i = np.moveaxis(values, ax, -1), np.moveaxis(index, ax, -1)
        for row in np.ndindex(moved.shape[:-1]):
            want_v, want_i = topk_reference(moved[row], k, largest)
            np.testing.assert_array_equal(got_i[row], want_i, err_msg=f"{msg} row {row}")
            # The elements themselves, -0.0 kept apart from 0.0.
            np.testing.assert_array_equal(bits(got_v[row], True), bits(want_v, True), err_msg=f"{msg} row {row}")
        return 1

    def test_every_dtype_and_axis(self):
        checked = 0
        for dtype in DTYPES + [np.int64, np.uint16]:
            for shape, axis in [((50,), -1), ((50,), None), ((6, 20), 1), ((6, 20), 0), ((3, 4, 5), 1),
                                ((3, 4, 5), None)]:
                x = random_array(self.rng, dtype, shape, 0.1) if np.dtype(dtype).kind == "f" else \
                    self.rng.integers(0, 9, shape).astype(dtype)  # ties
                for k in (1, 3, 20, 1000):  # and beyond the row
                    for largest in (True, False):
                        checked += self.check(x, k, axis, largest)
        self.assertEqual(checked, 5 * 6 * 4 * 2)

    def test_ties_signed_zeros_nan_and_infinities(self):
        x = np.array([0.0, -0.0, 1.0, np.nan, -np.inf, 1.0, np.inf, -0.0, np.nan, 0.0, -1.0])
        for dtype in (np.float64, np.float32):
            for k in (1, 2, 4, 11, 12):
                for largest in (True, False):
                    self.check(x.astype(dtype), k, -1, largest)
        values, index = self.client.topk(x, 3)
        np.testing.assert_array_equal(index, [3, 8, 6])  # NaN first, in index order, then +inf
        values, index = self.client.bottomk(x, 4)
        np.testing.assert_array_equal(index, [4, 10, 0, 1])  # -inf, -1, then the zeros in index order

    def test_aggregate_answers_pairs(self):
        x = random_array(self.rng, np.float32, (4, 9))
        r = self.client.aggregate(x[0], ["topk:3", "bottomk:20"])
        values, index = r["topk:3"]
        np.testing.assert_array_equal(index, topk_reference(x[0], 3, True)[1])
        self.assertEqual(values.dtype, np.float32)
        self.assertEqual(len(r["bottomk:20"][0]), 9)
        rows = self.client.aggregate(x, "topk:2")[0]
        self.assertIsInstance(rows, list)
        self.assertEqual(len(rows), 4)
        for row, (v, i) in enumerate(rows):
            np.testing.assert_array_equal(i, topk_reference(x[row], 2, True)[1])

    def test_empty_rows(self):
        values, index = self.client.topk(np.empty((3, 0)), 5, axis=1)
        self.assertEqual(values.shape, (3, 0))
        r = self.client.aggregate(np.arange(5.0), "bottomk:2", offsets=[0, 0, 5, 5])[0]
        self.assertEqual([len(v) for v, _ in r], [0, 2, 0])
        np.testing.assert_array_equal(r[1][1], [0, 1])


class DistinctAndSketches(Base):
    def test_count_distinct_is_numpys_unique(self):
        checked = 0
        for dtype in DTYPES + [np.uint8, np.int64, np.float16, np.bool_]:
            for shape, axis in [((300,), None), ((5, 60), 1), ((5, 60), 0), ((3, 4, 5), (0, 2))]:
                if dtype == np.bool_:
                    x = self.rng.random(shape) < 0.5
                else:
                    x = random_array(self.rng, dtype, shape, 0.1) if np.dtype(dtype).kind == "f" else \
                        self.rng.integers(0, 100, shape).astype(dtype)
                want = np.apply_along_axis(lambda v: len(np.unique(v)), -1,
                                           np.moveaxis(x, axis if isinstance(axis, int) else 0, -1)) \
                    if isinstance(axis, int) else None
                got = self.client.count_distinct(x, axis=axis)
                if axis is None:
                    self.assertIs(type(got), int)
                    self.assertEqual(got, len(np.unique(x)), f"{x.dtype}")
                elif isinstance(axis, int):
                    np.testing.assert_array_equal(got, want)
                else:
                    moved = np.moveaxis(x, (0, 2), (1, 2)).reshape(x.shape[1], -1)
                    np.testing.assert_array_equal(got, [len(np.unique(r)) for r in moved])
                got_hll = self.client.approx_count_distinct(x, axis=axis, precision=14)
                np.testing.assert_array_equal(got_hll, got)  # exact below 2^14 / 4 distinct values
                checked += 1
        self.assertGreaterEqual(checked, 28)

    def test_mode_is_pandas_first_mode(self):
        def reference(v):
            v = v[~np.isnan(v)] if v.dtype.kind == "f" else v
            values, counts = np.unique(v, return_counts=True)  # sorted; -0.0 and 0.0 one value
            want = values[np.argmax(counts)]  # the first of equal counts: the smallest
            if HAVE_PANDAS:
                import pandas as pd
                self.assertEqual(want, pd.Series(v).mode(dropna=True).iloc[0])
            return want

        checked = 0
        for dtype in DTYPES + [np.uint8, np.int64, np.float16]:
            for shape in ((400,), (5, 90)):
                x = self.rng.integers(-6, 7, shape).astype(dtype) if np.dtype(dtype).kind != "u" else \
                    self.rng.integers(0, 9, shape).astype(dtype)
                if np.dtype(dtype).kind == "f":
                    x[self.rng.random(shape) < 0.3] = np.nan  # NaN the most frequent: left out still
                    x[self.rng.random(shape) < 0.05] = -0.0
                got = self.client.aggregate(x, "mode")[0]
                want = [reference(r) for r in x] if x.ndim == 2 else reference(x)
                np.testing.assert_array_equal(got, want, err_msg=f"{x.dtype}{x.shape}")
                checked += 1
        self.assertEqual(checked, 12)
        # numpy-style, over axes.
        x = np.array([[1, 2, 2, 7], [3, 3, 1, 1], [5, 4, 4, 5]], dtype=np.int16)
        np.testing.assert_array_equal(self.client.mode(x, axis=1), [2, 1, 4])
        np.testing.assert_array_equal(self.client.mode(x, axis=0), [1, 2, 1, 1])
        self.assertEqual(self.client.mode(x), 1)
        self.assertEqual(self.client.mode(x, axis=1).dtype, np.int16)
        nan = self.client.aggregate(np.array([np.nan, np.nan]), "mode")[0]
        self.assertTrue(np.isnan(nan))
        with self.assertRaises(tally.Error) as e:
            self.client.aggregate(np.empty(0), "mode")
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")

    def test_nan_counts_once_and_signed_zeros_are_one(self):
        x = np.array([np.nan, 0.0, -0.0, np.nan, 1.5, np.float64("-nan")])
        self.assertEqual(self.client.count_distinct(x), len(np.unique(x)))
        self.assertEqual(self.client.count_distinct(x), 3)
        self.assertEqual(self.client.approx_count_distinct(x, precision=4), 3)

    def test_hll_exact_below_a_quarter_of_its_registers_then_close(self):
        for p in (4, 8, 12):
            d = (1 << p) // 4
            x = self.rng.permutation(np.repeat(self.rng.choice(10**9, d, replace=False), 3)).astype(np.int64)
            self.assertEqual(self.client.approx_count_distinct(x, precision=p), len(np.unique(x)), f"p={p}")
        x = self.rng.integers(0, 2**62, 60_000)
        n = len(np.unique(x))
        est = self.client.approx_count_distinct(x, precision=12)
        # 1.04 / sqrt(4096) = 1.6%: five standard errors.
        self.assertLess(abs(est - n) / n, 5 * 1.04 / 64, f"hll:12 {est} of {n}")

    def test_ddsketch_within_its_relative_accuracy_of_method_lower(self):
        checked = 0
        for dtype in DTYPES:
            for alpha in (0.001, 0.01, 0.05, 0.5):
                x = random_array(self.rng, dtype, (5, 200), 0.1 if np.dtype(dtype).kind == "f" else 0.0)
                if np.dtype(dtype).kind == "f":
                    x[2] = np.nan
                    x[3, :50] = np.inf
                q = [0.0, 0.01, 0.3, 0.5, 0.77, 0.99, 1.0]
                got = self.client.ddsketch_quantile(x, q, axis=1, relative_accuracy=alpha)
                self.assertEqual(got.shape, (7, 5))
                self.assertEqual(got.dtype, np.float64)
                for row in range(x.shape[0]):
                    finite = x[row][~np.isnan(x[row])] if np.dtype(dtype).kind == "f" else x[row]
                    if finite.size == 0:
                        self.assertTrue(np.all(np.isnan(got[:, row])))
                        continue
                    want = np.quantile(finite.astype(np.float64), q, method="lower")
                    for g, w in zip(got[:, row], want):
                        if np.isinf(w):
                            self.assertEqual(g, w)
                        else:
                            self.assertLessEqual(abs(g - w), alpha * abs(w) * (1 + 1e-12) + 1e-300,
                                                 f"ddsketch {alpha} {dtype.__name__} row {row}: {g} vs {w}")
                    checked += 1
        self.assertGreater(checked, 40)
        self.assertIsInstance(self.client.ddsketch_quantile(np.arange(1.0, 100.0)), np.float64)  # the median


class Spelling(Base):
    def test_ops_parse_print_and_round_trip(self):
        parsed = tally.parse_ops("quantile:0.1,0.9,max")
        self.assertEqual([op.kind for op in parsed], ["quantile", "max"])
        self.assertEqual(parsed[0].q, (0.1, 0.9))
        spelled = _ops.spelled_ops("quantile:0.5,0.99:hazen,median,ddsketch:0.01:0.5,0.9,topk:3")
        self.assertEqual([s for s, _ in spelled], ["quantile:0.5,0.99:hazen", "median", "ddsketch:0.01:0.5,0.9",
                                                   "topk:3"])
        for text in ("quantile:0.5", "nanquantile:0,1:median_unbiased", "q:0.25,0.75", "median", "nanmedian",
                     "topk:7", "bottomk:65536", "hll:4", "approx_count_distinct:18", "ddsketch:0.5",
                     "ddsketch:0.001:0.1,0.2", "count_distinct", "nunique"):
            op = tally.Op.parse(text)
            self.assertEqual(tally.Op.parse(str(op)), op, text)
        self.assertEqual(tally.Op.parse("nunique"), tally.Op("count_distinct"))
        self.assertEqual(tally.Op.parse("approx_count_distinct:9"), tally.Op("hll", precision=9))
        self.assertEqual(str(tally.Op("quantile", q=[0.5, 0.25], method="NEAREST")), "quantile:0.5,0.25:nearest")

    def test_bad_parameters_name_their_field(self):
        cases = [("quantile:1.5", "q[0]"), ("quantile:0.5,-0.1", "q[1]"), ("quantile", "Q"),
                 ("quantile:0.5:cubic", "method"), ("topk:0", "k"), ("bottomk:65537", "k"), ("topk:x", "K"),
                 ("hll:3", "precision"), ("hll:19", "precision"), ("ddsketch:0.0009", "relative_accuracy"),
                 ("ddsketch:0.6:0.5", "relative_accuracy"), ("ddsketch:0.1:2", "q[0]"), ("median:0.5", "takes no")]
        for text, field in cases:
            with self.assertRaises(ValueError, msg=text) as e:
                tally.Op.parse(text)
            self.assertIn(field, str(e.exception), text)
        for kwargs, field in ((dict(kind="quantile", q=[0.5] * 1025), "1024"), (dict(kind="quantile", q=[]), "q"),
                              (dict(kind="sum", q=0.5), "q"), (dict(kind="topk", k=2.5), "k"),
                              (dict(kind="hll"), "precision"), (dict(kind="ddsketch"), "relative_accuracy"),
                              (dict(kind="median", k=3), "k")):
            with self.assertRaises(ValueError, msg=str(kwargs)) as e:
                tally.Op(**kwargs)
            self.assertIn(field, str(e.exception), str(kwargs))
        x = np.arange(10.0)
        with self.assertRaisesRegex(ValueError, r"\[0, 1\]"):
            self.client.quantile(x, [0.5, 1.01])
        with self.assertRaisesRegex(ValueError, "method"):
            self.client.quantile(x, 0.5, method="cubic")
        with self.assertRaisesRegex(ValueError, "k must"):
            self.client.topk(x, 0)
        with self.assertRaisesRegex(ValueError, "precision"):
            self.client.approx_count_distinct(x, precision=20)
        with self.assertRaisesRegex(ValueError, "relative_accuracy"):
            self.client.ddsketch_quantile(x, 0.5, relative_accuracy=0.9)

    def test_the_server_names_the_field_of_a_bad_aggregation(self):
        data = np.arange(16, dtype=np.float64)
        spec = tally_pb2.ArraySpec(dtype=tally_pb2.DTYPE_FLOAT64, length=data.size)
        cases = [(dict(op=tally_pb2.OP_QUANTILE, q=[1.5]), "q"),
                 (dict(op=tally_pb2.OP_QUANTILE), "q"),
                 (dict(op=tally_pb2.OP_QUANTILE, q=[0.5], method=40), "method"),
                 (dict(op=tally_pb2.OP_TOPK, k=0), "k"), (dict(op=tally_pb2.OP_BOTTOMK, k=70000), "k"),
                 (dict(op=tally_pb2.OP_HLL, precision=3), "precision"),
                 (dict(op=tally_pb2.OP_DDSKETCH, relative_accuracy=0.7), "relative_accuracy"),
                 (dict(op=tally_pb2.OP_DDSKETCH, relative_accuracy=0.01, q=[0.5] * 1025), "q")]
        for fields, name in cases:
            request = tally_pb2.AggregateRequest(spec=spec, data=data.tobytes(),
                                                 aggregations=[tally_pb2.Aggregation(**fields)])
            with self.assertRaises(tally.Error, msg=str(fields)) as e:
                self.client._call(self.client._stub.Aggregate, request, None)
            self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT", str(fields))
            self.assertIn(name, e.exception.message, str(fields))

    def test_the_server_refuses_bool_quantiles_and_empty_ones(self):
        with self.assertRaises(tally.Error) as e:
            self.client.aggregate(np.array([True, False]), "quantile:0.5")
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        with self.assertRaises(tally.Error) as e:
            self.client.aggregate(np.empty(0), "quantile:0.5")
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")


@unittest.skipUnless(HAVE_NATIVE, "tally._states was not built (pybind11 missing)")
class PartialStates(Base):
    OPS = ["quantile:0.1,0.5,0.9", "nanquantile:0.3:nearest", "median", "nanmedian", "topk:5", "bottomk:4",
           "hll:6", "hll:14", "ddsketch:0.02:0.25,0.75", "count_distinct", "mode"]

    def test_merged_parts_answer_as_the_whole(self):
        checked = 0
        for dtype in DTYPES:
            for rows in (False, True):
                shape = (4, 120) if rows else (500,)
                x = random_array(self.rng, dtype, shape, 0.05 if np.dtype(dtype).kind == "f" else 0.0)
                n = x.shape[-1]
                cuts = np.unique(np.concatenate([[0, n], self.rng.integers(0, n + 1, 3)]))
                ops = self.OPS
                whole = self.client.aggregate(x, ops)
                parts = []
                for a, b in zip(cuts[:-1], cuts[1:]):
                    parts.append(self.client.partial(x[..., a:b], ops, base_index=int(a)))
                merged = [tally.merge_all([p[i] for p in parts]) for i in range(len(ops))]
                for i, op in enumerate(ops):
                    got, want = tally.finish(merged[i]), whole[i]
                    msg = f"{op} over {len(cuts) - 1} parts of {x.dtype}{x.shape}"
                    if op.startswith(("topk", "bottomk")):
                        pairs_got = got if rows else [got]
                        pairs_want = want if rows else [want]
                        for (gv, gi), (wv, wi) in zip(pairs_got, pairs_want):
                            np.testing.assert_array_equal(gi, wi, err_msg=msg)
                            np.testing.assert_array_equal(bits(gv), bits(wv), err_msg=msg)
                    else:
                        self.assertEqual(np.shape(got), np.shape(want), msg)
                        np.testing.assert_array_equal(bits(got), bits(want), err_msg=msg)  # exact merges
                    checked += 1
        self.assertEqual(checked, 6 * len(self.OPS))

    def test_an_empty_part_is_the_identity_and_order_does_not_matter(self):
        x = random_array(self.rng, np.float64, 300, 0.05)
        for op in self.OPS:
            a, b = self.client.partial(x[:100], op)[0], self.client.partial(x[100:], op, base_index=100)[0]
            e = tally.empty(tally.Op.parse(op), x.dtype)
            for merged in (tally.merge(e, tally.merge(a, b)), tally.merge(tally.merge(a, b), e)):
                want, got = self.client.aggregate(x, op)[0], tally.finish(merged)
                if op.startswith(("topk", "bottomk")):
                    np.testing.assert_array_equal(got[1], want[1], err_msg=op)
                else:
                    np.testing.assert_array_equal(bits(got), bits(want), err_msg=op)
            if not op.startswith(("topk", "bottomk")):  # their indices say which part came first
                np.testing.assert_array_equal(bits(tally.finish(tally.merge(b, a))),
                                              bits(tally.finish(tally.merge(a, b))), err_msg=op)

    def test_states_of_other_parameters_or_functions_are_refused(self):
        x = random_array(self.rng, np.float64, 50)
        a = self.client.partial(x, "quantile:0.5")[0]
        b = self.client.partial(x, "quantile:0.6")[0]
        with self.assertRaises(ValueError):
            tally.merge(a, b)
        forged = self.client.partial(x, "quantile:0.6")[0]
        forged.op = a.op  # the Python side agrees; the state's own header does not
        with self.assertRaisesRegex(ValueError, "other parameters"):
            tally.merge(a, forged)
        junk = self.client.partial(x, "median")[0]
        junk.function_state = np.array([b"not a state"], dtype=object)
        with self.assertRaisesRegex(ValueError, "not a serialised state"):
            tally.merge(self.client.partial(x, "median")[0], junk)
        with self.assertRaisesRegex(ValueError, "no value"):
            tally.finish(tally.empty(tally.Op.parse("quantile:0.5"), np.float64))
        self.assertTrue(np.isnan(tally.finish(tally.empty(tally.Op.parse("median"), np.float64))))

    @unittest.skipUnless(HAVE_DASK, "dask missing")
    def test_dask_aggregate(self):
        import dask
        import dask.array as da
        import tally.dask as tdask
        x = random_array(self.rng, np.float64, (6, 900), 0.02)
        ops = ["nanquantile:0.05,0.5,0.95:hazen", "median", "topk:3", "count_distinct", "hll:12",
               "ddsketch:0.01:0.5"]
        with dask.config.set(scheduler="synchronous"):
            for array in (da.from_array(x[0], chunks=130), da.from_array(x, chunks=(4, 250))):
                got = tdask.aggregate(array, ops, targets=self.target).compute()
                want = self.client.aggregate(np.asarray(array), ops)
                for op in ops:
                    if op.startswith("topk"):
                        g = got[op] if array.ndim == 2 else [got[op]]
                        w = want[op] if array.ndim == 2 else [want[op]]
                        for (gv, gi), (wv, wi) in zip(g, w):
                            np.testing.assert_array_equal(gi, wi, err_msg=op)
                    else:
                        np.testing.assert_array_equal(bits(got[op]), bits(want[op]), err_msg=op)


@unittest.skipUnless(HAVE_PANDAS, "pandas missing")
class Pandas(Base):
    def assertSame(self, got, want, msg):
        import pandas as pd
        self.assertIs(type(got), type(want), f"{msg}: {got!r} vs pandas' {want!r}")
        if want is pd.NA:
            return
        if isinstance(want, (float, np.floating)) and np.isnan(want):
            self.assertTrue(np.isnan(got), msg)
        else:
            self.assertEqual(got, want, msg)

    def test_median_quantile_and_nunique(self):
        import pandas as pd
        n = 301
        f64 = random_array(self.rng, np.float64, n, 0.1)
        f32 = random_array(self.rng, np.float32, n, 0.05)
        i32 = self.rng.integers(-9, 9, n).astype(np.int32)
        int_na = pd.array(self.rng.integers(-5, 5, n), dtype="Int64")
        int_na[self.rng.integers(0, n, n // 4)] = pd.NA
        frame = pd.DataFrame({"f64": f64, "f32": f32, "i32": i32, "Int64": int_na,
                              "nan": np.full(n, np.nan), "cat": pd.Categorical(self.rng.choice(["a", "b", "c"], n)),
                              "when": pd.to_datetime(self.rng.integers(0, 5, n), unit="D")})
        frame.loc[3, "when"] = pd.NaT
        for column in frame:
            s = frame[column]
            funcs = ["nunique"] if column in ("cat", "when") else ["median", "quantile", "nunique"]
            for func in funcs:
                self.assertSame(self.client.agg(s, func), s.agg(func), f"{column}.agg({func!r})")
        # nunique drops NaN (dropna=True): the float column holds NaN.
        self.assertEqual(self.client.agg(frame["f64"], "nunique"), frame["f64"].nunique())
        self.assertEqual(self.client.agg(frame["nan"], "nunique"), 0)
        got = self.client.agg(frame[["f64", "i32", "Int64"]], ["median", "nunique", "count"])
        want = frame[["f64", "i32", "Int64"]].agg(["median", "nunique", "count"])
        self.assertEqual(list(got.index), list(want.index))
        np.testing.assert_allclose(got.to_numpy(dtype=float), want.to_numpy(dtype=float), rtol=1e-12)
        empty = pd.Series([], dtype=np.float64)
        for func in ("median", "quantile", "nunique"):
            self.assertSame(self.client.agg(empty, func), empty.agg(func), f"empty.agg({func!r})")
        with self.assertRaises(TypeError):
            self.client.agg(frame["when"], "median")

    def test_every_numeric_and_nullable_column(self):
        import pandas as pd
        from pandas_agg_test import numeric_frame
        df = numeric_frame(self.rng)
        df["f32_whole"] = np.round(df["f32"])  # quantiles that are whole numbers: pandas' types change
        df["Int64_whole"] = pd.array(np.where(np.arange(len(df)) % 3 == 0, None, 2), dtype="Int64")
        cases = [pd.Series([], dtype=np.float64), pd.Series([], dtype=np.int64), pd.Series([np.nan] * 4),
                 pd.Series([None] * 3, dtype="Int64"), pd.Series([5]), pd.Series([2.5, np.nan]),
                 pd.Series([7, None], dtype="Int64"), pd.Series([None, None], dtype="boolean")]
        checked = 0
        for s in [df[c] for c in df.columns] + cases:
            for func in ("median", "quantile", "nunique"):
                msg = f"{s.name} ({s.dtype}).agg({func!r})"
                try:
                    want = s.agg(func)
                except TypeError:  # pandas' quantile of bools: numpy refuses boolean subtraction
                    with self.assertRaises(TypeError, msg=msg):
                        self.client.agg(s, func)
                    continue
                got = self.client.agg(s, func)
                self.assertIs(type(got), type(want), f"{msg}: {got!r} vs pandas' {want!r}")
                if want is not pd.NA:
                    np.testing.assert_allclose(got, want, rtol=1e-6 if s.dtype == np.float32 else 1e-12,
                                               equal_nan=True, err_msg=msg)
                checked += 1
        self.assertGreater(checked, 35)
        got, want = self.client.agg(df, ["median", "nunique"]), df.agg(["median", "nunique"])
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-6)


if __name__ == "__main__":
    client_test_main(globals())
