"""pandas' reductions answered by a tally server: ``Series.agg`` and
``DataFrame.agg`` with pandas' defaults (NaN and NA skipped, count of the
values present, ddof=1), its dtypes and its result shapes.

A column becomes what tally aggregates: its numpy values and, where values
can be missing behind a mask (nullable Int/Float/boolean, category codes,
datetime64 and timedelta64's NaT), a validity mask. Plain float columns
are sent without a mask and reduced by the NaN-skipping ops.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

from ._arrays import SUPPORTED, SUPPORTED_NAMES
from ._ops import Op
from ._pandas_version import frame_reductions_keep_extension_dtypes

# pandas' reductions: the op answering each over the elements present, and
# its NaN-skipping form for a float column sent without a mask (None: no
# such op, so the column is sent with a mask of its non-NaN elements).
_FUNCS = {
    "sum": ("sum", "nansum"), "prod": ("prod", None), "mean": ("mean", "nanmean"),
    "min": ("min", "nanmin"), "max": ("max", "nanmax"), "count": ("count", "nancount"),
    "std": ("std:1", "nanstd:1"), "var": ("var:1", "nanvar:1"), "any": ("any", None), "all": ("all", None),
    # Series.median and Series.quantile() (q=0.5, linear: numpy's).
    "median": ("median", "nanmedian"), "quantile": ("quantile:0.5", "nanquantile:0.5"),
    # count_distinct counts NaN once where pandas' nunique (dropna=True)
    # leaves it out: answer() takes it off when the column has a NaN.
    "nunique": ("count_distinct", "count_distinct"),
}
# Answered without the server.
_LOCAL = ("size",)
FUNC_NAMES = tuple(_FUNCS) + _LOCAL
_DDOF = 1  # pandas' std and var
# The functions pandas answers for each kind of column that is not a number.
_KIND_FUNCS = {
    "datetime": ("min", "max", "mean", "std", "count", "size", "nunique"),
    "timedelta": ("sum", "min", "max", "mean", "std", "count", "size", "nunique"),
    "category": ("min", "max", "count", "size", "nunique"),
}
# Functions pandas answers for those columns that tally does not: pandas
# takes the median of datetimes in float64 nanoseconds, which rounds them.
_NOT_ANSWERED = {("datetime", "median"), ("datetime", "quantile"), ("timedelta", "median"),
                 ("timedelta", "quantile")}
# Functions with no value for no elements (NaN, NA or NaT in pandas), by
# the values present they need.
_NEEDS = {"min": 0, "max": 0, "mean": 0, "std": _DDOF, "var": _DDOF, "median": 0, "quantile": 0}


@dataclass
class Column:
    """A pandas column as tally aggregates it: ``values`` (numpy), ``valid``
    (None: every value is present, or the NaN-skipping ops skip the
    missing ones), ``kind`` ("number", "masked", "datetime", "timedelta",
    "category") and what turns answers back into pandas' scalars."""
    name: Any
    values: np.ndarray
    valid: Optional[np.ndarray]
    kind: str
    dtype: Any          # the pandas dtype
    size: int

    @property
    def nan_ops(self) -> bool:
        """Whether the column's missing values are NaNs the nan-ops skip."""
        return self.kind == "number" and self.values.dtype.kind == "f" and self.valid is None

    def present(self) -> int:
        """How many values are present, where a mask says it; -1 where only
        the server knows (NaNs of a float column)."""
        if self.valid is not None:
            return int(np.count_nonzero(self.valid))
        return -1 if self.nan_ops and self.size else self.size


def column(series: Any) -> Column:
    """The :class:`Column` of a pandas Series. TypeError naming the dtype for
    one tally cannot take."""
    import pandas as pd

    dtype, name, arr = series.dtype, series.name, series.array
    if isinstance(dtype, pd.CategoricalDtype):
        codes = np.asarray(arr.codes)
        return Column(name, codes, codes != -1, "category", dtype, len(codes))
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        # int64 underneath, NaT the smallest int64 (pandas' iNaT).
        i8 = np.asarray(arr.asi8)
        kind = "timedelta" if pd.api.types.is_timedelta64_dtype(dtype) else "datetime"
        return Column(name, i8, i8 != np.iinfo(np.int64).min, kind, dtype, len(i8))
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and hasattr(arr, "_mask") and hasattr(arr, "_data"):
        # Nullable Int*, UInt*, Float* and boolean: values and mask as they
        # lie (pandas has no public accessor that does not copy them).
        data = np.asarray(arr._data)
        if not _takes(data.dtype):
            raise _unsupported(name, dtype)
        return Column(name, data, ~np.asarray(arr._mask), "masked", dtype, len(data))
    if isinstance(dtype, np.dtype) and _takes(dtype):
        return Column(name, np.asarray(series.to_numpy()), None, "number", dtype, len(series))
    raise _unsupported(name, dtype)


def _takes(dtype: np.dtype) -> bool:
    return dtype.newbyteorder("=") in SUPPORTED


def _unsupported(name: Any, dtype: Any) -> TypeError:
    import pandas as pd

    if str(dtype) == "object":
        what = "Python objects (strings, mixed values)"
    elif isinstance(dtype, pd.StringDtype):  # pandas 3's default for strings: dtype str
        what = f"strings (dtype {dtype})"
    else:
        what = f"dtype {dtype}"
    return TypeError(f"column {name!r} holds {what}, which tally cannot aggregate: tally takes numbers "
                     f"({SUPPORTED_NAMES}), pandas' nullable Int/UInt/Float/boolean, category (its codes), "
                     f"datetime64 and timedelta64. Convert it (pd.to_numeric, .astype) or leave it out "
                     f"(df.select_dtypes(exclude=...))")


def funcs_of(func: Any) -> list[str]:
    """The pandas function names in ``func`` (one name or a list of them).
    ValueError for a name tally does not answer."""
    names = [func] if isinstance(func, str) else list(func)
    for f in names:
        if not isinstance(f, str):
            raise TypeError(f"give pandas functions by name ('sum', 'mean', ...), not {f!r}")
        if f not in FUNC_NAMES:
            raise ValueError(f"{f!r} is not a function tally answers for pandas; expected one of "
                             f"{', '.join(FUNC_NAMES)}")
    return names


def refuse(col: Column, func: str) -> None:
    """TypeError where pandas refuses ``func`` for the column's kind."""
    if (col.kind, func) in _NOT_ANSWERED:
        raise TypeError(f"column {col.name!r} of dtype {col.dtype}: tally does not answer {func!r} for it "
                        f"(pandas computes it in float64 nanoseconds)")
    if func == "quantile" and col.values.dtype == np.bool_ and col.present() != 0:
        raise TypeError(f"column {col.name!r} of dtype {col.dtype} does not support 'quantile', as in pandas "
                        f"(numpy refuses boolean subtraction)")
    allowed = _KIND_FUNCS.get(col.kind)
    if allowed is not None and func not in allowed:
        raise TypeError(f"column {col.name!r} of dtype {col.dtype} does not support {func!r}, as in pandas")
    if col.kind == "category" and func in ("min", "max") and not col.dtype.ordered:
        raise TypeError(f"column {col.name!r}: its Categorical is not ordered for {func!r}, as in pandas "
                        f"(use .cat.as_ordered())")


def plan(col: Column, funcs: list[str], table: Optional[dict] = None) -> Column:
    """The column as it will be sent for ``funcs``: a float column needing
    an op with no NaN-skipping form (prod, any, all) gets a mask of its
    non-NaN values. ``table``: the functions' ops, as _FUNCS (groupby adds
    its own to it)."""
    table = _FUNCS if table is None else table
    for f in funcs:
        refuse(col, f)
    if col.nan_ops and any(table[f][1] is None for f in funcs if f in table):
        return Column(col.name, col.values, ~np.isnan(col.values), "masked", col.dtype, col.size)
    return col


def ops_for(col: Column, funcs: list[str], every_op: bool = False) -> list[Op]:
    """The ops that answer ``funcs`` over ``col`` (as :func:`plan` gives it):
    the count of values present first, which decides what has no value.
    Without ``every_op``, min and max are left out of a column with no
    values (the server refuses them); partial states take them, and the
    ops must be the same for every part of a column. quantile, which the
    server refuses for no elements too, likewise."""
    pick = 1 if col.nan_ops else 0
    names = [_FUNCS["count"][pick]] + [_FUNCS[f][pick] for f in funcs if f in _FUNCS]
    if not every_op and col.present() == 0:
        names = [n for n in names if Op.parse(n).kind not in ("min", "max", "nanmin", "nanmax", "quantile")]
    return [Op.parse(n) for n in dict.fromkeys(names)]


def answer(col: Column, func: str, values: Callable[[Op], Any]) -> Any:
    """pandas' answer for ``func`` over ``col``, from the finished op values
    ``values(op)`` of :func:`ops_for`'s ops."""
    if func == "size":
        return col.size
    pick = 1 if col.nan_ops else 0
    count = int(values(Op.parse(_FUNCS["count"][pick])))
    if func == "count":
        return np.int64(count)
    if func == "nunique":
        # pandas' dropna=True: a NaN the column's distinct values hold (it
        # holds one exactly where fewer values are present than the size)
        # is not counted.
        distinct = int(values(Op.parse(_FUNCS[func][pick])))
        return distinct - 1 if col.nan_ops and count < col.size else distinct
    if count <= _NEEDS.get(func, -1):
        # NaN, NA or NaT, as pandas marks no value (of its type, which
        # depends on whether values were missing or there were none).
        return _pandas_answer(col.dtype, func, count, int(col.size > count))
    value = values(Op.parse(_FUNCS[func][pick]))
    if col.kind == "category":
        return col.dtype.categories[int(value)]
    if col.kind in ("datetime", "timedelta"):
        return _time(col, func, value)
    if func == "quantile":
        return _quantile_answer(col, value, count < col.size)
    # pandas' result type, which is not always numpy's (pandas 1 sums
    # unsigned integers into int64); wraps where it is narrower, as pandas'.
    return np.asarray(value).astype(type(_pandas_answer(col.dtype, func, 2, 0)))[()]


def _quantile_answer(col: Column, value: Any, missing: bool) -> Any:
    """Series.quantile's type, which pandas 1.5 takes from the values
    (pandas.core.array_algos.quantile._nanpercentile): float64, but where
    values are missing a float column's own dtype, and an integer column's
    where the answer is a whole number."""
    v = np.float64(value)
    if missing:
        dtype = col.values.dtype
        if dtype.kind == "f":
            return dtype.type(v)
        if dtype.kind in "iu" and v == np.round(v):
            return dtype.type(v)
    return v


@functools.lru_cache(maxsize=None)
def _pandas_answer(dtype: Any, func: str, present: int, missing: int) -> Any:
    """pandas' own answer for ``func`` over a Series of ``dtype`` holding
    ``present`` values (0, then 1) and ``missing`` missing ones: the type
    of its answers, and what it answers where there is no value. Asked of
    pandas, so that they follow its version."""
    import pandas as pd

    return pd.Series([0, 1][:present] + [None] * missing, dtype=object).astype(dtype).agg(func)


def time_unit(dtype: Any) -> str:
    """The unit of a datetime64 or timedelta64 column's ticks: numpy's
    (datetime64[us], ...) or a DatetimeTZDtype's. pandas 1 has only "ns";
    pandas 2 keeps other units and pandas 3 infers them (datetime64[us]
    from Python datetimes and most strings)."""
    return np.datetime_data(dtype)[0] if isinstance(dtype, np.dtype) else getattr(dtype, "unit", "ns")


def _time(col: Column, func: str, value: Any) -> Any:
    """A datetime or timedelta answer from its int64 (or float64 mean and
    std) ticks in the column's unit, as pandas gives it: Timestamp (with
    the column's time zone), Timedelta, of that unit; a mean truncated to
    whole units, as pandas does."""
    import pandas as pd

    unit = time_unit(col.dtype)
    if func == "std":
        return pd.Timedelta(float(value), unit=unit)
    ticks = int(value)  # truncates a mean toward zero
    # From numpy scalars, which keep the unit where pandas has it (2 on).
    if col.kind == "timedelta":
        return pd.Timedelta(np.timedelta64(ticks, unit))
    t = pd.Timestamp(np.datetime64(ticks, unit))
    tz = getattr(col.dtype, "tz", None)
    return t.tz_localize("UTC").tz_convert(tz) if tz is not None else t


def columns(obj: Any) -> list[Any]:
    """The Series of a DataFrame, or the Series itself. TypeError for
    anything else."""
    import pandas as pd

    if isinstance(obj, pd.DataFrame):
        return [obj.iloc[:, k] for k in range(obj.shape[1])]
    if isinstance(obj, pd.Series):
        return [obj]
    raise TypeError(f"agg takes a pandas Series or DataFrame, not {type(obj).__name__} (numpy arrays: use "
                    f"the numpy-style functions or aggregate)")


def requests(obj: Any, func: Any) -> list[tuple[Column, list[str]]]:
    """Each column with the functions asked of it: ``func`` is a name, a
    list of names or (DataFrame) a dict from column labels to either."""
    import pandas as pd

    cols = columns(obj)
    if isinstance(func, dict):
        if not isinstance(obj, pd.DataFrame):
            raise TypeError("a dict of functions is for a DataFrame's columns")
        by_label = {c.name: c for c in cols}
        missing = [k for k in func if k not in by_label]
        if missing:
            raise KeyError(f"columns not in the DataFrame: {missing}")
        return [(plan(column(by_label[k]), funcs_of(f)), funcs_of(f)) for k, f in func.items()]
    names = funcs_of(func)
    return [(plan(column(s), names), names) for s in cols]


def assemble(obj: Any, func: Any, answers: list[list[Any]]) -> Any:
    """pandas' result for ``obj.agg(func)`` from each requested column's
    answers, in :func:`requests`' order."""
    import pandas as pd

    if isinstance(obj, pd.Series):
        if isinstance(func, str):
            return answers[0][0]
        return pd.Series(answers[0], index=funcs_of(func), name=obj.name)
    per_label = dict(func) if isinstance(func, dict) else {label: func for label in obj.columns}
    if all(isinstance(f, str) for f in per_label.values()):
        # As pandas builds a DataFrame's reduction: a row of the columns'
        # answers, each column keeping its own dtype, taken as a Series.
        dtypes = [obj[label].dtype for label in per_label] if isinstance(func, dict) else list(obj.dtypes)
        row = pd.DataFrame({k: _reduced(dtype, f, a[0])
                            for k, (dtype, f, a) in enumerate(zip(dtypes, per_label.values(), answers))})
        row.columns = list(per_label)
        return row.iloc[0].rename(None)
    return pd.concat([pd.Series(a, index=funcs_of(f), name=label)
                      for (label, f), a in zip(per_label.items(), answers)], axis=1, sort=False)



def _reduced(dtype: Any, func: str, value: Any) -> Any:
    """A column's answer as the cell of the row that DataFrame.agg(func)
    takes its Series from: the scalar, or where pandas keeps nullable
    dtypes in reductions (frame_reductions_keep_extension_dtypes) a
    one-element array of the dtype pandas reduces that column to (Int64
    sums, Float64 means, boolean any), whose row then takes pandas' common
    dtype (Float64 beside float64 columns)."""
    import pandas as pd

    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and frame_reductions_keep_extension_dtypes():
        reduced = _frame_result_dtype(dtype, func)
        if isinstance(reduced, pd.api.extensions.ExtensionDtype):
            return pd.array([value], dtype=reduced)
    return [value]


@functools.lru_cache(maxsize=None)
def _frame_result_dtype(dtype: Any, func: str) -> Any:
    """The dtype of ``DataFrame.agg(func)`` over one column of ``dtype``,
    asked of pandas, so that it follows its version."""
    import pandas as pd

    try:
        values = pd.Series([0, 1, 1, None], dtype=object).astype(dtype)
    except (TypeError, ValueError):  # categories, datetimes: answered as scalars
        return None
    try:
        return pd.DataFrame({"v": values}).agg(func).dtype
    except (TypeError, AttributeError):  # refused for the dtype (refuse() names it), or size: a number
        return None


class PandasFunctions:
    """pandas' ``agg`` as a method of :class:`tally.Client`."""

    def agg(self, obj: Any, func: Union[str, list, dict], *, timeout: Optional[float] = None) -> Any:
        """What ``obj.agg(func)`` answers, computed by the server: ``obj`` a
        pandas Series or DataFrame (per column), ``func`` a name, a list of
        names or (DataFrame) a dict from column labels to either, among
        sum, prod, mean, min, max, count, size, std, var, any, all, median,
        quantile (pandas' q=0.5, linear interpolation) and nunique.

        pandas' defaults: missing values (NaN, NA, NaT) are skipped;
        ``count`` is the values present; std and var use ddof=1 (no value,
        NaN or NA, for fewer than two values); min and max of no values are
        missing rather than an error. Nullable Int/UInt/Float/boolean
        columns are sent as their values and a validity mask; category as
        its codes (count, nunique, and min and max of ordered ones, as
        pandas allows); datetime64 and timedelta64 as int64 (min, max, mean,
        std, count and nunique, and sum of timedeltas, as Timestamp and
        Timedelta; not their median and quantile, TypeError). nunique
        leaves missing values out, as pandas' (dropna=True). A
        function pandas refuses for a column's dtype is a TypeError, and so
        is a dtype tally cannot take, naming it. One call per column."""
        answers = []
        for col, funcs in requests(obj, func):
            r = self.aggregate(col.values, ops_for(col, funcs), valid=col.valid, timeout=timeout)
            answers.append([answer(col, f, r.__getitem__) for f in funcs])
        return assemble(obj, func, answers)
