"""tally.Client.groupby against pandas itself: df.groupby(by, sort=, dropna=)
.agg(...) of every function tally answers, by name, list, dict and named
aggregation, over keys of every dtype (integers, bool, floats with NaN and
-0.0, strings with None, categories, nullable Int64), composite, skewed,
one group and 200,000 groups in several pages; nullable value columns, empty
frames, a mapping of numpy arrays or of SharedArrays (sent as region columns),
large tables packed into one shared-memory region for a local server or sent
in chunks (GroupByStream), and the errors that name what is wrong.

usage: groupby_test.py TALLY_SERVER_BINARY [--backend=cpu]
(the package, built with its stubs, on PYTHONPATH)
"""
import contextlib
import math
import os
import subprocess
import sys
import threading
import time
import unittest
import warnings
import zlib

import grpc
import numpy as np
import pandas as pd

import tally
from tally.v1 import tally_pb2  # noqa: F401 (the harness starts the server with it)
from tally_test_server import (ClientTestCase, TallyServer, client_test_main, native_states, readme_python_block,
                               rss_bytes)

SERVER_BINARY = None
BACKEND = "cpu"
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
# pandas' groupby functions that tally answers. idxmin and idxmax run a
# Python function per group in pandas, so they are asked of small frames.
FUNCS = ["sum", "mean", "min", "max", "count", "size", "std", "var", "median", "prod", "nunique", "quantile",
         "any", "all"]
INDEX_FUNCS = ["idxmin", "idxmax"]
FEW = ["sum", "count", "size", "min", "mean"]
# pandas 3 refuses what pandas 1.5 answered (quantile of bools: TypeError;
# idxmin of a group with no value: ValueError), and groups by observed
# categories by default: the tests ask tally for what the installed pandas
# does, and check the rest without those columns or groups.
PANDAS_3 = int(pd.__version__.split(".")[0]) >= 3


def values_frame(rng, n, keys):
    """Value columns of every numpy and nullable kind with missing values,
    beside the key columns ``keys``. Floats are positive and near 1, so that
    sums neither cancel nor products vanish: float64 answers then agree to
    rtol=1e-12 whatever the order of the additions."""
    f64 = rng.uniform(0.5, 1.5, n)
    f64[rng.random(n) < 0.1] = np.nan
    f32 = rng.uniform(0.5, 1.5, n).astype(np.float32)
    f32[rng.random(n) < 0.05] = np.nan
    int_na = pd.array(rng.integers(-3, 4, n), dtype="Int64")
    int_na[rng.random(n) < 0.2] = pd.NA
    float_na = pd.array(rng.uniform(0.5, 1.5, n), dtype="Float64")
    float_na[rng.random(n) < 0.2] = pd.NA
    bool_na = pd.array(rng.random(n) < 0.5, dtype="boolean")
    bool_na[rng.random(n) < 0.2] = pd.NA
    return pd.DataFrame({**keys, "f64": f64, "f32": f32, "i64": rng.integers(-50, 50, n),
                         "i8": rng.integers(-2, 3, n).astype(np.int8), "u64": rng.integers(0, 2**62, n, dtype=np.uint64),
                         "u8": rng.integers(0, 3, n).astype(np.uint8), "b": rng.random(n) < 0.7,
                         "Int64": int_na, "Float64": float_na, "boolean": bool_na})


def mixed_columns(rng, n):
    """An int32 key column and value columns of five dtypes, float64 with NaN."""
    f64 = rng.uniform(0.5, 1.5, n)
    f64[rng.random(n) < 0.1] = np.nan
    return {"k": rng.integers(-40, 57, n).astype(np.int32), "f64": f64,
            "f32": rng.uniform(0.5, 1.5, n).astype(np.float32),
            "i16": rng.integers(-9, 9, n).astype(np.int16),
            "u64": rng.integers(0, 2**62, n, dtype=np.uint64), "b": rng.random(n) < 0.3}


def func_of(label):
    """The function of a result column's label: ("v", "std") -> "std"."""
    return label[-1] if isinstance(label, tuple) else label


class Base(ClientTestCase):
    def setUp(self):
        super().setUp()
        # A generator per test from the printed seed alone (str hashes
        # change from run to run).
        self.rng = np.random.default_rng([SEED, zlib.crc32(self.id().encode())])
        warnings.simplefilter("ignore")  # pandas' FutureWarnings, numpy's empty-slice warnings

    def record_requests(self):
        """Each GroupBy request the client sends, into self.requests."""
        self.requests = []
        read = self.client._group_by_pages

        def recording(request, timeout, metadata):
            self.requests.append(request)
            return read(request, timeout, metadata)

        self.client._group_by_pages = recording
        self.addCleanup(delattr, self.client, "_group_by_pages")

    def assertSameResult(self, got, want, msg):
        """Index, columns and dtypes as pandas'; integers, counts, extremes
        and labels exactly; floats to rtol=1e-12 (1e-5 where pandas computes
        in float32)."""
        self.assertIs(type(got), type(want), msg)
        pd.testing.assert_index_equal(got.index, want.index, exact="equiv", obj=f"{msg}: index")
        if isinstance(want, pd.Series):
            got, want = got.to_frame(), want.to_frame()
            self.assertEqual(got.columns[0], want.columns[0], msg)
        pd.testing.assert_index_equal(got.columns, want.columns, exact="equiv", obj=f"{msg}: columns")
        for j, label in enumerate(want.columns):
            g, w = got.iloc[:, j], want.iloc[:, j]
            where = f"{msg}: column {label!r}"
            self.assertEqual(g.dtype, w.dtype, where)
            if pd.api.types.is_float_dtype(w.dtype):
                gv, wv = g.to_numpy(dtype=np.float64, na_value=np.nan), w.to_numpy(dtype=np.float64, na_value=np.nan)
                np.testing.assert_array_equal(np.isnan(gv), np.isnan(wv), err_msg=f"{where}: missing values")
                # pandas adds float32 in float32 (tally in float64): 1e-4 on
                # groups of 50,000 rows. Its one-pass variance gathers a
                # rounding error per row (n * 1.1e-16: 7e-12 for 60,000 rows).
                rtol = 1e-4 if w.dtype == np.float32 else 1e-11 if func_of(label) in ("std", "var") else 1e-12
                # Means of integers of both signs that cancel to about 0, and
                # the variance of values that nearly agree, keep only an
                # absolute precision, whatever the order of the operations.
                np.testing.assert_allclose(gv, wv, rtol=rtol, atol=1e-12, equal_nan=True, err_msg=where)
            else:
                pd.testing.assert_series_equal(g, w, check_exact=True, check_names=False, obj=where)

    def assertSameGroupBy(self, df, by, agg=None, sort=True, dropna=True, msg="", observed=None, **named):
        """tally's groupby against pandas': the same result, or where pandas
        raises, the same exception (None then)."""
        options = {"sort": sort, "dropna": dropna, **({} if observed is None else {"observed": observed})}
        msg = f"groupby({by!r}, {options}).agg({agg!r}{', ' if named else ''}{named or ''}) {msg}"
        try:
            want = df.groupby(by, **options).agg(agg, **named)
        except (TypeError, ValueError) as e:
            with self.assertRaises(type(e), msg=f"{msg}: pandas raises {e!r}"):
                self.client.groupby(df, by, agg, **options, **named)
            return None
        got = self.client.groupby(df, by, agg, **options, **named)
        self.assertSameResult(got, want, msg)
        return got


class Functions(Base):
    def test_every_function_on_every_numeric_and_nullable_column(self):
        n = 4000
        df = values_frame(self.rng, n, {"k": self.rng.integers(0, 60, n)})
        # Groups whose values are all missing (NaN, NA) and a group of one row.
        for name in ("f64", "f32", "Int64", "Float64", "boolean"):
            df.loc[df.k == 7, name] = np.nan if df[name].dtype.kind == "f" else pd.NA
        df.loc[df.index[-1], "k"] = 1000
        for sort in (True, False):
            self.assertSameGroupBy(df, "k", FUNCS, sort=sort)
        for func in FUNCS:
            self.assertSameGroupBy(df, "k", func)
        if PANDAS_3:  # the quantile of bools is a TypeError: every function of the other columns
            self.assertSameGroupBy(df.drop(columns="b"), "k", FUNCS)

    def test_idxmin_and_idxmax_are_index_labels(self):
        n = 1500
        df = values_frame(self.rng, n, {"k": self.rng.integers(0, 30, n)})
        df = df.drop(columns=["Int64", "Float64", "boolean"])  # pandas 1.5 raises for an all-NA group of these
        df.loc[df.k == 3, "f64"] = np.nan                       # ... and answers NaN for an all-NaN one
        df.index = pd.Index(self.rng.permutation(n) * 10 + 5)   # labels, not positions
        self.assertSameGroupBy(df, "k", INDEX_FUNCS)            # pandas 3 raises ValueError for group 3
        self.assertSameGroupBy(df[df.k != 3], "k", INDEX_FUNCS)
        nullable = values_frame(self.rng, n, {"k": self.rng.integers(0, 30, n)})[["k", "Int64", "Float64", "boolean"]]
        self.assertSameGroupBy(nullable, "k", INDEX_FUNCS + ["min", "max"])
        ties = pd.DataFrame({"k": [1, 1, 1, 2, 2], "v": [3.0, 1.0, 1.0, np.nan, 5.0]}, index=list("abcde"))
        self.assertSameGroupBy(ties, "k", INDEX_FUNCS)  # the first of equal values
        # A group whose nullable values are all NA: NaN, as for floats
        # (pandas 1.5 raises "attempt to get argmin of an empty sequence");
        # pandas 3 raises ValueError for either, and so does tally.
        all_na = pd.DataFrame({"k": [1, 1, 2], "v": pd.array([None, None, 4], dtype="Int64")}, index=[10, 20, 30])
        if PANDAS_3:
            with self.assertRaises(ValueError) as e:
                self.client.groupby(all_na, "k", {"v": INDEX_FUNCS})
            self.assertIn("'v'", str(e.exception))
        else:
            got = self.client.groupby(all_na, "k", {"v": INDEX_FUNCS})
            self.assertTrue(got.loc[1].isna().all())
            self.assertEqual(list(got.loc[2]), [30.0, 30.0])

    def test_forms_of_agg(self):
        n = 3000
        df = values_frame(self.rng, n, {"k": self.rng.integers(0, 40, n), "j": self.rng.integers(0, 3, n)})
        self.assertSameGroupBy(df, "k", "mean")
        self.assertSameGroupBy(df, "k", ["sum", "size", "std"])
        self.assertSameGroupBy(df, "k", {"f64": "sum", "Int64": "max", "j": "nunique"})
        self.assertSameGroupBy(df, "k", {"f64": ["sum", "median"], "b": "any", "Float64": ["count", "quantile"]})
        self.assertSameGroupBy(df, ["k", "j"], None, total=("f64", "sum"), rows=("i64", "size"),
                               low=("Int64", "min"), spread=("f32", "std"), where=("f64", "idxmax"))
        got = self.assertSameGroupBy(df, "k", "size")
        self.assertIsInstance(got, pd.Series)  # as pandas: one Series of group sizes
        self.assertEqual(got.sum(), n)

    def test_functions_tally_does_not_answer_are_named(self):
        df = pd.DataFrame({"k": [1, 1, 2], "v": [1.0, 2.0, 3.0]})
        for func in ("first", "last", "sem"):
            with self.assertRaises(ValueError) as e:
                self.client.groupby(df, "k", func)
            self.assertIn(repr(func), str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.client.groupby(df, "k", {"v": ["sum", "last"]})
        self.assertIn("'last'", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.client.groupby(df, "k", "average")
        self.assertIn("'average'", str(e.exception))
        with self.assertRaises(TypeError):
            self.client.groupby(df, "k", np.sum)  # functions by name only


class Keys(Base):
    def key_columns(self, n):
        """One key column of each dtype, with NaN, None and NA among them."""
        rng = self.rng
        f64 = rng.integers(-4, 5, n) / 2
        f64[rng.random(n) < 0.05] = np.nan
        f64[rng.random(n) < 0.05] = -0.0
        f32 = rng.integers(0, 6, n).astype(np.float32) / 4
        f32[rng.random(n) < 0.05] = np.nan
        words = np.array(["pear", "apple", "fig", "kiwi", "plum", "date", None], dtype=object)
        cat = pd.Categorical(rng.choice(["lo", "mid", "hi", None], n), categories=["hi", "lo", "mid", "unused"])
        int_na = pd.array(rng.integers(-3, 3, n), dtype="Int64")
        int_na[rng.random(n) < 0.1] = pd.NA
        return {"int8": rng.integers(-5, 5, n).astype(np.int8), "int32": rng.integers(-1000, 1000, n).astype(np.int32),
                "int64": rng.integers(-2**62, 2**62, n)[rng.integers(0, 20, n)],
                # (numpy 2 refuses 2**63 + an int64 array: the Python int does not fit.)
                "uint64": (np.uint64(2**63) + rng.integers(0, 10, n).astype(np.uint64))
                * rng.integers(0, 2, n).astype(np.uint64),
                "bool": rng.random(n) < 0.3, "float32": f32, "float64": f64,
                "string": words[rng.integers(0, len(words), n)], "category": cat, "Int64": int_na}

    def test_every_key_dtype_with_sort_and_dropna(self):
        n = 3000
        keys = self.key_columns(n)
        df = values_frame(self.rng, n, keys)
        for name in keys:
            for sort in (True, False):
                for dropna in (True, False):
                    if name == "category" and not dropna:
                        continue  # below: pandas 1.5 loses the NA group of a category key
                    frame = df.drop(columns=[k for k in keys if k != name])
                    got = self.assertSameGroupBy(frame, name, FEW, sort=sort, dropna=dropna, msg=f"key {name}")
                    if not dropna and pd.isna(df[name]).any():
                        self.assertTrue(pd.isna(got.index).any(), f"{name}: an NA group")
                        if sort:
                            self.assertTrue(pd.isna(got.index[-1]), f"{name}: the NA group sorts last")

    def test_category_keys_observed_and_their_na_group(self):
        n = 2000
        df = values_frame(self.rng, n, {"c": self.key_columns(n)["category"], "j": self.rng.integers(0, 3, n)})
        for sort in (True, False):
            frame = df.drop(columns="j")
            if PANDAS_3:  # the quantile of bools is a TypeError
                self.assertSameGroupBy(frame, "c", FUNCS, sort=sort, observed=False)
                frame = frame.drop(columns="b")
            got = self.assertSameGroupBy(frame, "c", FUNCS, sort=sort, observed=False)
            self.assertIn("unused", list(got.index))  # observed=False: every category
            # pandas' default: observed=False before pandas 3, True from it.
            got = self.assertSameGroupBy(frame, "c", FEW, sort=sort)
            self.assertEqual("unused" in list(got.index), not PANDAS_3)
        self.assertSameGroupBy(df, ["j", "c"], FEW)
        self.assertSameGroupBy(df, ["c", "j"], FEW)
        frame = df.drop(columns="j")
        for sort in (True, False):
            got = self.client.groupby(frame, "c", FEW, sort=sort, observed=True)
            want = frame.groupby("c", sort=sort, observed=True).agg(FEW)
            if sort:
                # pandas 1.5 leaves these groups in the order they come;
                # tally sorts them, in the categories' order.
                self.assertTrue((np.diff(got.index.codes) > 0).all())
                want = want.reindex(got.index)
            self.assertSameResult(got, want, f"observed=True, sort={sort}")
        # dropna=False: pandas 1.5 drops the rows whose category is NA even
        # so; tally keeps them as one more group, last, as pandas 2 does.
        frame = df.drop(columns="j")
        got = self.client.groupby(frame, "c", FEW, dropna=False)
        self.assertTrue(pd.isna(got.index[-1]))
        self.assertSameResult(got.iloc[:-1], frame.groupby("c").agg(FEW), "dropna=False, the other groups")
        na_rows = frame[frame.c.isna()].assign(c=0).groupby("c").agg(FEW)
        # (Its columns have the dtypes the unobserved categories give them.)
        pd.testing.assert_frame_equal(got.iloc[-1:].set_axis(na_rows.index), na_rows, check_dtype=False,
                                      check_exact=False, rtol=1e-5, obj="dropna=False, the NA group")

    def test_composite_keys(self):
        n = 5000
        keys = self.key_columns(n)
        df = values_frame(self.rng, n, keys)
        for by in (["int8", "string"], ["float64", "bool"], ["string", "float32", "int32"],
                   ["uint64", "Int64", "float64"]):
            frame = df.drop(columns=[k for k in keys if k not in by])
            for sort in (True, False):
                for dropna in (True, False):
                    self.assertSameGroupBy(frame, by, FEW + ["std", "nunique"], sort=sort, dropna=dropna)
        frame = df.drop(columns=[k for k in keys if k not in ("int8", "string")])
        self.assertSameGroupBy(frame, ["int8", "string"], ["median", "prod", "var", "any"])

    def test_skewed_keys(self):
        n = 200_000
        zipf = np.minimum(self.rng.zipf(1.3, n), 10**6)  # one key holds about a third of the rows
        df = values_frame(self.rng, n, {"k": zipf})
        self.assertGreater(np.bincount(np.unique(zipf, return_inverse=True)[1]).max(), n // 5)
        self.assertSameGroupBy(df, "k", ["sum", "mean", "max", "count", "std", "median", "nunique"])

    def test_one_group(self):
        n = 50_000
        df = values_frame(self.rng, n, {"k": np.full(n, 3, dtype=np.int32)})
        # Products of 50,000 values underflow (to 0 or a subnormal, by the
        # order of the factors): prod in one group of 300.
        self.assertSameGroupBy(df, "k", [f for f in FUNCS if f != "prod"])
        if PANDAS_3:  # the quantile of bools is a TypeError
            self.assertSameGroupBy(df.drop(columns="b"), "k", [f for f in FUNCS if f != "prod"])
        self.assertSameGroupBy(df.iloc[:300], "k", FUNCS, dropna=False)
        self.assertSameGroupBy(df.assign(k=np.nan), "k", FEW, dropna=False)  # every key NA: one group
        self.assertSameGroupBy(df.assign(k=np.nan), "k", FEW)                # ... or none

    def test_200000_groups_in_several_pages(self):
        n = 1_000_000
        df = values_frame(self.rng, n, {"k": self.rng.permutation(n) % 200_000 * 7 - 3})
        df = df[["k", "f64", "i64", "Int64", "b"]]
        pages = []
        read = self.client._group_by_pages

        def counting(request, timeout, metadata):
            answer = read(request, timeout, metadata)
            pages.append(len(answer))
            return answer

        self.client._group_by_pages = counting
        try:
            got = self.assertSameGroupBy(df, "k", ["sum", "mean", "min", "max", "count", "size", "std"])
        finally:
            del self.client._group_by_pages
        self.assertEqual(len(got), 200_000)
        self.assertGreater(pages[0], 1, "the answer came in one message")


class Frames(Base):
    def test_empty_frame(self):
        n = 100
        df = values_frame(self.rng, n, {"k": self.rng.integers(0, 5, n), "s": self.rng.choice(["a", "b"], n)})
        self.assertSameGroupBy(df.drop(columns="s").iloc[:0], "k", FEW + ["std", "median", "any"])
        self.assertSameGroupBy(df.drop(columns="s").iloc[:0], "k", "size")
        self.assertSameGroupBy(df.iloc[:0], ["k", "s"], {"f64": ["sum", "count"]})

    def test_datetime_keys_and_values(self):
        n = 3000
        base = pd.Timestamp("2024-03-01")
        stamps = pd.Series(base + pd.to_timedelta(self.rng.integers(0, 10**15, n), unit="ns"))
        stamps = stamps.where(self.rng.random(n) < 0.9).dt.tz_localize("Europe/Paris", ambiguous="NaT",
                                                                       nonexistent="NaT")
        days = pd.Series(base + pd.to_timedelta(self.rng.integers(0, 20, n), unit="D")).where(self.rng.random(n) < 0.95)
        df = pd.DataFrame({"day": days, "k": self.rng.integers(0, 40, n), "when": stamps,
                           "wait": stamps - stamps.min(), "v": self.rng.uniform(0.5, 1.5, n)})
        for dropna in (True, False):
            self.assertSameGroupBy(df.drop(columns="k"), "day", {"v": ["sum", "max"], "when": ["min", "count"]},
                                   dropna=dropna)  # a datetime key: factorised, labels back
        self.assertSameGroupBy(df.drop(columns="day"), "k", {"when": ["min", "max", "count", "nunique", "size"],
                                                             "wait": ["min", "max"]})
        with self.assertRaises(TypeError) as e:
            self.client.groupby(df, "k", {"when": "mean"})
        self.assertIn("'when'", str(e.exception))

    def test_wide_frame_in_several_requests(self):
        n = 2000  # 20 columns x 4 functions: more than a request's 64 aggregations
        df = pd.DataFrame({f"c{j}": self.rng.uniform(0.5, 1.5, n) for j in range(20)})
        df["k"] = self.rng.integers(0, 100, n)
        self.assertSameGroupBy(df, "k", ["sum", "min", "std", "count"])

    def test_mapping_of_numpy_arrays(self):
        n = 5000
        data = {"k": self.rng.integers(0, 50, n), "s": self.rng.choice(["x", "y", "z"], n),
                "f": np.where(self.rng.random(n) < 0.1, np.nan, self.rng.uniform(0.5, 1.5, n)),
                "i": self.rng.integers(-9, 9, n).astype(np.int16), "b": self.rng.random(n) < 0.5}
        got = self.client.groupby(data, ["k", "s"], {"f": ["sum", "mean", "count", "idxmin"], "i": "max", "b": "sum"},
                                  sort=True)
        want = pd.DataFrame(data).groupby(["k", "s"]).agg({"f": ["sum", "mean", "count", "idxmin"], "i": "max",
                                                           "b": "sum"})
        self.assertEqual(list(got), ["k", "s", ("f", "sum"), ("f", "mean"), ("f", "count"), ("f", "idxmin"),
                                     ("i", "max"), ("b", "sum")])
        np.testing.assert_array_equal(got["k"], want.index.get_level_values(0))
        np.testing.assert_array_equal(got["s"], want.index.get_level_values(1))
        for label in want.columns:
            self.assertIsInstance(got[label], np.ndarray)
            np.testing.assert_allclose(got[label], want[label].to_numpy(dtype=np.float64), rtol=1e-12,
                                       err_msg=str(label))
        self.assertEqual(got[("f", "count")].dtype, np.int64)
        self.assertEqual(got[("i", "max")].dtype, np.int16)  # numpy's dtype for max
        self.assertEqual(got[("b", "sum")].dtype, np.int64)
        sizes = self.client.groupby(data, "k", "size")
        np.testing.assert_array_equal(sizes["size"], np.bincount(data["k"]))

    def test_mapping_needs_no_pandas(self):
        code = ("import sys; sys.modules['pandas'] = None\n"  # import pandas now fails
                "import numpy as np, tally\n"
                f"c = tally.Client({self.target!r}, timeout=60)\n"
                "r = c.groupby({'k': np.array(['b', 'a', 'b']), 'v': np.array([1.0, 2.0, np.nan])}, 'k',\n"
                "              ['sum', 'count', 'idxmax', 'size'])\n"
                "print(repr({str(k): v.tolist() for k, v in r.items()}))\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(eval(out.stdout), {"k": ["a", "b"], "('v', 'sum')": [2.0, 1.0], "('v', 'count')": [1, 1],
                                            "('v', 'idxmax')": [1, 0], "('v', 'size')": [1, 2]})

    def test_bad_input_is_named(self):
        df = pd.DataFrame({"k": [1, 1, 2], "v": [1.0, 2.0, 3.0], "name": ["a", "b", "c"]})
        with self.assertRaises(KeyError) as e:
            self.client.groupby(df, "nope", "sum")
        self.assertIn("nope", str(e.exception))
        with self.assertRaises(KeyError) as e:
            self.client.groupby(df, "k", {"missing": "sum"})
        self.assertIn("missing", str(e.exception))
        with self.assertRaises(TypeError) as e:
            self.client.groupby(df, "k", "sum")  # a string column among the values
        self.assertIn("'name'", str(e.exception))
        wide = pd.DataFrame({f"k{j}": self.rng.integers(0, 2, 10) for j in range(9)}).assign(v=1.0)
        with self.assertRaises(tally.Error) as e:  # the server's limit, named by it
            self.client.groupby(wide, [f"k{j}" for j in range(9)], {"v": "sum"})
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        self.assertIn("keys", e.exception.message)
        self.assertIn("8", e.exception.message)
        eight = self.client.groupby(wide, [f"k{j}" for j in range(8)], {"v": "sum"})
        self.assertEqual(eight["v"].sum(), 10.0)
        with self.assertRaises(ValueError) as e:
            self.client.groupby({"k": np.arange(4), "v": np.ones(3)}, "k", "sum")
        self.assertIn("'v'", str(e.exception))
        self.assertIn("'k'", str(e.exception))


class SharedColumns(Base):
    """A mapping's SharedArray columns (Client.share) go as region columns,
    read by the server in place, and answer what the same numpy arrays sent
    inline answer, bit for bit."""

    def setUp(self):
        super().setUp()
        self.record_requests()

    def queries(self):
        """Each region's reads so far, as ListRegions counts them."""
        return {r.name: r.queries for r in self.client.list_regions()}

    def assertSameAnswer(self, got, want, msg):
        """Every result column of the same dtype and values (NaN where the
        inline answer has NaN)."""
        self.assertEqual(list(got), list(want), msg)
        for label in want:
            self.assertEqual(got[label].dtype, want[label].dtype, f"{msg}: {label!r}")
            np.testing.assert_array_equal(got[label], want[label], err_msg=f"{msg}: {label!r}")

    def groupby_both_ways(self, arrays, shared, by, agg, msg, **kwargs):
        """groupby of ``arrays`` with the columns named in ``shared`` as
        SharedArrays, and of the arrays themselves: the answers are the same,
        each SharedArray went as its region (no data) in every request and
        was read by the server once per column naming it, and every other
        column went inline. Returns the answer and the requests sent."""
        with contextlib.ExitStack() as stack:
            shares = {label: stack.enter_context(self.client.share(arrays[label])) for label in shared}
            before = self.queries()
            self.requests.clear()
            got = self.client.groupby({c: shares.get(c, a) for c, a in arrays.items()}, by, agg, **kwargs)
            requests = list(self.requests)
            after = self.queries()
        want = self.client.groupby(arrays, by, agg, **kwargs)
        self.assertSameAnswer(got, want, msg)
        n = len(next(iter(arrays.values())))
        reads = {s.region: 0 for s in shares.values()}
        for request in requests:
            for c in request.columns:
                label = next((label for label in arrays if str(label) == c.name), None)
                if label in shares:
                    self.assertTrue(c.HasField("region"), f"{msg}: column {c.name} was sent inline")
                    self.assertEqual((c.region.name, c.region.offset, c.region.length, c.data),
                                     (shares[label].region, 0, n, b""), f"{msg}: column {c.name}")
                    reads[c.region.name] += 1
                else:
                    self.assertFalse(c.HasField("region"), f"{msg}: column {c.name}")
                    self.assertGreaterEqual(len(c.data), n, f"{msg}: column {c.name}")
        for s in shares.values():
            self.assertGreater(reads[s.region], 0, f"{msg}: region of {s.region} not sent")
            self.assertEqual(after[s.region] - before[s.region], reads[s.region], f"{msg}: the server's reads")
        return got, requests

    def test_region_columns_alone(self):
        n = 30_000
        arrays = mixed_columns(self.rng, n)
        for sort in (True, False):
            for agg in (FEW, FUNCS + INDEX_FUNCS):  # the second in two requests (over 64 aggregations)
                _, requests = self.groupby_both_ways(arrays, list(arrays), "k", agg, f"sort={sort}, agg={agg}",
                                                     sort=sort)
                # Keys and values by reference: at most masks of the float
                # columns' non-NaN rows (for prod, any, all, idxmin and
                # idxmax), a bit a row, where inline the key alone is 4 bytes.
                for r in requests:
                    self.assertLess(r.ByteSize(), n // 2, f"sort={sort}, agg={agg}")
        self.assertEqual(len(requests), 2)
        got, _ = self.groupby_both_ways(arrays, ["k"], "k", "size", "size")
        np.testing.assert_array_equal(got["size"], np.bincount(arrays["k"] + 40))

    def test_region_columns_beside_inline_ones(self):
        n = 20_000
        f32 = self.rng.uniform(0.5, 1.5, n).astype(np.float32)
        f32[self.rng.random(n) < 0.05] = np.nan
        keyf = self.rng.integers(-4, 5, n) / 2
        keyf[self.rng.random(n) < 0.05] = np.nan
        keyf[self.rng.random(n) < 0.05] = -0.0
        arrays = {"k": self.rng.integers(0, 30, n), "s": self.rng.choice(["x", "y", "z"], n), "f32": f32,
                  "i64": self.rng.integers(-50, 50, n), "bk": self.rng.random(n) < 0.5, "fk": keyf,
                  "u8": self.rng.integers(0, 3, n).astype(np.uint8)}
        agg = {"f32": ["sum", "mean", "max", "std"], "i64": ["sum", "min", "nunique"], "u8": ["max", "prod"]}
        # A shared key beside a string key (factorised here, sent inline as
        # codes), shared values beside inline ones, and the other way round.
        self.groupby_both_ways(arrays, ["k", "f32"], ["k", "s"], agg, "shared k and f32")
        self.groupby_both_ways(arrays, ["i64", "u8"], ["k", "s"], agg, "shared i64 and u8")
        for dropna in (True, False):
            self.groupby_both_ways(arrays, ["bk", "fk", "i64"], ["bk", "fk"], agg, f"bool and float keys, "
                                   f"dropna={dropna}", dropna=dropna, sort=False)
        # One SharedArray as the key and as a value column.
        with self.client.share(arrays["k"]) as shared:
            got = self.client.groupby({"k": shared, "v": shared}, "k", ["sum", "count"])
        want = self.client.groupby({"k": arrays["k"], "v": arrays["k"]}, "k", ["sum", "count"])
        self.assertSameAnswer(got, want, "one SharedArray twice")
        self.assertEqual([c.region.name for c in self.requests[-2].columns], [shared.region] * 2)

    def test_float_values_skip_nan_as_pandas(self):
        n = 25_000
        k = self.rng.integers(0, 80, n)
        arrays = {"k": k}
        for dtype, frac in ((np.float64, 0.2), (np.float32, 0.05)):
            v = self.rng.uniform(0.5, 1.5, n).astype(dtype)
            v[self.rng.random(n) < frac] = np.nan
            v[k == 7] = np.nan  # a group of NaN alone
            arrays[np.dtype(dtype).name] = v
        funcs = ["sum", "mean", "count", "min", "std", "median"]
        got, requests = self.groupby_both_ways(arrays, list(arrays), "k", funcs, "nan-skipping")
        for c in requests[0].columns:  # nansum, nanmean, ...: no mask needed
            self.assertEqual(c.validity, b"", c.name)
        want = pd.DataFrame(arrays).groupby("k").agg(funcs)
        np.testing.assert_array_equal(got["k"], want.index)
        for label in want.columns:
            rtol = 1e-5 if label[0] == "float32" else 1e-12
            np.testing.assert_allclose(got[label], want[label].to_numpy(dtype=np.float64), rtol=rtol,
                                       err_msg=str(label))
        self.assertTrue(np.isnan(got[("float64", "mean")][7]))
        self.assertEqual(got[("float64", "sum")][7], 0.0)
        # prod has no NaN-skipping op: the region goes with a mask of the
        # non-NaN rows, computed from the shared memory.
        got, requests = self.groupby_both_ways(arrays, list(arrays), "k", ["prod", "idxmax"], "masked")
        masked = {c.name: c for c in requests[0].columns}
        for name in ("float64", "float32"):
            want = np.packbits(~np.isnan(arrays[name]), bitorder="little").tobytes()
            self.assertEqual(masked[name].validity, want, name)

    def test_bad_shared_columns_are_named(self):
        n = 12
        with self.client.share(np.ones((3, 4))) as rows, self.client.share(np.arange(n)) as keys:
            for data, name in (({"k": keys, "v": rows}, "'v'"), ({"k": rows, "v": np.ones(n)}, "'k'")):
                with self.assertRaises(ValueError) as e:
                    self.client.groupby(data, "k", "sum")
                self.assertIn(name, str(e.exception))
                self.assertIn("rows", str(e.exception))
            with self.assertRaises(ValueError) as e:
                self.client.groupby({"k": keys, "v": np.ones(n + 1)}, "k", "sum")
            self.assertIn("'v'", str(e.exception))
            self.assertIn("'k'", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.client.groupby({"k": keys, "v": np.ones(n)}, "k", "sum")
        self.assertIn("'k'", str(e.exception))
        self.assertIn("closed", str(e.exception))

    def test_views_outlive_close_and_failed_calls(self):
        x = self.rng.integers(0, 5, 1000)
        with self.assertRaises(tally.Error) as e:
            with self.client.share(x) as shared:
                view = shared.values
                self.assertFalse(view.flags.writeable)
                np.testing.assert_array_equal(view, x)
                # Refused by the server (9 keys); its traceback holds views
                # of the memory while the with block closes it.
                self.client.groupby({f"k{j}": shared for j in range(9)}, [f"k{j}" for j in range(9)], "size")
        self.assertEqual(e.exception.code.name, "INVALID_ARGUMENT")
        self.assertNotIn(shared.region, self.queries())
        self.assertFalse(os.path.exists("/dev/shm/" + shared.region))
        np.testing.assert_array_equal(view, x)  # still mapped, until the view goes
        with self.assertRaises(ValueError):
            view[0] = 1
        with self.assertRaises(ValueError):
            shared.values


class DatasetColumns(Base):
    """A mapping's resident datasets (the DatasetInfo put_dataset gives) go
    by name (Column.dataset), read where they lie, and answer what the same
    numpy arrays sent inline answer, bit for bit."""

    def setUp(self):
        super().setUp()
        self.record_requests()

    def put(self, arrays, names):
        """The arrays named in ``names`` as datasets (DatasetInfo), the rest as they are."""
        out = {}
        for label, a in arrays.items():
            if label in names:
                name = f"{self.id().rsplit('.', 1)[-1]}-{label}"
                out[label] = self.client.put_dataset(name, a, replace=True)
                self.addCleanup(self.delete, name)
            else:
                out[label] = a
        return out

    def delete(self, name):
        try:
            self.client.delete_dataset(name)
        except tally.Error as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise

    def test_nlargest_of_datasets(self):
        """groupby_nlargest and nsmallest of resident columns: by name where
        the server's topk or bottomk answers as they lie (integers, and a
        float column's nsmallest); a float column's nlargest, which negates
        the values on the client, is a ValueError naming the column."""
        n = 5000
        arrays = {"k": self.rng.integers(0, 50, n).astype(np.int32),
                  "i": self.rng.integers(-9, 9, n).astype(np.int64),
                  "f": np.where(self.rng.random(n) < 0.1, np.nan, self.rng.integers(-9, 9, n).astype(np.float64))}
        columns = self.put(arrays, ["k", "i", "f"])
        for method, column in (("groupby_nlargest", "i"), ("groupby_nsmallest", "i"), ("groupby_nsmallest", "f")):
            got = getattr(self.client, method)(columns, "k", column, 3)
            want = getattr(self.client, method)(arrays, "k", column, 3)
            self.assertEqual(list(got), list(want), method)
            for label in want:
                np.testing.assert_array_equal(got[label], want[label], err_msg=f"{method} {column}: {label}")
        with self.assertRaisesRegex(ValueError, "column 'f' is shared or resident"):
            self.client.groupby_nlargest(columns, "k", "f", 3)

    def test_dataset_columns_answer_as_the_arrays(self):
        n = 30_000
        arrays = mixed_columns(self.rng, n)
        arrays["s"] = self.rng.choice(["x", "y"], n)
        unmasked = [f for f in FUNCS if f not in ("prod", "any", "all")]  # a float column's need a mask
        agg = {"f64": unmasked, "f32": FEW + ["std", "median"], "i16": FUNCS + INDEX_FUNCS, "u64": ["sum", "max"],
               "b": ["sum", "mean", "any"]}
        for names, by in ((list(arrays), "k"), (["k", "i16"], ["k", "s"]), (["f64", "u64"], ["s", "b"])):
            for sort in (True, False):
                msg = f"datasets {names}, by {by!r}, sort={sort}"
                columns = self.put(arrays, [x for x in names if x != "s"])
                self.requests.clear()
                got = self.client.groupby(columns, by, agg, sort=sort)
                requests = list(self.requests)
                want = self.client.groupby(arrays, by, agg, sort=sort)
                self.assertEqual(list(got), list(want), msg)
                for label in want:
                    self.assertEqual(got[label].dtype, want[label].dtype, f"{msg}: {label!r}")
                    np.testing.assert_array_equal(got[label], want[label], err_msg=f"{msg}: {label!r}")
                for r in requests:
                    for c in r.columns:
                        label = next((x for x in arrays if str(x) == c.name), None)
                        if isinstance(columns.get(label), tally.DatasetInfo):
                            self.assertEqual((c.dataset, c.data, c.HasField("region")),
                                             (columns[label].name, b"", False), f"{msg}: column {c.name}")
                        else:
                            self.assertEqual(c.dataset, "", f"{msg}: column {c.name}")

    def test_what_needs_the_values_on_the_client_is_refused_by_name(self):
        n = 1000
        f = self.rng.uniform(0, 1, n)
        columns = self.put({"k": self.rng.integers(0, 5, n), "f": f, "rows": np.ones((10, 100)),
                            "short": np.arange(n - 1)}, ["k", "f", "rows", "short"])
        with self.assertRaisesRegex(ValueError, "column 'f' is the dataset .*'prod'.*Client.share"):
            self.client.groupby(columns, "k", {"f": ["sum", "prod"]})
        with self.assertRaisesRegex(ValueError, "column 'f' is the dataset .*'idxmax'"):
            self.client.groupby(columns, "k", {"f": "idxmax"})
        with self.assertRaisesRegex(ValueError, "column 'rows': the dataset .* holds rows"):
            self.client.groupby(columns, "k", {"rows": "sum"})
        with self.assertRaisesRegex(ValueError, "column 'short' has 999 rows"):
            self.client.groupby(columns, "k", {"short": "sum"})
        self.client.delete_dataset(columns["k"].name)
        with self.assertRaises(tally.Error) as e:  # the server names what is gone
            self.client.groupby(columns, "k", {"f": "sum"})
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn(columns["k"].name, e.exception.message)
        got = self.client.groupby({"k": np.arange(n) % 5, "f": columns["f"]}, "k", {"f": "sum"})  # the rest answers
        np.testing.assert_array_equal(got["f"], [math.fsum(f[i::5]) for i in range(5)])  # correctly rounded


class PackedFrames(Base):
    """A table of at least stream_threshold bytes, for a server on this
    host, goes through one shared-memory region made for the call (the
    client's shared_memory=None): every column a region column of it, the
    answers those of the same table sent inline, and nothing left behind;
    a server that cannot open the object gets the table inline."""

    def client_with(self, **kwargs):
        c = tally.Client(self.target, timeout=60, **kwargs)
        self.addCleanup(c.close)
        requests = []
        read = c._group_by_pages

        def recording(request, timeout, metadata):
            requests.append(request)
            return read(request, timeout, metadata)

        c._group_by_pages = recording
        return c, requests

    def test_a_large_table_goes_as_one_region_and_answers_as_inline(self):
        n = 6_000
        df = values_frame(self.rng, n, {"k": self.rng.integers(-20, 20, n), "s": self.rng.choice(["x", "y", None], n)})
        inline, inline_requests = self.client_with(shared_memory=False)
        packed, packed_requests = self.client_with(stream_threshold=0)
        for by, agg in ((["k"], FUNCS), (["k", "s"], FEW), ("s", "size")):
            frame = df if "s" in by else df.drop(columns="s")
            if agg is FUNCS and PANDAS_3:
                frame = frame.drop(columns="b")  # pandas 3 refuses the quantile of bools
            inline_requests.clear()
            packed_requests.clear()
            want = inline.groupby(frame, by, agg, dropna=False)
            got = packed.groupby(frame, by, agg, dropna=False)
            self.assertSameResult(got, want, f"by={by}, agg={agg}")
            self.assertSameResult(got, frame.groupby(by, dropna=False).agg(agg), f"by={by}, agg={agg}, pandas")
            self.assertTrue(packed._server_reads_shm)
            self.assertEqual(len(packed_requests), len(inline_requests))
            regions = set()
            for r in packed_requests:
                for c in r.columns:
                    self.assertTrue(c.HasField("region"), f"by={by}: column {c.name} went inline")
                    self.assertEqual(c.data, b"")
                    self.assertEqual(c.region.offset % 64, 0)
                    regions.add(c.region.name)
            self.assertEqual(len(regions), 1, f"by={by}: one region for the call")
            for r in inline_requests:
                self.assertFalse(any(c.HasField("region") for c in r.columns))
            # Unregistered and removed once the call is over.
            self.assertNotIn(regions.pop(), {r.name for r in packed.list_regions()})
        self.assertEqual([r for r in os.listdir("/dev/shm") if r in {c.region.name for r in packed_requests
                                                                     for c in r.columns}], [])

    def test_a_small_table_or_a_remote_server_goes_inline(self):
        n = 1_000
        arrays = {"k": self.rng.integers(0, 5, n), "v": self.rng.random(n)}
        small, requests = self.client_with()  # 16 KB, under the default 4 MiB
        small.groupby(arrays, "k", "sum")
        self.assertFalse(any(c.HasField("region") for r in requests for c in r.columns))
        from tally.client import _is_local_target
        for target in ("localhost:50051", "127.0.0.1:1", "127.3.2.1:50051", "[::1]:50051", "ipv4:127.0.0.1:5",
                       "dns:///localhost:50051", "unix:/run/tally.sock", "unix:///run/tally.sock", "LOCALHOST:9"):
            self.assertTrue(_is_local_target(target), target)
        for target in ("tally:50051", "10.0.0.7:50051", "dns:///tally.svc:50051", "[2001:db8::1]:50051",
                       "localhost.example.com:1", "128.0.0.1:50051"):
            self.assertFalse(_is_local_target(target), target)

    def test_a_server_that_cannot_open_the_object_gets_the_table_inline(self):
        n = 2_000
        arrays = {"k": self.rng.integers(0, 7, n), "v": self.rng.random(n)}
        want = self.client.groupby(arrays, "k", ["sum", "max"])
        c, requests = self.client_with(stream_threshold=0)
        tries = []

        def not_found(name, shm_name, byte_size, **kwargs):
            tries.append(name)
            raise tally.Error(grpc.StatusCode.NOT_FOUND, f"shm_name: cannot open shared-memory object '{shm_name}'")

        c.register_host_region = not_found
        for _ in range(2):
            got = c.groupby(arrays, "k", ["sum", "max"])
            for label in want:
                np.testing.assert_array_equal(got[label], want[label], err_msg=label)
        self.assertEqual(len(tries), 1, "tried once, then inline for the client's life")
        self.assertFalse(c._server_reads_shm)
        self.assertFalse(any(col.HasField("region") for r in requests for col in r.columns))
        self.assertFalse(os.path.exists("/dev/shm/" + tries[0]), "the object made for it is removed")
        # Asked for by name (shared_memory=True), the server's error is raised.
        strict, _ = self.client_with(stream_threshold=0, shared_memory=True)
        strict.register_host_region = not_found
        with self.assertRaises(tally.Error) as e:
            strict.groupby(arrays, "k", "sum")
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)
        # A refusal of this call only (a quota): inline this once, tried again next time.
        busy, _ = self.client_with(stream_threshold=0)
        busy_tries = []

        def exhausted(name, shm_name, byte_size, **kwargs):
            busy_tries.append(name)
            raise tally.Error(grpc.StatusCode.RESOURCE_EXHAUSTED, "regions: over --max_region_bytes")

        busy.register_host_region = exhausted
        busy.groupby(arrays, "k", "sum")
        busy.groupby(arrays, "k", "sum")
        self.assertEqual(len(busy_tries), 2)


class StreamedFrames(Base):
    """Columns sent with the request that come to at least stream_threshold
    bytes go in chunks of chunk_bytes (GroupByStream): the answers those of
    the same table in one message, bit for bit, whatever the chunking; a
    table past the server's message limit answers as pandas does."""

    def client_with(self, target=None, **kwargs):
        c = tally.Client(target or self.target, timeout=60, shared_memory=False, **kwargs)
        self.addCleanup(c.close)
        streams = []
        send = c._group_by_stream_pages

        def recording(request, timeout, metadata, **kw):
            streams.append(request)
            return send(request, timeout, metadata, **kw)

        c._group_by_stream_pages = recording
        return c, streams

    def test_any_chunking_answers_as_one_message(self):
        n = 5_000
        df = values_frame(self.rng, n, {"k": self.rng.integers(-20, 20, n), "s": self.rng.choice(["x", "y", None], n)})
        one = tally.Client(self.target, timeout=60, shared_memory=False)
        self.addCleanup(one.close)
        for chunk_bytes in (7, 1000, 4 * 2**20):
            streamed, streams = self.client_with(stream_threshold=0, chunk_bytes=chunk_bytes)
            for by, agg in ((["k"], FUNCS), (["k", "s"], FEW), ("s", "size")):
                frame = df if "s" in by else df.drop(columns="s")
                if agg is FUNCS and PANDAS_3:
                    frame = frame.drop(columns="b")  # pandas 3 refuses the quantile of bools
                streams.clear()
                want = one.groupby(frame, by, agg, dropna=False)
                got = streamed.groupby(frame, by, agg, dropna=False)
                msg = f"by={by}, agg={agg}, chunks of {chunk_bytes} bytes"
                self.assertTrue(streams, msg)
                same = pd.testing.assert_series_equal if isinstance(want, pd.Series) else pd.testing.assert_frame_equal
                same(got, want, check_exact=True, obj=msg)  # bit for bit
                self.assertSameResult(got, frame.groupby(by, dropna=False).agg(agg), f"{msg}, pandas")

    def test_chunk_messages_written_by_hand_parse_as_protobuf_writes_them(self):
        from tally import _wire
        for column, validity, n in ((0, 0, 0), (3, 1, 5), (200, 0, 300), (1, 1, 70_000)):
            data = memoryview(self.rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            raw = _wire.chunk_message(data, 2, ((3, column), (4, validity)))
            want = tally_pb2.GroupByStreamRequest(column=column, validity=bool(validity), chunk=bytes(data))
            self.assertEqual(tally_pb2.GroupByStreamRequest.FromString(raw), want, (column, validity, n))

    def test_a_small_table_goes_in_one_message(self):
        c, streams = self.client_with()
        c.groupby({"k": np.arange(1000) % 3, "v": np.ones(1000)}, "k", "sum")
        self.assertEqual(streams, [])

    def test_a_table_past_the_message_limit_answers(self):
        server = TallyServer(SERVER_BINARY, tally_pb2, [f"--backend={BACKEND}", "--max_message_bytes=1048576"])
        self.addCleanup(server.stop)
        # 19.6 MB of columns, past 17 MiB: the transport's limit for a 1 MiB
        # --max_message_bytes (16 MiB over it, for a request's other fields).
        n = 1_400_000
        df = pd.DataFrame({"k": self.rng.integers(0, 1000, n).astype(np.int32), "v": self.rng.random(n),
                           "i": pd.array(self.rng.integers(-5, 5, n), dtype="Int16")})
        df.loc[self.rng.random(n) < 0.1, "i"] = pd.NA
        agg = {"v": ["sum", "mean", "max", "median"], "i": ["sum", "count"]}
        one, _ = self.client_with(f"127.0.0.1:{server.port}", stream_threshold=2**40)
        with self.assertRaises(tally.Error) as e:
            one.groupby(df, "k", agg)
        self.assertEqual(e.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        streamed, streams = self.client_with(f"127.0.0.1:{server.port}")
        got = streamed.groupby(df, "k", agg)
        self.assertEqual(len(streams), 1)
        self.assertSameResult(got, df.groupby("k").agg(agg), "streamed past the limit")


    def test_a_frame_past_the_servers_budget_is_grouped_in_parts(self):
        server = TallyServer(SERVER_BINARY, tally_pb2, [f"--backend={BACKEND}", "--max_inflight_bytes=1048576"])
        self.addCleanup(server.stop)
        n = 120_000  # about 5 MB held while grouped: past the 1 MiB budget, refused at the header
        df = pd.DataFrame({"k": self.rng.integers(0, 300, n), "s": self.rng.choice(["a", "b", None], n),
                           "v": self.rng.random(n), "i": pd.array(self.rng.integers(0, 9, n), dtype="Int64")})
        df.loc[self.rng.random(n) < 0.1, "v"] = np.nan
        c, streams = self.client_with(f"127.0.0.1:{server.port}", stream_threshold=0)
        # median's and nunique's partial states merge through the native
        # module (tally._states); a client without it merges the others.
        holistic = ["median", "nunique"] if native_states() else []
        agg = {"v": ["sum", "mean", "std", "min", "count", "idxmax"] + holistic[:1],
               "i": ["sum", "max"] + holistic[1:]}
        for by, kwargs in ((["k", "s"], {"dropna": False}), ("k", {"sort": False})):
            streams.clear()
            got = c.groupby(df, by, agg, **kwargs)
            self.assertGreater(len(streams), 2, "refused whole, then sent in parts")
            self.assertSameResult(got, df.groupby(by, **kwargs).agg(agg), f"by={by}, {kwargs}")
        # Named aggregations and mappings are not cut: the server's refusal stands.
        with self.assertRaises(tally.Error) as e:
            c.groupby(df, "k", total=("v", "sum"))
        self.assertEqual(e.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("--max_inflight_bytes", e.exception.message)


class ValuesAsBytes(Base):
    def test_the_same_numbers_as_the_repeated_values(self):
        """Aggregation.values_as_bytes: every number of the answer in its
        Values message's data bytes (values empty), the same numbers the
        repeated values hold without it (data empty), on every page;
        top-k's indices and lengths too."""
        pb = tally_pb2
        k = self.rng.integers(-3, 40, 5000).astype(np.int32)
        v = self.rng.standard_normal(5000)
        group_by = self.server.channel.unary_stream("/tally.v1.Aggregator/GroupBy",
                                                   request_serializer=pb.GroupByRequest.SerializeToString,
                                                   response_deserializer=pb.GroupByResponse.FromString)
        columns = [pb.Column(name="k", dtype=pb.DTYPE_INT32, data=k.tobytes()),
                   pb.Column(name="v", dtype=pb.DTYPE_FLOAT64, data=v.tobytes())]
        answers = {}
        for as_bytes in (False, True):
            ops = [("v", pb.Aggregation(op=pb.OP_SUM)), ("v", pb.Aggregation(op=pb.OP_COUNT)),
                   ("v", pb.Aggregation(op=pb.OP_TOPK, k=3)), ("k", pb.Aggregation(op=pb.OP_MIN))]
            for _, a in ops:
                a.values_as_bytes = as_bytes
            aggs = [pb.GroupAggregation(column=c, aggregation=a) for c, a in ops]
            request = pb.GroupByRequest(columns=columns, keys=["k"], aggregations=aggs, groups_per_message=7)
            pages = list(group_by(request, timeout=60))
            self.assertGreater(len(pages), 1)
            numbers = []
            for page in pages:
                for r in page.results:
                    kind = r.WhichOneof("values")
                    fields = [(getattr(r, kind), {"doubles": np.float64, "int64s": np.int64,
                                                  "uint64s": np.uint64}[kind])]
                    if r.HasField("indices"):
                        fields += [(r.indices, np.int64), (r.lengths, np.uint64)]
                    for message, dtype in fields:
                        if as_bytes:
                            self.assertEqual(len(message.values), 0)
                            self.assertGreater(len(message.data), 0)
                            numbers.append(np.frombuffer(message.data, dtype=np.dtype(dtype).newbyteorder("<")))
                        else:
                            self.assertEqual(len(message.data), 0)
                            numbers.append(np.array(message.values, dtype=dtype))
            answers[as_bytes] = numbers
        self.assertEqual(len(answers[False]), len(answers[True]))
        for a, b in zip(answers[False], answers[True]):
            np.testing.assert_array_equal(a, b)
        # The Python client asks for bytes, and reads them as numpy does.
        self.record_requests()
        self.assertSameGroupBy(pd.DataFrame({"k": k, "v": v}), "k", {"v": ["sum", "count", "min"]}, msg="values as bytes")
        self.assertTrue(all(a.aggregation.values_as_bytes for r in self.requests for a in r.aggregations))


class ShardedDatasetsUnderLoad(unittest.TestCase):
    """Many group-bys at once over resident datasets cut into shards, whose
    pieces the server copies together into one column: the copies are
    admitted before they are made, so the server's memory stays within
    --max_inflight_bytes however many requests wait, and every answer is
    numpy's."""

    BUDGET = 256 << 20  # two requests at a time
    ROWS = 1 << 22      # 16 MiB of keys and 32 MiB of values, copied, and 80 MiB of working memory a request

    def test_the_copies_of_sharded_columns_wait_for_admission(self):
        pb = tally_pb2
        server = TallyServer(SERVER_BINARY, pb, [f"--backend={BACKEND}", "--health_listen=", "--dataset_shards=4",
                                                 "--dataset_min_shard_bytes=1048576",
                                                 f"--max_inflight_bytes={self.BUDGET}", "--admission_wait_ms=60000"])
        try:
            rng = np.random.default_rng(SEED)
            k = rng.integers(0, 1000, self.ROWS, dtype=np.int32)
            v = rng.standard_normal(self.ROWS)
            for name, x, dtype in (("k", k, pb.DTYPE_INT32), ("v", v, pb.DTYPE_FLOAT64)):
                data = x.tobytes()
                header = pb.PutDatasetRequest(header=pb.PutDatasetRequest.Header(
                    name=name, spec=pb.ArraySpec(dtype=dtype, length=len(x))))
                server.put_dataset(iter([header] + [pb.PutDatasetRequest(chunk=data[at:at + (8 << 20)])
                                                    for at in range(0, len(data), 8 << 20)]), timeout=120)
            group_by = server.channel.unary_stream("/tally.v1.Aggregator/GroupBy",
                                                  request_serializer=pb.GroupByRequest.SerializeToString,
                                                  response_deserializer=pb.GroupByResponse.FromString)
            request = pb.GroupByRequest(
                columns=[pb.Column(name="k", dataset="k"), pb.Column(name="v", dataset="v")], keys=["k"],
                aggregations=[pb.GroupAggregation(column="v", aggregation=pb.Aggregation(op=pb.OP_SUM)),
                              pb.GroupAggregation(column="v", aggregation=pb.Aggregation(op=pb.OP_COUNT))])
            keys, inverse = np.unique(k, return_inverse=True)
            want_sum = np.bincount(inverse, weights=v)
            want_count = np.bincount(inverse)
            baseline = rss_bytes(server.process.pid)
            peak, done, errors = [baseline], threading.Event(), []

            def watch():
                while not done.is_set():
                    peak[0] = max(peak[0], rss_bytes(server.process.pid))
                    time.sleep(0.005)

            def client():
                try:
                    for _ in range(2):
                        pages = list(group_by(request, timeout=300))
                        got_keys = np.concatenate([np.frombuffer(p.keys[0].data, np.int32) for p in pages])
                        got_sum = np.concatenate([np.array(p.results[0].doubles.values) for p in pages])
                        got_count = np.concatenate([np.array(p.results[1].uint64s.values if p.results[1].HasField("uint64s")
                                                       else p.results[1].int64s.values) for p in pages])
                        np.testing.assert_array_equal(got_keys, keys)
                        np.testing.assert_array_equal(got_count, want_count)
                        np.testing.assert_allclose(got_sum, want_sum, rtol=1e-12, atol=1e-9)
                except Exception as e:  # noqa: BLE001 (reported below, on the test's thread)
                    errors.append(repr(e))

            watcher = threading.Thread(target=watch)
            watcher.start()
            clients = [threading.Thread(target=client) for _ in range(16)]
            for c in clients:
                c.start()
            for c in clients:
                c.join()
            done.set()
            watcher.join()
            self.assertEqual(errors, [])
            # 16 requests copying 48 MiB each before admission held 768 MiB
            # and more; admitted first, the copies and working memory of
            # the admitted ones (the budget) and allocator slack.
            grown = peak[0] - baseline
            print(f"16 group-bys over sharded datasets: the server grew by {grown >> 20} MiB", flush=True)
            self.assertLess(grown, self.BUDGET + (128 << 20),
                            f"the server grew by {grown >> 20} MiB over a {self.BUDGET >> 20} MiB budget")
        finally:
            server.stop()


class Extremes(Base):
    """Client.groupby_nlargest and groupby_nsmallest against pandas'
    SeriesGroupBy.nlargest and nsmallest: the n largest (smallest) numbers
    of each group, ties to the earlier row, then NaN rows in row order
    where a group has fewer numbers than n."""

    def frame(self, n):
        k = self.rng.integers(0, 40, n)
        df = pd.DataFrame({
            "k": k,
            "kf": np.where(self.rng.random(n) < 0.05, np.nan, k.astype(np.float64)),  # NaN keys
            "j": self.rng.integers(-2, 3, n).astype(np.int16),
            "f64": self.rng.integers(-6, 6, n).astype(np.float64),  # ties
            "f32": self.rng.standard_normal(n).astype(np.float32),
            "i32": self.rng.integers(-5, 5, n).astype(np.int32),
            "u8": self.rng.integers(0, 255, n).astype(np.uint8),
        })
        df.loc[self.rng.random(n) < 0.15, "f64"] = np.nan  # some groups have fewer numbers than n
        df.loc[self.rng.random(n) < 0.02, "f64"] = -0.0
        df.loc[self.rng.random(n) < 0.05, "f32"] = np.nan
        df.index = pd.Index(self.rng.permutation(n) * 3 + 7, name="row")  # labels, not positions
        return df

    def test_every_group_as_pandas(self):
        df = self.frame(3000)
        for by in ("k", "kf", ["k", "j"]):
            for column in ("f64", "f32", "i32", "u8"):
                for n in (1, 2, 7, 500):
                    for sort, dropna in ((True, True), (False, True), (True, False)):
                        for name in ("nlargest", "nsmallest"):
                            msg = f"groupby({by!r}, sort={sort}, dropna={dropna})[{column!r}].{name}({n})"
                            want = getattr(df.groupby(by, sort=sort, dropna=dropna)[column], name)(n)
                            got = getattr(self.client, "groupby_" + name)(df, by, column, n, sort=sort, dropna=dropna)
                            if n < 500:
                                pd.testing.assert_series_equal(got, want, check_exact=True, obj=msg)
                                continue
                            # n past every group's size: pandas sorts each
                            # group whole by an unstable sort (quicksort),
                            # so its ties come in no set order; tally's keep
                            # the earlier row first. The same values, and the
                            # same rows in each run of equal ones.
                            pd.testing.assert_series_equal(got, want, check_exact=True, check_index=False, obj=msg)
                            pd.testing.assert_index_equal(got.index.droplevel(-1), want.index.droplevel(-1),
                                                          obj=msg)
                            def runs(s):  # each entry's group and value, comparable (NaN as text)
                                return [(repr(i[:-1]), v) for i, v in zip(s.index, s.fillna(np.inf))]

                            self.assertEqual(sorted(zip(runs(got), got.index.get_level_values(-1))),
                                             sorted(zip(runs(want), want.index.get_level_values(-1))), msg)
                            # Within a run, tally's rows ascend.
                            positions = df.index.get_indexer(got.index.get_level_values(-1))
                            got_runs = runs(got)
                            for a in range(1, len(got)):
                                if got_runs[a] == got_runs[a - 1]:
                                    self.assertLess(positions[a - 1], positions[a], msg)

    def test_signed_zeros_and_nan_keep_their_bits_and_rows(self):
        df = pd.DataFrame({"k": [1, 1, 1, 1, 2, 2], "v": [0.0, -0.0, np.nan, 0.0, np.nan, np.nan]})
        for name in ("nlargest", "nsmallest"):
            want = getattr(df.groupby("k")["v"], name)(3)
            got = getattr(self.client, "groupby_" + name)(df, "k", "v", 3)
            pd.testing.assert_series_equal(got, want, check_exact=True, obj=name)
            np.testing.assert_array_equal(np.signbit(got.to_numpy()), np.signbit(want.to_numpy()), err_msg=name)

    def test_an_index_of_several_levels_and_the_key_as_the_column(self):
        df = self.frame(600)
        df.index = pd.MultiIndex.from_arrays([df.index, df.index % 7], names=["row", "mod"])
        for column in ("f64", "k"):
            want = df.groupby("k")[column].nlargest(4)
            got = self.client.groupby_nlargest(df, "k", column, 4)
            pd.testing.assert_series_equal(got, want, check_exact=True, obj=column)

    def test_a_mapping_answers_keys_rows_and_values(self):
        df = self.frame(500)
        got = self.client.groupby_nlargest({"k": df["k"].to_numpy(), "f64": df["f64"].to_numpy()}, "k", "f64", 3)
        want = df.reset_index(drop=True).groupby("k")["f64"].nlargest(3)
        np.testing.assert_array_equal(got["k"], want.index.get_level_values(0))
        np.testing.assert_array_equal(got["row"], want.index.get_level_values(1))
        np.testing.assert_array_equal(got["f64"], want.to_numpy())
        self.assertEqual(got["f64"].dtype, np.float64)

    def test_no_rows_or_n_of_zero_answer_nothing(self):
        df = self.frame(100)
        for frame, n in ((df, 0), (df.iloc[:0], 3)):
            got = self.client.groupby_nsmallest(frame, "k", "i32", n)
            self.assertEqual(len(got), 0)
            self.assertEqual(got.dtype, np.int32)
            self.assertEqual(list(got.index.names), ["k", "row"])

    def test_bad_arguments_name_what_is_wrong(self):
        df = self.frame(100)
        df["b"] = df["i32"] > 0
        df["na"] = pd.array(df["i32"], dtype="Int64")
        with self.assertRaisesRegex(ValueError, "n must be 0 or more"):
            self.client.groupby_nlargest(df, "k", "f64", -1)
        with self.assertRaisesRegex(TypeError, "n is an int"):
            self.client.groupby_nlargest(df, "k", "f64", 2.5)
        for column in ("b", "na"):
            with self.assertRaisesRegex(TypeError, f"column {column!r}"):
                self.client.groupby_nsmallest(df, "k", column, 2)
        with self.assertRaisesRegex(KeyError, "no column 'nope'"):
            self.client.groupby_nlargest(df, "k", "nope", 2)
        with self.assertRaisesRegex(ValueError, "n of 10000000 is past what top-k takes.*1 to 65536"):
            self.client.groupby_nlargest(df, "k", "i32", 10**7)


class ReadmeExample(Base):
    def test_the_group_by_example_runs_and_agrees(self):
        code = readme_python_block("### Group-by", self.server.port)
        self.assertIn("assert", code)
        exec(compile(code, "README.md", "exec"), {})


if __name__ == "__main__":
    client_test_main(globals())
