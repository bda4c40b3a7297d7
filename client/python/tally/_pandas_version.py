"""Where pandas' answers depend on its version: one predicate per behaviour
that changed, each naming the pandas release and the change it follows, so
that agg and groupby answer what the installed pandas answers.

Dtypes that pandas decides per column (a groupby's means, counts and sizes
of nullable columns, ...) are not here: _groupby and _pandas ask pandas
itself for them, on a few values of the column's dtype.
"""
from __future__ import annotations

import functools
import re


@functools.lru_cache(maxsize=None)
def pandas_at_least(major: int, minor: int = 0) -> bool:
    """Whether the installed pandas is ``major.minor`` or later."""
    import pandas as pd

    found = re.match(r"(\d+)\.(\d+)", pd.__version__)
    return found is not None and (int(found[1]), int(found[2])) >= (major, minor)


def groupby_observed_default() -> bool:
    """``observed``'s default in DataFrame.groupby: True from pandas 3.0
    (whatsnew 3.0.0, "Changed the default value of observed ... to True",
    GH 51811), False before."""
    return pandas_at_least(3)


def groupby_refuses_bool_quantile() -> bool:
    """Whether groupby's quantile (and so agg('quantile')) of a numpy bool
    column raises TypeError "Cannot use quantile with bool dtype": from
    pandas 3.0 (whatsnew 3.0.0, "Removed DataFrameGroupBy.quantile and
    SeriesGroupBy.quantile supporting bool dtype", GH 53975; a
    FutureWarning in 2.x). Nullable boolean columns are still taken, as
    floats."""
    return pandas_at_least(3)


def groupby_idx_refuses_groups_without_values() -> bool:
    """Whether groupby's idxmin and idxmax (skipna=True) raise ValueError for
    a group with no value present, where older pandas answered NaN: from
    pandas 3.0 ("idxmin with skipna=True encountered all NA values in a
    group", GroupBy._wrap_idxmax_idxmin; whatsnew 3.0.0, GH 33941, 51276),
    and so for an unobserved category's empty group too ("Can't get idxmin
    of an empty group due to unobserved categories", GroupBy._idxmax_idxmin)."""
    return pandas_at_least(3)


def groupby_keeps_category_dtype() -> bool:
    """Whether a category key's groups keep its CategoricalDtype as pandas
    3.0 makes them: every category of the column in its own order,
    observed or not (pandas 3.0.6 keeps an unused category in the index's
    dtype with observed=True). pandas 1.5 kept every category, reordered as
    the groups come for sort=False."""
    return pandas_at_least(3)


def frame_reductions_keep_extension_dtypes() -> bool:
    """Whether DataFrame.agg('sum') and the other one-function reductions
    keep nullable columns' dtypes: each column reduced to a one-element
    array of its own result dtype (Int64 sums, Float64 means, ...), the
    row of them taking their common dtype (Float64 for a frame of float64
    and Int64 columns). From pandas 2.1 (whatsnew 2.1.0, "DataFrame
    reductions preserve extension dtypes", GH 52788); numpy scalars
    before."""
    return pandas_at_least(2, 1)
