"""tally.Client.agg against pandas itself: Series.agg and DataFrame.agg of
every function tally answers, by name, list and dict, on frames with NaN,
nullable Int64/Float64/boolean, category, datetime64 and timedelta64
columns, empty and all-missing ones; the same types, dtypes, shapes and
values, and TypeErrors naming what pandas or tally refuses.

usage: pandas_agg_test.py TALLY_SERVER_BINARY [--backend=cpu]
(the package, built with its stubs, on PYTHONPATH)
"""
import os
import warnings

import numpy as np
import pandas as pd

import tally
from tally.v1 import tally_pb2
from tally_test_server import ClientTestCase, client_test_main, readme_python_block

SERVER_BINARY = None
BACKEND = "cpu"
SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
FUNCS = ["sum", "prod", "mean", "min", "max", "count", "size", "std", "var", "any", "all"]
N = 500


def numeric_frame(rng, n=N):
    """Columns of every numpy and nullable kind, with missing values."""
    f64 = rng.uniform(0.9, 1.1, n)                    # near 1: products neither overflow nor vanish
    f64[rng.integers(0, n, n // 10)] = np.nan
    f32 = rng.uniform(-3, 5, n).astype(np.float32)
    f32[rng.integers(0, n, 7)] = np.nan
    i64 = rng.integers(-3, 4, n)
    i64[::9] = 0
    int_na = pd.array(rng.integers(-2, 3, n), dtype="Int64")
    int_na[rng.integers(0, n, n // 5)] = pd.NA
    float_na = pd.array(rng.uniform(0.9, 1.1, n), dtype="Float64")
    float_na[rng.integers(0, n, n // 5)] = pd.NA
    bool_na = pd.array(rng.random(n) < 0.5, dtype="boolean")
    bool_na[rng.integers(0, n, n // 5)] = pd.NA
    return pd.DataFrame({"f64": f64, "f32": f32, "i64": i64, "i32": i64.astype(np.int32) + 7,
                         "u8": rng.integers(1, 3, n).astype(np.uint8), "b": rng.random(n) < 0.8,
                         "Int64": int_na, "Float64": float_na, "boolean": bool_na})


class Base(ClientTestCase):
    def setUp(self):
        super().setUp()
        warnings.simplefilter("ignore", RuntimeWarning)

    def assertSameScalar(self, got, want, msg, rtol=1e-9):
        self.assertIs(type(got), type(want), f"{msg}: {got!r} vs pandas' {want!r}")
        if want is pd.NA or want is pd.NaT:
            return
        if isinstance(want, (pd.Timestamp, pd.Timedelta)):
            self.assertEqual(getattr(got, "tz", None), getattr(want, "tz", None), msg)
            # pandas adds nanoseconds in float64 in another order: to the microsecond.
            self.assertLessEqual(abs(got - want), pd.Timedelta(microseconds=1), f"{msg}: {got} vs {want}")
        elif isinstance(want, (float, np.floating)):
            np.testing.assert_allclose(got, want, rtol=1e-5 if np.asarray(want).dtype == np.float32 else rtol,
                                       equal_nan=True, err_msg=msg)
        else:
            self.assertEqual(got, want, msg)

    def assertSameAgg(self, obj, func, msg=""):
        msg = f"agg({func!r}) {msg}"
        want = obj.agg(func)
        got = self.client.agg(obj, func)
        if isinstance(want, pd.DataFrame):
            # float32 columns: pandas adds in float32, tally in float64.
            pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-5, obj=msg)
        elif isinstance(want, pd.Series):
            pd.testing.assert_series_equal(got, want, check_exact=False, rtol=1e-5, obj=msg)
            for k in want.index:  # the scalars too, not only what the Series made of them
                self.assertSameScalar(got[k], want[k], f"{msg}[{k!r}]", rtol=1e-5)
        else:
            self.assertSameScalar(got, want, msg)


class Series(Base):
    def test_every_function_on_every_numeric_and_nullable_column(self):
        df = numeric_frame(self.rng)
        for name in df.columns:
            for func in FUNCS:
                self.assertSameAgg(df[name], func, f"of {df[name].dtype} column {name}")
            self.assertSameAgg(df[name], ["sum", "mean", "count", "std"], name)

    def test_empty_all_missing_and_single_value_columns(self):
        cases = [pd.Series([], dtype=np.float64), pd.Series([], dtype=np.int64), pd.Series([np.nan] * 4),
                 pd.Series([None] * 3, dtype="Int64"), pd.Series([], dtype="Float64"), pd.Series([5]),
                 pd.Series([2.5, np.nan]), pd.Series([7, None], dtype="Int64"),
                 pd.Series([None, None], dtype="boolean")]
        for s in cases:
            for func in FUNCS:
                self.assertSameAgg(s, func, f"of {s.tolist()} ({s.dtype})")

    def test_category_aggregates_its_codes_where_pandas_does(self):
        ordered = pd.Series(pd.Categorical(self.rng.choice(["lo", "mid", "hi", None], N),
                                           categories=["lo", "mid", "hi"], ordered=True))
        for func in ("count", "size", "min", "max"):
            self.assertSameAgg(ordered, func, "ordered category")
        unordered = ordered.cat.as_unordered()
        self.assertSameAgg(unordered, "count", "unordered category")
        for s, func in ((unordered, "min"), (ordered, "sum"), (ordered, "mean")):
            with self.assertRaises(TypeError):
                s.agg(func)  # pandas refuses it ...
            with self.assertRaises(TypeError) as e:
                self.client.agg(s, func)  # ... and so does tally, saying so
            self.assertIn(func, str(e.exception))
        self.assertSameAgg(pd.Series(pd.Categorical([None, None], categories=["a"], ordered=True)), "min",
                           "all-missing category")

    def test_datetime_and_timedelta_are_int64_underneath(self):
        base = pd.Timestamp("2024-03-01")
        stamps = base + pd.to_timedelta(self.rng.integers(0, 10**15, N), unit="ns")
        stamps = pd.Series(stamps).where(self.rng.random(N) < 0.9)  # NaT
        deltas = stamps - base
        zoned = stamps.dt.tz_localize("Europe/Paris", ambiguous="NaT", nonexistent="NaT")
        for s, funcs in ((stamps, ["min", "max", "mean", "count", "size", "std"]),
                         (zoned, ["min", "max", "mean", "count"]),
                         (deltas, ["sum", "min", "max", "mean", "count", "size", "std"])):
            for func in funcs:
                self.assertSameAgg(s, func, f"of {s.dtype}")
        self.assertSameAgg(pd.Series([pd.NaT, pd.NaT], dtype="datetime64[ns]"), "min", "all NaT")
        with self.assertRaises(TypeError):
            self.client.agg(stamps, "sum")


class DataFrames(Base):
    def test_one_function_answers_per_column(self):
        df = numeric_frame(self.rng)
        for func in FUNCS:
            if func == "size":
                continue  # pandas answers the frame's size, one number
            self.assertSameAgg(df, func)

    def test_lists_and_dicts_of_functions(self):
        df = numeric_frame(self.rng)
        self.assertSameAgg(df, ["sum", "mean"])
        self.assertSameAgg(df, ["min", "max", "count"])
        self.assertSameAgg(df[["f64", "i64", "Int64"]], ["count", "std", "var", "size"])
        self.assertSameAgg(df, {"f64": "sum", "i64": "min"})
        self.assertSameAgg(df, {"f64": ["sum", "count"], "Int64": "mean", "b": ["any", "all"]})

    def test_category_and_datetime_columns(self):
        df = pd.DataFrame({"v": self.rng.standard_normal(50),
                           "when": pd.Series(pd.date_range("2020-01-01", periods=50, freq="7h")).where(
                               self.rng.random(50) < 0.8),
                           "grade": pd.Categorical(self.rng.choice(["a", "b", "c"], 50), ordered=True)})
        self.assertSameAgg(df, "count")
        self.assertSameAgg(df, ["min", "max"])
        with self.assertRaises(TypeError) as e:
            self.client.agg(df[["v", "grade"]], "sum")  # pandas 2 refuses it too (pandas 1 drops the column)
        self.assertIn("grade", str(e.exception))

    def test_dtypes_tally_cannot_take_are_named(self):
        # Strings are objects before pandas 3, its str dtype from it.
        strings = pd.Series(["a", "b"], name="label")
        for s, named in ((strings, "object" if strings.dtype == object else f"dtype {strings.dtype}"),
                         (pd.Series([1 + 2j, 3j], name="z"), "complex128"),
                         (pd.Series(pd.period_range("2020-01", periods=3, freq="M"), name="p"), "period")):
            with self.assertRaises(TypeError) as e:
                self.client.agg(s, "sum")
            self.assertIn(named, str(e.exception))
            self.assertIn(repr(s.name), str(e.exception))
            self.assertIn("Convert it", str(e.exception))
        with self.assertRaises(ValueError):
            self.client.agg(pd.Series([1.0]), "sem")  # a function tally does not answer

    def test_numpy_views_of_pandas_objects_are_refused(self):
        df = numeric_frame(self.rng, 20)
        with self.assertRaises(TypeError) as e:
            self.client.aggregate(df[["f64", "i64"]], "sum")  # numpy's rows would be pandas' records
        self.assertIn("agg", str(e.exception))
        with self.assertRaises(TypeError) as e:
            self.client.aggregate(df["Int64"], "sum")
        self.assertIn("Int64", str(e.exception))
        # A plain column is a numpy array underneath: its answer is numpy's.
        self.assertEqual(self.client.aggregate(df["i64"], "sum")["sum"], np.sum(df["i64"].to_numpy()))


class ReadmeExample(Base):
    def test_the_side_by_side_example_runs_and_agrees(self):
        code = readme_python_block("### numpy, pandas and tally, line by line", self.server.port)
        self.assertIn("assert", code)
        exec(compile(code, "README.md", "exec"), {})


if __name__ == "__main__":
    client_test_main(globals())
