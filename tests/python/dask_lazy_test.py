"""tally.dask's lazy results against numpy, pandas and Dask themselves, on
2 tally servers: numpy's reductions over Dask Arrays of 1 to 3 dimensions in
several chunkings, every axis and keepdims; pandas' agg over Dask
DataFrames and Series of several partitions with NaN, nullable, category
and datetime columns; and nothing sent to a server before ``.compute()``
(the servers' own request counters say so).

usage: dask_lazy_test.py TALLY_SERVER_BINARY
(the package, built with its stubs, on PYTHONPATH)
"""
import os
import re
import sys
import unittest
import urllib.request
import warnings

import dask
import dask.array as da
import dask.dataframe as dd
from dask.delayed import Delayed
import numpy as np
import pandas as pd

import tally
import tally.dask as td
from tally.v1 import tally_pb2
from tally_test_server import TallyServer, free_port

SERVER_BINARY = None
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
FUNCTIONS = ["sum", "prod", "mean", "var", "std", "min", "max", "ptp", "argmin", "argmax", "count_nonzero", "any",
             "all", "nansum", "nanmean", "nanvar", "nanstd", "nanmin", "nanmax", "nanargmin", "nanargmax"]
INDEX = ("argmin", "argmax", "nanargmin", "nanargmax")
# Each shape with chunkings: one block, uneven blocks, blocks of one element
# along an axis. Small shapes (at most 12 blocks a chunking): every block is
# a request, and each of the 2,000-odd cases computes once.
CHUNKINGS = {(1000,): [1000, 333, (1, 999)],
             (12, 10): [(12, 10), (5, 4), (12, 1), (1, 10)],
             (4, 5, 6): [(4, 5, 6), (3, 2, 4), (1, 5, 2)]}


class Servers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.metrics_ports = [free_port(), free_port()]
        cls.servers = [TallyServer(SERVER_BINARY, tally_pb2, ["--backend=cpu", "--threads=2",
                                                               f"--metrics_listen=127.0.0.1:{port}"])
                       for port in cls.metrics_ports]
        cls.targets = [f"127.0.0.1:{s.port}" for s in cls.servers]
        td.use(cls.targets)
        dask.config.set(scheduler="threads")

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop()

    def setUp(self):
        self.rng = np.random.default_rng([SEED, hash(self.id()) % (2**32)])
        warnings.simplefilter("ignore", RuntimeWarning)

    def requests(self):
        """Requests both servers have finished, from their Prometheus counters."""
        total = 0
        for port in self.metrics_ports:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            total += sum(float(v) for v in re.findall(r"^tally_requests_total\{[^}]*\} (\S+)$", text, re.M))
        return total


class Arrays(Servers):
    def test_every_function_axis_and_chunking_against_numpy(self):
        cases = []  # (message, numpy's answer, the lazy result, the data's largest magnitude)
        for shape, chunkings in CHUNKINGS.items():
            xn = self.rng.uniform(0.5, 2.0, shape)
            xn.reshape(-1)[self.rng.integers(0, xn.size, 3)] = np.nan
            ints = self.rng.integers(-5, 20, shape).astype(np.int32)  # ties: the first occurrence wins
            for chunks in chunkings:
                for data in (xn, ints):
                    x = da.from_array(data, chunks=chunks)
                    finite = np.abs(data[np.isfinite(data)])
                    scale = float(finite.max()) if finite.size else 1.0
                    for name in FUNCTIONS:
                        for axis in (None, 0, 1, -1, (0, -1)):
                            if (isinstance(axis, int) and axis >= x.ndim) or \
                                    (isinstance(axis, tuple) and (name in INDEX or x.ndim < 2)):
                                continue
                            for keepdims in (False, True):
                                msg = f"{name}({data.dtype}{shape} in {chunks}, axis={axis}, keepdims={keepdims})"
                                try:
                                    want = getattr(np, name)(data, axis=axis, keepdims=keepdims)
                                except ValueError:  # an all-NaN slice for nanargmin
                                    with self.assertRaises((ValueError, tally.Error), msg=msg):
                                        getattr(td, name)(x, axis=axis, keepdims=keepdims).compute()
                                    continue
                                lazy = getattr(td, name)(x, axis=axis, keepdims=keepdims)
                                self.assertIsInstance(lazy, da.Array, msg)
                                self.assertEqual(lazy.shape, np.shape(want), msg)
                                self.assertEqual(lazy.dtype, np.asarray(want).dtype, msg)
                                cases.append((msg, want, lazy, scale))
        # One compute for every case: Dask's per-call overhead, not the
        # servers, was most of this test's time.
        results = dask.compute(*[lazy for _, _, lazy, _ in cases])
        for (msg, want, _, scale), got in zip(cases, results):
            self.assertEqual(np.shape(got), np.shape(want), msg)
            self.assertEqual(np.asarray(got).dtype, np.asarray(want).dtype, msg)
            if np.asarray(want).dtype.kind == "f":
                # Merged means and moments round in float64: a mean that is
                # exactly 0 may come back as 1e-17 (Chan's rule), so the
                # tolerance is also absolute, at the data's own scale.
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * scale, equal_nan=True, err_msg=msg)
            else:
                np.testing.assert_array_equal(got, want, err_msg=msg)
        self.assertGreater(len(cases), 2000)

    def test_ddof_dtype_and_composition_with_dask(self):
        xn = self.rng.standard_normal((300, 40)).astype(np.float32)
        x = da.from_array(xn, chunks=(70, 15))
        np.testing.assert_allclose(td.std(x, axis=0, ddof=1).compute(), np.std(xn, axis=0, ddof=1), rtol=1e-5)
        got = td.sum(x, dtype=np.float64).compute()
        self.assertEqual(got.dtype, np.float64)
        np.testing.assert_allclose(got, np.sum(xn, dtype=np.float64), rtol=1e-12)
        # Composes with Dask's own work in one graph.
        ours, theirs = dask.compute(td.mean(x, axis=1) - x.mean(axis=1), td.max(x))
        np.testing.assert_allclose(ours, 0, atol=1e-5)
        self.assertEqual(theirs, xn.max())
        with self.assertRaises(ValueError):
            td.reduce("median", x)  # not a reduction tally.dask answers
        with self.assertRaises(TypeError):
            td.any(x, dtype=np.float64)  # numpy.any takes no dtype
        with self.assertRaises(ValueError):
            td.min(da.zeros((0,), chunks=1)).compute()  # numpy raises for an empty min
        with self.assertRaises(ValueError):
            td.ptp(da.zeros((0,), chunks=1)).compute()
        # numpy's identities for no elements, and its result dtypes.
        empty = da.zeros((0,), chunks=1, dtype=np.int32)
        got = dask.compute(td.prod(empty), td.any(empty), td.all(empty), td.count_nonzero(empty))
        self.assertEqual([np.asarray(g).dtype for g in got], [np.int64, np.bool_, np.bool_, np.int64])
        self.assertEqual([g[()] for g in got], [1, False, True, 0])
        # Odd factors, so that the wrapped product is not 0 (2^64 divides one of 64 even factors).
        ints = (self.rng.integers(-2**31, 2**31, 4000) | 1).astype(np.int32)
        for dtype, chunks in ((np.int32, 333), (np.uint8, 1000), (np.float32, 700), (np.bool_, 999)):
            xn = ints.astype(dtype) if dtype != np.float32 else self.rng.uniform(0.99, 1.01, 4000).astype(dtype)
            got = td.prod(da.from_array(xn, chunks=chunks)).compute()
            want = np.prod(xn)
            self.assertEqual(got.dtype, want.dtype, f"prod of {np.dtype(dtype)}")
            if dtype == np.float32:
                np.testing.assert_allclose(got, want, rtol=1e-4)
            else:
                self.assertEqual(got, want, f"prod of {np.dtype(dtype)}")
        # ptp in the dtype: int32's whole range, its two ends in two blocks, wraps to -1 as numpy's.
        ends = np.zeros(100, np.int32)
        ends[3], ends[97] = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        got = td.ptp(da.from_array(ends, chunks=50)).compute()
        self.assertEqual((got.dtype, got), (np.dtype(np.int32), np.ptp(ends)))

    def test_aggregate_is_lazy_with_the_keys_asked_for(self):
        x = da.from_array(self.rng.standard_normal(10_000), chunks=1_000)
        before = self.requests()
        lazy = td.aggregate(x, ["sum", "std:1", "hist:8:-2:2"])
        self.assertEqual(self.requests(), before)
        r = lazy.compute()
        self.assertEqual(list(r), ["sum", "std:1", "hist:8:-2:2"])
        self.assertEqual(r["std:1"], r["stddev:1"])
        np.testing.assert_allclose(r["std:1"], np.std(x.compute(), ddof=1), rtol=1e-12)


class Laziness(Servers):
    def test_nothing_is_sent_before_compute(self):
        xn = self.rng.standard_normal((500, 60))
        x = da.from_array(xn, chunks=(100, 30))  # 10 blocks
        frame = dd.from_pandas(pd.DataFrame({"v": xn[:, 0], "w": xn[:, 1]}), npartitions=4)
        before = self.requests()
        graphs = [td.sum(x), td.nanmean(x, axis=0), td.argmax(x, axis=1), td.agg(frame, ["mean", "count"]),
                  td.agg(frame["v"], "std")]
        self.assertEqual(self.requests(), before, "a server was asked before .compute()")
        total = td.sum(x).compute()
        self.assertEqual(self.requests(), before + 10, "one request per block")
        np.testing.assert_allclose(total, xn.sum(), rtol=1e-12)
        dask.compute(*graphs)
        # One request per block, and per partition and column.
        self.assertEqual(self.requests(), before + 10 + 10 + 10 + 10 + 4 * 2 + 4)


class Frames(Servers):
    def frame(self, n=2000):
        rng = self.rng
        f = rng.standard_normal(n)
        f[rng.integers(0, n, n // 7)] = np.nan
        ints = pd.array(rng.integers(-50, 50, n), dtype="Int64")
        ints[rng.integers(0, n, n // 5)] = pd.NA
        floats = pd.array(rng.uniform(1, 2, n), dtype="Float64")
        floats[rng.integers(0, n, n // 5)] = pd.NA
        flags = pd.array(rng.random(n) < 0.3, dtype="boolean")
        flags[rng.integers(0, n, 9)] = pd.NA
        when = pd.Series(pd.Timestamp("2023-01-01") + pd.to_timedelta(rng.integers(0, 10**14, n), unit="ns"))
        when[rng.random(n) < 0.1] = pd.NaT
        grade = pd.Categorical(rng.choice(["c", "b", "a", None], n), categories=["c", "b", "a"], ordered=True)
        return pd.DataFrame({"f": f, "i": rng.integers(0, 9, n), "ints": ints, "floats": floats,
                             "flags": flags, "when": when, "grade": grade})

    def check(self, got, want, msg):
        if isinstance(want, pd.DataFrame):
            pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9, obj=msg)
        elif isinstance(want, pd.Series):
            pd.testing.assert_series_equal(got, want, check_exact=False, rtol=1e-9, obj=msg)
        elif isinstance(want, pd.Timestamp):
            self.assertLessEqual(abs(got - want), pd.Timedelta(microseconds=1), msg)
        else:
            self.assertIs(type(got), type(want), msg)
            if isinstance(want, (float, np.floating)):
                np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=msg)
            else:
                self.assertEqual(got, want, msg)

    def test_agg_over_partitions_gets_pandas_answers(self):
        pdf = self.frame()
        numeric = pdf[["f", "i", "ints", "floats", "flags"]]
        for npartitions in (1, 3, 16):
            ddf = dd.from_pandas(numeric, npartitions=npartitions)
            for func in ("sum", "mean", "min", "max", "count", "std", "var", "size",
                         ["sum", "count", "std"], {"f": "mean", "ints": ["min", "max"]}):
                if func == "size":
                    continue
                msg = f"agg({func!r}) over {npartitions} partitions"
                lazy = td.agg(ddf, func)
                self.assertIsInstance(lazy, Delayed, msg)
                self.check(lazy.compute(), numeric.agg(func), msg)
            for name in numeric.columns:
                for func in ("sum", "mean", "min", "count", "std", ["max", "var", "size"]):
                    self.check(td.agg(ddf[name], func).compute(), numeric[name].agg(func), f"{name} {func}")

    def test_category_and_datetime_columns(self):
        pdf = self.frame()
        ddf = dd.from_pandas(pdf[["when", "grade"]], npartitions=5)
        for func in ("min", "max", "count"):
            for name in ("when", "grade"):
                self.check(td.agg(ddf[name], func).compute(), pdf[name].agg(func), f"{name} {func}")
        self.check(td.agg(ddf["when"], "mean").compute(), pdf["when"].agg("mean"), "when mean")
        self.check(td.agg(ddf, "count").compute(), pdf[["when", "grade"]].agg("count"), "count")
        unknown = dd.from_pandas(pd.DataFrame({"g": pd.Categorical(["x", "y"] * 10)}), npartitions=2)
        unknown["g"] = unknown["g"].cat.as_unknown()
        with self.assertRaises(TypeError):
            td.agg(unknown, "count")
        numeric = pdf[["f", "i", "ints", "floats", "flags"]]
        for npartitions in (1, 4):
            ddf = dd.from_pandas(numeric, npartitions=npartitions)
            for func in ("prod", "any", "all", ["prod", "any", "all", "count"]):
                self.check(td.agg(ddf, func).compute(), numeric.agg(func), f"agg({func!r}), {npartitions} partitions")
            for name in numeric.columns:
                for func in ("prod", "any", "all"):
                    self.check(td.agg(ddf[name], func).compute(), numeric[name].agg(func), f"{name} {func}")


if __name__ == "__main__":
    SERVER_BINARY = sys.argv[1]
    print(f"TALLY_TEST_SEED={SEED}", flush=True)
    unittest.main(argv=[sys.argv[0]], verbosity=2)
