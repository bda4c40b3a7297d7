"""tally.Client's numpy-style functions against numpy itself: every function
over 1-D, 2-D and 3-D arrays, axis None, 0, 1, -1 and tuples, keepdims,
dtype= and ddof=, with the same shapes, dtypes and scalar types as numpy's
answers; empty reductions, bad axes and numpy.histogram's default range.

usage: numpy_functions_test.py TALLY_SERVER_BINARY [--backend=cpu]
(the package, built with its stubs, on PYTHONPATH)
"""
import os
import warnings

import numpy as np

import tally
from tally.v1 import tally_pb2
from tally_test_server import ClientTestCase, client_test_main

SERVER_BINARY = None
BACKEND = "cpu"
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
SHAPES = [(37,), (6, 11), (4, 5, 7)]
DTYPES = [np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_]
AXES = [None, 0, 1, -1, (0, -1)]
# Each function, with what numpy takes beyond axis and keepdims.
PLAIN = ["sum", "prod", "mean", "var", "std", "min", "max", "ptp", "argmin", "argmax", "any", "all",
         "count_nonzero"]
NAN = ["nansum", "nanmean", "nanvar", "nanstd", "nanmin", "nanmax", "nanargmin", "nanargmax"]
ONE_AXIS = ("argmin", "argmax", "nanargmin", "nanargmax")


def random_array(rng, dtype, shape, nans=False):
    if np.dtype(dtype).kind == "f":
        # Positive and near 1: sums do not cancel, products do not overflow.
        x = rng.uniform(0.5, 2.0, shape).astype(dtype)
        if nans:
            x.reshape(-1)[rng.integers(0, x.size, max(1, x.size // 10))] = np.nan
        return x
    if dtype == np.bool_:
        return rng.random(shape) < 0.7
    # Small values repeat, so ties test the first-occurrence rule; zeros
    # test count_nonzero, any and all.
    lo = -5 if np.dtype(dtype).kind == "i" else 0
    return rng.integers(lo, 20, size=shape).astype(dtype)


class Base(ClientTestCase):
    def setUp(self):
        super().setUp()
        # numpy's own answers warn of empty and all-NaN slices; tally's do not.
        warnings.simplefilter("ignore", RuntimeWarning)

    def assertSameAnswer(self, got, want, msg):
        """numpy's type (a numpy scalar, an array, a Python int), shape and
        dtype exactly; values exactly for integers, bools and indices, to
        float32 rounding for floats (tally adds floats in float64)."""
        self.assertIs(type(got), type(want), msg)
        self.assertEqual(np.shape(got), np.shape(want), msg)
        if isinstance(want, (np.ndarray, np.generic)):
            self.assertEqual(got.dtype, want.dtype, msg)
        if np.asarray(want).dtype.kind == "f":
            rtol = 1e-2 if np.asarray(want).dtype == np.float16 else 1e-5
            np.testing.assert_allclose(got, want, rtol=rtol, equal_nan=True, err_msg=msg)
        else:
            np.testing.assert_array_equal(got, want, err_msg=msg)


class EveryFunction(Base):
    def sweep(self, names, nans):
        checked = 0
        for shape in SHAPES:
            for dtype in DTYPES:
                if nans and np.dtype(dtype).kind != "f":
                    continue
                x = random_array(self.rng, dtype, shape, nans)
                for name in names:
                    if name == "ptp" and dtype == np.bool_:
                        continue  # numpy refuses it (boolean subtract), as tally does
                    for axis in AXES:
                        if isinstance(axis, int) and axis >= x.ndim:
                            continue
                        if isinstance(axis, tuple) and (name in ONE_AXIS or x.ndim < 2):
                            continue
                        for keepdims in (False, True):
                            msg = f"{name}({x.dtype}{x.shape}, axis={axis}, keepdims={keepdims})"
                            try:
                                want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
                            except ValueError:  # e.g. nanargmin of an all-NaN slice
                                with self.assertRaises((ValueError, tally.Error), msg=msg):
                                    getattr(self.client, name)(x, axis=axis, keepdims=keepdims)
                                continue
                            got = getattr(self.client, name)(x, axis=axis, keepdims=keepdims)
                            self.assertSameAnswer(got, want, msg)
                            checked += 1
        return checked

    def test_plain_functions_over_every_axis(self):
        self.assertGreater(self.sweep(PLAIN, nans=False), 1000)

    def test_nan_functions_over_every_axis(self):
        self.assertGreater(self.sweep(NAN, nans=True), 300)

    def test_nan_propagates_through_the_plain_functions(self):
        x = random_array(self.rng, np.float64, (5, 9))
        x[2, 3] = np.nan
        for name in ("sum", "mean", "min", "max", "argmin", "argmax", "std", "ptp", "prod"):
            for axis in (None, 0, 1):
                self.assertSameAnswer(getattr(self.client, name)(x, axis=axis), getattr(np, name)(x, axis=axis),
                                      f"{name} axis={axis}")

    def test_an_all_nan_row(self):
        x = random_array(self.rng, np.float32, (3, 8))
        x[1] = np.nan
        for name in ("nansum", "nanmean", "nanmin", "nanmax", "nanvar", "nanstd"):
            self.assertSameAnswer(getattr(self.client, name)(x, axis=1), getattr(np, name)(x, axis=1), name)

    def test_ddof_and_dtype(self):
        x = random_array(self.rng, np.float32, (6, 10))
        i8 = self.rng.integers(-128, 127, (6, 300)).astype(np.int8)
        cases = [("var", x, dict(ddof=1)), ("std", x, dict(ddof=2, axis=0)), ("nanvar", x, dict(ddof=1, axis=1)),
                 ("nanstd", x, dict(ddof=1)),
                 ("sum", i8, dict(axis=1, dtype=np.int8)),        # wraps at int8, as numpy's
                 ("sum", i8, dict(dtype=np.float32)), ("prod", i8, dict(axis=0, dtype=np.int16)),
                 ("mean", x, dict(axis=-1, dtype=np.float64)), ("std", i8, dict(axis=1, dtype=np.float32)),
                 ("nansum", x, dict(axis=0, dtype=np.float64)), ("nanmean", i8, dict(dtype=np.float32))]
        for name, a, kwargs in cases:
            self.assertSameAnswer(getattr(self.client, name)(a, **kwargs), getattr(np, name)(a, **kwargs),
                                  f"{name}({a.dtype}, {kwargs})")

    def test_non_contiguous_big_endian_and_0d_input(self):
        m = random_array(self.rng, np.int32, (30, 20))
        for view in (m[:, ::3], m.T, m.astype(">i4"), m[::2, 1:]):
            for axis in (None, 0, 1):
                for name in ("sum", "argmax", "min", "mean"):
                    self.assertSameAnswer(getattr(self.client, name)(view, axis=axis),
                                          getattr(np, name)(view, axis=axis), f"{name} axis={axis}")
        self.assertSameAnswer(self.client.sum(np.float32(2.5)), np.sum(np.float32(2.5)), "0-d")
        self.assertSameAnswer(self.client.max([3, 9, 2]), np.max([3, 9, 2]), "a list")

    def test_empty_reductions(self):
        for shape, axis in (((3, 0), 1), ((0, 4), 0), ((0, 4), 1), ((0,), None), ((2, 0, 3), (0, 1))):
            x = np.empty(shape, np.float32)
            for name in PLAIN + NAN:
                if name == "ptp" or (isinstance(axis, tuple) and name in ONE_AXIS):
                    continue
                msg = f"{name}(shape {shape}, axis={axis})"
                try:
                    want = getattr(np, name)(x, axis=axis)
                except ValueError:
                    with self.assertRaises(ValueError, msg=msg):
                        getattr(self.client, name)(x, axis=axis)
                    continue
                self.assertSameAnswer(getattr(self.client, name)(x, axis=axis), want, msg)

    def test_bad_arguments_raise_what_numpy_raises(self):
        x = random_array(self.rng, np.float64, (3, 4))
        with self.assertRaises(getattr(np, "exceptions", np).AxisError):  # numpy 2 moved it
            self.client.sum(x, axis=2)
        with self.assertRaises(ValueError):
            self.client.sum(x, axis=(1, -1))  # a repeated axis
        with self.assertRaises(TypeError):
            self.client.argmax(x, axis=(0, 1))
        with self.assertRaises(TypeError) as e:
            self.client.sum(np.array(["a", "b"]))
        self.assertIn("<U1", str(e.exception))
        with self.assertRaises(TypeError):
            self.client.sum(np.ma.masked_array(x, x > 1))
        with self.assertRaises(tally.Error):
            self.client.nanargmin(np.full(4, np.nan))


class Histogram(Base):
    def check(self, x, **kwargs):
        got = self.client.histogram(x, **kwargs)
        want = np.histogram(x, **kwargs)
        msg = f"histogram({x.dtype}{x.shape}, {kwargs})"
        self.assertIsInstance(got, tuple, msg)
        for g, w in zip(got, want):
            self.assertEqual(g.dtype, w.dtype, msg)
            np.testing.assert_allclose(g, w, rtol=1e-12, err_msg=msg) if w.dtype.kind == "f" else \
                np.testing.assert_array_equal(g, w, err_msg=msg)

    def test_numpys_default_range_and_bins(self):
        for dtype in (np.float64, np.float32, np.int32, np.uint8, np.int64):
            x = random_array(self.rng, dtype, (40, 50))
            self.check(x)
            self.check(x, bins=7)
            self.check(x, bins=64, range=(0.7, 1.9))
            self.check(x, bins=5, density=True)
        self.check(np.full(100, 3.0, np.float32))  # min == max: one unit around it
        self.check(np.full(10, 7, np.int16))
        self.check(np.empty(0, np.float64))  # [0, 1]

    def test_nan_and_bad_ranges(self):
        x = random_array(self.rng, np.float64, 1000, nans=True)
        self.check(x, range=(0.5, 1.5))  # NaN is in no bin
        with self.assertRaises(ValueError):
            self.client.histogram(x)  # autodetected range of [nan, nan]
        with self.assertRaises(ValueError):
            self.client.histogram(x, range=(2, 1))
        with self.assertRaises(ValueError):
            self.client.histogram(x, range=(0, np.inf))
        with self.assertRaises(TypeError):
            self.client.histogram(x, bins=[0, 1, 3])


if __name__ == "__main__":
    client_test_main(globals())
