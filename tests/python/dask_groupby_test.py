"""tally.dask.groupby against pandas' groupby of the computed frame, on 2
tally servers: every function with partial states per group over numeric
and nullable columns, keys of every kind (integers, floats with NaN and
-0.0, strings with None, bool, nullable Int64, datetimes, known
categories, observed True, False and pandas' default), NA keys with
dropna True and False, sort True and False, 1 to
20 partitions with keys spread across them or each in one, composite and
skewed keys, empty partitions, idxmin's ties across partitions, products
that wrap and any/all of groups with no values, bad input refused and
nothing sent before ``.compute()``.

usage: dask_groupby_test.py TALLY_SERVER_BINARY
(the package, built with its stubs, on PYTHONPATH)
"""
import os
import re
import sys
import unittest
import urllib.request
import warnings
import zlib

import dask
import dask.dataframe as dd
from dask.delayed import Delayed
import numpy as np
import pandas as pd

import tally
import tally.dask as td
from tally.v1 import tally_pb2
from tally_test_server import TallyServer, free_port, native_states
import groupby_test  # its frames of every value kind and its comparison with pandas

SERVER_BINARY = None
PANDAS_3 = groupby_test.PANDAS_3  # observed=True by default
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
# Client.groupby's functions, every one with partial states per group.
FUNCS = ["sum", "prod", "mean", "min", "max", "count", "size", "std", "var", "any", "all", "median", "quantile",
         "nunique"]
INDEX_FUNCS = ["idxmin", "idxmax"]
FEW = ["sum", "mean", "min", "max", "count", "size", "std", "median", "nunique"]


class Servers(unittest.TestCase):
    assertSameResult = groupby_test.Base.assertSameResult

    @classmethod
    def setUpClass(cls):
        cls.metrics_ports = [free_port(), free_port()]
        cls.servers = [TallyServer(SERVER_BINARY, tally_pb2, ["--backend=cpu", "--threads=2", "--health_listen=",
                                                               f"--metrics_listen=127.0.0.1:{port}"])
                       for port in cls.metrics_ports]
        cls.targets = [f"127.0.0.1:{s.port}" for s in cls.servers]
        td.use(cls.targets, timeout=60)
        dask.config.set(scheduler="threads")
        cls.funcs = FUNCS if native_states() else [f for f in FUNCS if f not in ("median", "quantile", "nunique")]

    @classmethod
    def tearDownClass(cls):
        for s in cls.servers:
            s.stop()

    def setUp(self):
        self.rng = np.random.default_rng([SEED, zlib.crc32(self.id().encode())])
        warnings.simplefilter("ignore")  # pandas' FutureWarnings, numpy's empty-slice warnings

    def group_by_requests(self):
        """GroupBy calls both servers have answered, from their Prometheus counters."""
        total = 0
        for port in self.metrics_ports:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            total += sum(float(v) for v in re.findall(r"^tally_group_by_requests_total\{[^}]*\} (\S+)$", text, re.M))
        return total

    def check_all(self, cases):
        """(pandas frame, npartitions, by, agg, sort, dropna, split_every)
        cases: every lazy result computed at once, each against pandas."""
        lazy, wants, msgs = [], [], []
        for df, npartitions, by, agg, sort, dropna, split_every in cases:
            ddf = df if isinstance(df, dd.DataFrame) else dd.from_pandas(df, npartitions=npartitions, sort=False)
            whole = ddf.compute()
            msgs.append(f"groupby({by!r}, sort={sort}, dropna={dropna}).agg({agg!r}) over {ddf.npartitions} "
                        f"partitions, split_every={split_every}")
            wants.append(whole.groupby(by, sort=sort, dropna=dropna).agg(agg))
            got = td.groupby(ddf, by, agg, sort=sort, dropna=dropna, split_every=split_every)
            self.assertIsInstance(got, Delayed, msgs[-1])
            lazy.append(got)
        for got, want, msg in zip(dask.compute(*lazy), wants, msgs):
            self.assertSameResult(got, want, msg)


def spread(rng, n, groups):
    """Keys in random order: most keys are in every partition."""
    return rng.integers(0, groups, n)


class Functions(Servers):
    def test_every_function_on_every_value_column(self):
        n = 3000
        df = groupby_test.values_frame(self.rng, n, {"k": spread(self.rng, n, 40)})
        # Groups whose values are all missing (NaN, NA), in every partition.
        for name in ("f64", "f32", "Int64", "Float64", "boolean"):
            df.loc[df.k == 7, name] = np.nan if df[name].dtype.kind == "f" else pd.NA
        df.loc[df.index[-1], "k"] = 1000  # a group of one row, in the last partition only
        cases = []
        for npartitions in (1, 3, 7):
            for sort in (True, False):
                cases.append((df, npartitions, "k", self.funcs, sort, True, 8))
        cases += [(df, 5, "k", f, True, True, 2) for f in self.funcs]
        self.check_all(cases)

    def test_idxmin_and_idxmax_are_the_first_rows_across_partitions(self):
        n = 800
        k = spread(self.rng, n, 12)
        # Few distinct values: ties within and across partitions, the
        # first row's label wins. A float column with NaN, a group of NaN
        # only (NaN, as pandas), a nullable column; an index of labels.
        f = self.rng.integers(0, 3, n).astype(np.float64)
        f[self.rng.random(n) < 0.2] = np.nan
        f[k == 5] = np.nan
        df = pd.DataFrame({"k": k, "f": f, "i": self.rng.integers(0, 3, n).astype(np.int32),
                           "u": self.rng.integers(0, 4, n).astype(np.uint8),
                           "n": pd.array(self.rng.integers(0, 2, n), dtype="Int64")},
                          index=pd.Index([f"row{j}" for j in self.rng.permutation(n)]))
        df.loc[self.rng.random(n) < 0.2, "n"] = pd.NA
        cases = []
        for npartitions in (1, 4, 9):
            for sort in (True, False):
                cases.append((df, npartitions, "k", INDEX_FUNCS, sort, True, 3))
        cases.append((df, 6, "k", {"f": ["idxmin", "min", "count"], "i": "idxmax"}, True, True, 8))
        # An integer index: labels as numbers, float where a group has none.
        cases.append((df.reset_index(drop=True).set_axis(np.arange(n) * 3 + 11), 5, "k", ["idxmax"], False, True, 2))
        self.check_all(cases)

    def test_forms_of_agg(self):
        n = 1000
        df = groupby_test.values_frame(self.rng, n, {"k": spread(self.rng, n, 9)})
        self.check_all([(df, 4, "k", agg, sort, True, 8) for sort in (True, False) for agg in (
            "size", "count", ["sum", "std"], {"f64": "mean", "Int64": ["min", "max", "size"]},
            {"u64": "sum", "b": "mean"}, {"f32": ["var", "count"]})])

    def test_datetime_and_category_values(self):
        n = 900
        rng = self.rng
        when = pd.Series(pd.Timestamp("2024-03-01", tz="Europe/Paris")
                         + pd.to_timedelta(rng.integers(0, 10**8, n), unit="s"))
        when[rng.random(n) < 0.1] = pd.NaT
        grade = pd.Categorical(rng.choice(["lo", "mid", "hi", None], n), categories=["lo", "mid", "hi"], ordered=True)
        df = pd.DataFrame({"k": rng.integers(0, 15, n), "when": when, "grade": grade,
                           "took": pd.to_timedelta(rng.integers(0, 10**9, n), unit="ms")})
        funcs = ["min", "max", "count", "size"] + (["nunique"] if native_states() else [])
        self.check_all([(df, 4, "k", funcs, sort, True, 2) for sort in (True, False)])

    def test_products_and_logical_functions_merge_across_partitions(self):
        """prod, any and all per group: integer products that wrap modulo
        2^64 (numpy's, so pandas'), zeros in some partitions only, groups
        whose values are all missing (prod 1, any False, all True, as
        pandas), bools and nullable columns, over 1 to 11 partitions."""
        n = 1500
        rng = self.rng
        k = spread(rng, n, 25)
        # Odd, of both signs: a group's product wraps many times over, and
        # is not 0 (2^64 would divide a product of 64 even factors).
        big = rng.integers(-2**40, 2**40, n) | 1
        f = rng.uniform(0.9, 1.1, n)
        f[rng.random(n) < 0.1] = np.nan
        f[k == 3] = np.nan  # a group of NaN only
        zeros = rng.integers(1, 4, n)
        zeros[(k == 5) & (np.arange(n) > n - 200)] = 0  # a group's zeros in the last partitions only
        flags = pd.array(rng.random(n) < 0.9, dtype="boolean")
        flags[rng.random(n) < 0.2] = pd.NA
        flags[k == 8] = pd.NA
        df = pd.DataFrame({"k": k, "big": big, "ubig": big.astype(np.uint64), "f": f, "zeros": zeros,
                           "b": rng.random(n) < 0.95, "flags": flags,
                           "i32": rng.integers(-2, 3, n).astype(np.int32)})
        funcs = ["prod", "any", "all", "count"]
        self.check_all([(df, npartitions, "k", funcs, sort, True, split_every)
                        for npartitions, split_every in ((1, 8), (4, 2), (11, 3)) for sort in (True, False)])

    def test_bad_input_is_named(self):
        ddf = dd.from_pandas(pd.DataFrame({"k": [1, 2, 1, 2], "v": [1.0, 2.0, 3.0, 4.0]}), npartitions=2)
        with self.assertRaises(ValueError) as e:
            td.groupby(ddf, "k", "first")  # pandas' function tally does not answer at all
        self.assertIn("'first'", str(e.exception))
        with self.assertRaises(KeyError):
            td.groupby(ddf, "nope", "sum")
        with self.assertRaises(TypeError):
            td.groupby(ddf.compute(), "k", "sum")  # pandas: Client.groupby
        with self.assertRaises(ValueError):
            td.groupby(ddf, "k", "sum", split_every=1)
        unknown = dd.from_pandas(pd.DataFrame({"g": pd.Categorical(["x", "y"] * 10), "v": np.arange(20.0)}),
                                 npartitions=2)
        unknown["g"] = unknown["g"].cat.as_unknown()
        with self.assertRaises(TypeError) as e:
            td.groupby(unknown, "g", "sum")
        self.assertIn("categorize", str(e.exception))

    def test_functions_of_native_states_need_the_native_module(self):
        ddf = dd.from_pandas(pd.DataFrame({"k": [1, 2, 1, 2], "v": [1.0, 2.0, 3.0, 4.0]}), npartitions=2)
        saved = sys.modules.get("tally._states")
        sys.modules["tally._states"] = None  # import tally._states raises ImportError
        if saved is not None:
            del tally._states
        try:
            for func in ("median", "quantile", "nunique"):
                with self.assertRaises(ImportError, msg=func) as e:
                    td.groupby(ddf, "k", ["mean", func])
                self.assertIn(repr(func), str(e.exception))
            td.groupby(ddf, "k", ["mean", "idxmin"])  # the others need no native module
        finally:
            if saved is None:
                del sys.modules["tally._states"]
            else:
                sys.modules["tally._states"] = tally._states = saved


class Keys(Servers):
    def test_every_key_kind_with_sort_and_dropna(self):
        n = 1200
        rng = self.rng
        floats = rng.integers(-3, 4, n).astype(np.float64)
        floats[rng.random(n) < 0.1] = np.nan
        floats[rng.random(n) < 0.1] = -0.0  # -0.0 and 0.0: one key, its first row's
        strings = rng.choice(np.array(["pear", "apple", "fig", "kiwi", None], dtype=object), n)
        nullable = pd.array(rng.integers(0, 5, n), dtype="Int64")
        nullable[rng.random(n) < 0.1] = pd.NA
        when = pd.Series(pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 6, n), unit="D"))
        when[rng.random(n) < 0.1] = pd.NaT
        grade = pd.Categorical(rng.choice(["c", "b", "a", "z"], n), categories=["c", "b", "a", "z", "unseen"])
        keys = {"int": rng.integers(-20, 20, n).astype(np.int16), "float": floats, "str": strings,
                "bool": rng.random(n) < 0.4, "nullable": nullable, "when": when, "grade": grade}
        df = pd.DataFrame({**keys, "v": rng.uniform(0.5, 1.5, n), "w": rng.integers(0, 100, n)})
        cases = []
        funcs = FEW if native_states() else ["sum", "min", "size"]
        for key in keys:
            # Keys in random order (every partition holds most), and
            # backwards with NA first (the first partition holds the last
            # keys): the merged groups are then sorted, or not, here.
            backwards = df.sort_values(key, ascending=False, na_position="first", kind="stable")
            for frame in (df, backwards):
                for sort in (True, False):
                    for dropna in (True, False):
                        if key == "grade" and not dropna:
                            continue  # pandas 1.5 drops a category's NA with dropna=False; tally keeps it (README)
                        cases.append((frame[[key, "v", "w"]], 4, key, funcs, sort, dropna, 2))
        self.check_all(cases)

    def test_observed_follows_pandas(self):
        """A category key's categories without rows: left out with
        observed=True, groups of their own with observed=False, and by
        default as the installed pandas' default (the frame's own
        groupby without the keyword)."""
        n = 900
        rng = self.rng
        grade = pd.Categorical(rng.choice(["c", "b", "a"], n), categories=["c", "b", "a", "unseen", "gone"])
        other = pd.Categorical(rng.choice(["x", "y"], n), categories=["x", "y", "never"])
        df = pd.DataFrame({"grade": grade, "other": other, "v": rng.uniform(0.5, 1.5, n),
                           "w": rng.integers(0, 100, n)})
        funcs = {"v": ["sum", "min", "count", "size"], "w": "max"}
        lazy, wants, msgs = [], [], []
        for by in ("grade", ["grade", "other"]):
            for sort in (True, False):
                for observed in (True, False, None):
                    ddf = dd.from_pandas(df, npartitions=3, sort=False)
                    whole = ddf.compute()
                    kw = {} if observed is None else {"observed": observed}
                    wants.append(whole.groupby(by, sort=sort, **kw).agg(funcs))
                    lazy.append(td.groupby(ddf, by, funcs, sort=sort, **kw))
                    msgs.append(f"groupby({by!r}, sort={sort}, observed={observed})")
        for got, want, msg in zip(dask.compute(*lazy), wants, msgs):
            if "sort=True" in msg and ("observed=True" in msg or ("observed=None" in msg and PANDAS_3)):
                # pandas 1.5 leaves observed groups in the order they come;
                # tally sorts them, in the categories' order, as pandas 2 does.
                self.assertTrue(got.index.is_monotonic_increasing, msg)
                want = want.reindex(got.index)
            self.assertSameResult(got, want, msg)
            if "observed=True" in msg:
                self.assertNotIn("unseen", list(got.index.get_level_values(0)), msg)
            if "observed=False" in msg:
                self.assertIn("unseen", list(got.index.get_level_values(0)), msg)
        with self.assertRaises(TypeError):
            td.groupby(dd.from_pandas(df, npartitions=2), "grade", "sum", observed="yes")

    def test_composite_keys(self):
        n = 1500
        rng = self.rng
        a = rng.integers(0, 4, n).astype(np.float64)
        a[rng.random(n) < 0.1] = np.nan
        b = rng.choice(np.array(["x", "y", "z", None], dtype=object), n)
        df = pd.DataFrame({"a": a, "b": b, "c": rng.integers(0, 3, n).astype(np.uint8),
                           "v": rng.uniform(0.5, 1.5, n), "w": rng.integers(-9, 9, n)})
        cases = []
        for by in (["a", "b"], ["b", "c", "a"]):
            for sort in (True, False):
                for dropna in (True, False):
                    cases.append((df, 5, by, ["sum", "mean", "max", "size"], sort, dropna, 2))
        cases.append((df, 3, ["c", "a"], {"v": ["std", "idxmin"], "w": "count"}, True, False, 8))
        self.check_all(cases)

    def test_skewed_keys_and_keys_in_one_partition(self):
        n = 4000
        rng = self.rng
        skewed = np.where(rng.random(n) < 0.9, 3, rng.integers(0, 500, n))  # one key 90% of rows, many rare
        cases = []
        df = pd.DataFrame({"k": skewed, "v": rng.uniform(0.5, 1.5, n), "w": rng.integers(0, 50, n)})
        for sort in (True, False):
            cases.append((df, 6, "k", ["sum", "mean", "std", "max", "size"], sort, True, 3))
        # Sorted by key: each key in one or two partitions; 20 partitions
        # merged in trees of 2, 3 and 8.
        by_key = df.sort_values("k", kind="stable")
        for split_every in (2, 3, 8):
            cases.append((by_key, 20, "k", ["sum", "mean", "var", "min", "idxmax", "count"], False, True, split_every))
        # Strings in sorted order and backwards: each partition's codes differ.
        names = pd.DataFrame({"s": [f"key{j:03d}" for j in rng.integers(0, 300, n)], "v": rng.uniform(0.5, 1.5, n)})
        for frame in (names.sort_values("s"), names.sort_values("s", ascending=False), names):
            for sort in (True, False):
                cases.append((frame, 7, "s", ["sum", "max", "size"], sort, True, 4))
        self.check_all(cases)

    def test_empty_partitions_and_no_groups(self):
        n = 600
        rng = self.rng
        df = pd.DataFrame({"k": rng.integers(0, 10, n).astype(np.float64), "v": rng.uniform(0.5, 1.5, n)})
        ddf = dd.from_pandas(df.sort_values("k"), npartitions=6)
        some_empty = ddf[ddf.k > 6]  # partitions left with no rows
        cases = [(some_empty, None, "k", ["sum", "mean", "min", "idxmax", "size"], sort, True, 2)
                 for sort in (True, False)]
        nan_keys = df.assign(k=np.nan)  # every key NA: no groups (dropna), or one (dropna=False)
        cases += [(nan_keys, 3, "k", ["sum", "min", "size"], True, dropna, 2) for dropna in (True, False)]
        cases.append((ddf[ddf.k > 100], None, "k", ["sum", "min", "idxmin", "size"], True, True, 2))  # no rows
        self.check_all(cases)


class Laziness(Servers):
    def test_nothing_is_sent_before_compute_and_one_call_per_partition(self):
        n = 2000
        df = pd.DataFrame({"k": self.rng.integers(0, 30, n), "v": self.rng.uniform(0.5, 1.5, n),
                           "s": self.rng.choice(["a", "b"], n)})
        ddf = dd.from_pandas(df, npartitions=5)
        before = self.group_by_requests()
        lazy = td.groupby(ddf, ["k", "s"], {"v": ["sum", "std", "idxmin"]}, split_every=2)
        self.assertEqual(self.group_by_requests(), before, "a server was asked before .compute()")
        got = lazy.compute()
        self.assertEqual(self.group_by_requests(), before + 5, "one GroupBy call per partition")
        self.assertSameResult(got, df.groupby(["k", "s"]).agg({"v": ["sum", "std", "idxmin"]}), "lazy")
        # One target, or targets given per call, answer the same.
        one = td.groupby(ddf, ["k", "s"], {"v": ["sum", "std", "idxmin"]}, self.targets[:1], split_every=2)
        pd.testing.assert_frame_equal(one.compute(), got)


if __name__ == "__main__":
    SERVER_BINARY = sys.argv[1]
    print(f"TALLY_TEST_SEED={SEED}", flush=True)
    unittest.main(argv=[sys.argv[0]], verbosity=2)
