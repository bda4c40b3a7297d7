"""pandas' ``df.groupby(by, sort=, dropna=).agg(func)`` answered by a tally
server's GroupBy: the key and value columns sent once, each group's
aggregations read back page by page, and pandas' index, columns and dtypes
rebuilt here. A mapping of numpy arrays is answered in numpy arrays, without
pandas.

A mapping's columns may be SharedArrays (Client.share): each is read here
through its numpy view, and sent as a region column (Column.region, no
bytes) wherever what would be sent is its bytes as they lie there.

Keys the server cannot take as they are (strings, objects, datetimes) are
factorised here and sent as integer codes in label order, so that the
server's ascending order of codes is pandas' order of labels; category keys
send their codes, whose order is the categories'.
"""
from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional

import grpc
import numpy as np

from . import _values, _wire
from . import partial as tp
from ._arrays import (FROM_WIRE, SUPPORTED_NAMES, byte_view, prepare, prepare_validity, result_values, values_of,
                      wire_dtype)
from ._ops import Op
from ._pandas import _FUNCS, _NEEDS, FUNC_NAMES as _AGG_NAMES, Column, _takes, column, plan, time_unit
from ._pandas_version import (groupby_idx_refuses_groups_without_values, groupby_keeps_category_dtype,
                              groupby_observed_default, groupby_refuses_bool_quantile)
from ._shared import SharedArray, PackedColumns
from .v1 import tally_pb2 as pb

# The server's limit on aggregations per request (server/core/validate.h):
# a wider table is asked for in several requests, each with the key columns.
_MAX_AGGREGATIONS = 64
# tally.proto: Column.name is 1 to 256 bytes.
_MAX_NAME_BYTES = 256

# groupby's own functions, beside those _pandas answers for agg, in its
# table's form (the op, and its NaN-skipping form; None: none, so a float
# column is sent with a mask of its non-NaN values). idxmin and idxmax are
# the index labels of the rows that bottomk:1 and topk:1 find (ties to the
# first row, as pandas): nanargmin refuses a group whose values are all NaN,
# where pandas answers NaN.
_GROUP_FUNCS = {"idxmin": ("bottomk:1", None), "idxmax": ("topk:1", None)}
# With a mask, a group can be left with no values, for which the server
# refuses min, max and quantile (numpy raises on an empty array); pandas
# answers NA. These answer it: bottomk:1 and topk:1 give no value for such
# a group, nanquantile NaN.
_EMPTY_SAFE = {"min": "bottomk:1", "max": "topk:1", "quantile": "nanquantile:0.5"}
# Asked for partial states (tally.dask.groupby), which topk and bottomk do
# not give per group: idxmin and idxmax are the rows of nanargmin and
# nanargmax (argmin, argmax for columns without NaN), and min and max stay
# themselves, a group with no values having the empty state (no value).
_PARTIAL_GROUP_FUNCS = {"idxmin": ("argmin", "nanargmin"), "idxmax": ("argmax", "nanargmax")}
_PARTIAL_EMPTY_SAFE = {"quantile": "nanquantile:0.5"}
FUNC_NAMES = _AGG_NAMES + tuple(_GROUP_FUNCS)
# pandas groupby functions that tally does not answer, named in the error.
_NOT_ANSWERED = ("first", "last", "nth", "sem", "ohlc", "mad", "skew", "cumsum", "cumprod", "cummin",
                 "cummax", "cumcount", "rank", "head", "tail", "describe", "value_counts")
_COUNTS = ("count", "size", "nunique")
_INDEX_FUNCS = tuple(_GROUP_FUNCS)
# datetime and timedelta value columns: the functions answered for them
# (their int64 ticks, in order); pandas' mean, std and sum of them are not.
_TIME_FUNCS = ("min", "max", "count", "size", "nunique")
# What pandas answers for a category that has no rows (observed=False).
_EMPTY_GROUP = {"sum": 0, "count": 0, "size": 0, "nunique": 0, "prod": 1, "any": False, "all": True}


def _funcs_of(func: Any, where: str) -> list[str]:
    """The function names of ``func`` (a name or a list of them), checked."""
    names = [func] if isinstance(func, str) else list(func) if isinstance(func, (list, tuple)) else None
    if names is None:
        raise TypeError(f"{where}: give pandas functions by name ('sum', ['mean', 'std'], ...), not {func!r}")
    for f in names:
        if not isinstance(f, str):
            raise TypeError(f"{where}: give pandas functions by name ('sum', 'mean', ...), not {f!r}")
        if f in _NOT_ANSWERED:
            raise ValueError(f"{where}: tally's GroupBy does not answer {f!r}; it answers {', '.join(FUNC_NAMES)}")
        if f not in FUNC_NAMES:
            raise ValueError(f"{where}: {f!r} is not a groupby function tally answers; expected one of "
                             f"{', '.join(FUNC_NAMES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: function names must be unique, got {names} (pandas refuses them too)")
    return names


@dataclass(frozen=True)
class _Output:
    """One column of the result: its label, the value column and function."""
    label: Any
    column: Any
    func: str


def _outputs(labels: list, by: list, agg: Any, named: dict) -> tuple[list[_Output], str]:
    """The result's columns for ``agg`` (or pandas' named aggregations), and
    its shape: "series" (agg="size"), "flat" or "multi" (MultiIndex columns)."""
    if named:
        if agg is not None:
            raise TypeError("give agg or named aggregations (name=(column, func)), not both")
        out = []
        for name, spec in named.items():
            if not (isinstance(spec, tuple) and len(spec) == 2):
                raise TypeError(f"named aggregation {name}= must be a (column, func) pair, e.g. "
                                f"{name}=('price', 'mean'), not {spec!r}")
            if not isinstance(spec[1], str):
                raise TypeError(f"named aggregation {name}= takes one function name, not {spec[1]!r}")
            out.append(_Output(name, spec[0], _funcs_of(spec[1], f"{name}=")[0]))
        return out, "flat"
    if agg is None:
        raise TypeError("agg is required: a function name, a list of them, a dict {column: names}, or "
                        "named aggregations (name=(column, func))")
    if isinstance(agg, Mapping):
        multi = any(not isinstance(f, str) for f in agg.values())
        out = []
        for label, f in agg.items():
            out += [_Output((label, n) if multi else label, label, n) for n in _funcs_of(f, f"agg[{label!r}]")]
        return out, "multi" if multi else "flat"
    values = [c for c in labels if c not in by]
    names = _funcs_of(agg, "agg")
    if isinstance(agg, str):
        if agg == "size":  # pandas answers one Series of group sizes
            return [_Output(None, None, "size")], "series"
        return [_Output(c, c, agg) for c in values], "flat"
    return [_Output((c, n), c, n) for c in values for n in names], "multi"


# -- Keys ----------------------------------------------------------------------

@dataclass
class _Key:
    """A key column as sent (``values``, ``valid``: None for no mask), and
    what turns the groups' keys back into labels: ``decode(keys, valid)``."""
    label: Any
    values: np.ndarray
    valid: Optional[np.ndarray]
    decode: Callable[[np.ndarray, np.ndarray], Any]
    category: Any = None  # a CategoricalDtype: its unobserved categories join the result (observed=False)
    # The column's SharedArray (values sent as a region where they lie in
    # it) or resident dataset (sent by name).
    shared: Optional[SharedArray | _Resident] = None


@dataclass(frozen=True)
class _Resident:
    """A mapping's column that is a resident dataset (the DatasetInfo
    :meth:`Client.put_dataset` and :meth:`Client.describe_dataset` give):
    sent by name (Column.dataset), its values never on the client.
    ``stand_in`` has the dataset's dtype and length for the plan, and
    holds zeros: whatever would read the values on the client (a key to
    factorise, a mask of a float column's NaNs) is refused instead."""
    name: str
    stand_in: np.ndarray


def _mask(valid: np.ndarray) -> Optional[np.ndarray]:
    return None if valid.all() else valid


def _codes(codes: np.ndarray, n: int) -> np.ndarray:
    """Factorised codes in the narrowest of int32 and int64."""
    return codes.astype(np.int32 if n < 2**31 else np.int64, copy=False)


def _sent_as_is(dtype: Any) -> bool:
    """Whether a key column of ``dtype`` goes as it is: the numbers the
    server groups by (integers, bool, floats)."""
    return isinstance(dtype, np.dtype) and dtype.kind in "biuf" and _takes(dtype)


def _pandas_key(series: Any, sort: bool) -> _Key:
    import pandas as pd

    name, dtype, arr = series.name, series.dtype, series.array
    if isinstance(dtype, pd.CategoricalDtype):
        def categories(keys: np.ndarray, valid: np.ndarray) -> Any:
            codes = np.where(valid, keys, -1)
            result = dtype
            if not sort and not dtype.ordered:
                # pandas' sort=False reorders an unordered category's
                # categories as its groups come, the unobserved ones after.
                seen = pd.unique(codes[codes != -1])
                order = np.concatenate([seen, np.setdiff1d(np.arange(len(dtype.categories)), seen)]).astype(np.int64)
                result = pd.CategoricalDtype(dtype.categories.take(order), ordered=False)
                codes = np.where(codes == -1, -1, np.argsort(order)[np.maximum(codes, 0)])
            return pd.CategoricalIndex(pd.Categorical.from_codes(codes, dtype=result), name=name)
        codes = np.asarray(arr.codes)
        return _Key(name, codes, _mask(codes != -1), categories, dtype)
    if _sent_as_is(dtype):
        return _Key(name, series.to_numpy(), None, lambda keys, valid: pd.Index(keys, name=name))
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and hasattr(arr, "_mask") and hasattr(arr, "_data") \
            and _sent_as_is(np.asarray(arr._data).dtype):
        # Nullable Int/UInt/Float/boolean: values and mask, as _pandas.column sends them.
        def nullable(keys: np.ndarray, valid: np.ndarray) -> Any:
            return pd.Index(dtype.construct_array_type()(keys, ~valid), name=name)
        return _Key(name, np.asarray(arr._data), _mask(~np.asarray(arr._mask)), nullable)
    # Strings, objects, datetimes, ...: codes in label order, -1 (NA) masked.
    codes, uniques = pd.factorize(series, sort=True)

    def labels(keys: np.ndarray, valid: np.ndarray) -> Any:
        return pd.Index(pd.api.extensions.take(uniques.array, np.where(valid, keys, -1), allow_fill=True), name=name)
    return _Key(name, _codes(codes, len(uniques)), _mask(codes != -1), labels)


def _numpy_key(label: Any, a: np.ndarray, shared: Optional[SharedArray | _Resident] = None) -> _Key:
    if _sent_as_is(a.dtype):
        return _Key(label, a, None, lambda keys, valid: keys, shared=shared)
    if isinstance(shared, _Resident):
        raise TypeError(f"key column {label!r} is the dataset {shared.name!r} of dtype {a.dtype}, which tally groups "
                        f"only after factorising it on the client; send the array itself")
    try:  # strings and other objects numpy orders: codes in label order
        uniques, codes = np.unique(a, return_inverse=True)
    except TypeError as e:
        raise TypeError(f"key column {label!r} of dtype {a.dtype}: its values cannot be ordered ({e}); missing "
                        f"keys in an object array need a pandas DataFrame") from None
    return _Key(label, _codes(codes.reshape(-1), len(uniques)), None, lambda keys, valid: uniques[keys], shared=shared)


# -- Value columns -------------------------------------------------------------

def _refuse(col: Column, func: str) -> None:
    """TypeError for a function groupby does not answer for the column."""
    if col.kind in ("datetime", "timedelta") and func not in _TIME_FUNCS:
        raise TypeError(f"column {col.name!r} of dtype {col.dtype}: tally's GroupBy answers "
                        f"{', '.join(_TIME_FUNCS)} for it, not {func!r}")


def _refuse_as_pandas(col: Column, funcs: list[str]) -> None:
    """TypeError where the installed pandas' groupby refuses a function for
    a DataFrame's column that tally could answer: pandas 3 refuses the
    quantile (and so agg('quantile')) of numpy bools."""
    if "quantile" in funcs and col.kind == "number" and col.values.dtype == np.bool_ \
            and groupby_refuses_bool_quantile():
        raise TypeError(f"column {col.name!r} of dtype bool: pandas' groupby refuses 'quantile' of bools (\"Cannot "
                        f"use quantile with bool dtype\"), and so does tally; convert it (.astype(int)) or leave it "
                        f"out")


def _as_sent(col: Column, funcs: list[str], partial: bool) -> Column:
    """The column as it is sent for ``funcs``: bools as uint8 (pandas
    before 3 takes the quantile of bools in groupby, which numpy, and so
    tally, refuse; every other answer is the same), and a float column needing a mask with
    one (_pandas.plan, with groupby's functions)."""
    for f in funcs:
        _refuse(col, f)
    if col.values.dtype == np.bool_:
        col = Column(col.name, col.values.view(np.uint8), col.valid, col.kind, col.dtype, col.size)
    return plan(col, funcs, {**_FUNCS, **(_PARTIAL_GROUP_FUNCS if partial else _GROUP_FUNCS)})


def _op_name(col: Column, func: str, partial: bool = False) -> str:
    """The op that answers ``func`` per group over the column as sent (as
    a partial state, with ``partial``)."""
    if partial and func in _PARTIAL_GROUP_FUNCS:
        return _PARTIAL_GROUP_FUNCS[func][1 if col.nan_ops else 0]
    if func in _GROUP_FUNCS:
        return _GROUP_FUNCS[func][0]
    if col.valid is not None and func in (_PARTIAL_EMPTY_SAFE if partial else _EMPTY_SAFE):
        return _EMPTY_SAFE[func]
    return _FUNCS[func][1 if col.nan_ops else 0]


def _count_name(col: Column) -> str:
    """The op counting each group's values present (pandas' count)."""
    return _FUNCS["count"][1 if col.nan_ops else 0]


@dataclass
class _Values:
    """A value column as sent, the functions asked of it, and its ops
    (``partial``: asked for their partial states; ``shared``: the column's
    SharedArray, whose region is sent where ``col.values`` lie in it, or
    resident dataset, sent by name)."""
    label: Any
    original: Column
    col: Column
    funcs: list[str]
    ops: list[Op]
    partial: bool = False
    shared: Optional[SharedArray | _Resident] = None


def _values_column(label: Any, col: Column, funcs: list[str], partial: bool = False,
                   shared: Optional[SharedArray | _Resident] = None) -> _Values:
    if isinstance(shared, _Resident):
        # Whether the plan would mask its NaNs, asked of no rows: the mask
        # is made from the values, which stay on the server.
        none = Column(col.name, col.values[:0], None, col.kind, col.dtype, 0)
        if _as_sent(none, funcs, partial).valid is not None:
            raise ValueError(f"column {label!r} is the dataset {shared.name!r} of dtype {col.values.dtype}: of "
                             f"{', '.join(map(repr, funcs))}, those with no NaN-skipping op (prod, any, all, idxmin, "
                             f"idxmax) need a mask of its NaNs, made from the values on the client; send the array "
                             f"itself or share it (Client.share)")
    sent = _as_sent(col, funcs, partial)
    names = [_count_name(sent)] + [_op_name(sent, f, partial) for f in funcs if f not in ("count", "size")]
    if "nunique" in funcs and sent.nan_ops:
        names.append("count")  # the rows, to tell whether a group holds a NaN
    return _Values(label, col, sent, funcs, [Op.parse(n) for n in dict.fromkeys(names)], partial, shared)


# -- Answers ---------------------------------------------------------------------

@dataclass
class Answer:
    """One aggregation's values, one per group. bottomk:1 and topk:1 find no
    value for a group with none present: ``found`` is False there, and
    ``rows`` holds the row of each value found (for idxmin and idxmax, the
    position of its label in the Index they are taken from)."""
    values: np.ndarray
    found: Optional[np.ndarray] = None
    rows: Optional[np.ndarray] = None
    # topk:k and bottomk:k of k > 1 (nlargest, nsmallest): every group's
    # entries one after another in ``values`` and ``rows``, ``lengths``
    # of them a group.
    lengths: Optional[np.ndarray] = None




def _page_answer(r: Any, n: int) -> Answer:
    raw = result_values(r)
    if r.aggregation.op not in (pb.OP_TOPK, pb.OP_BOTTOMK):
        return Answer(raw)
    if r.aggregation.k > 1:
        return Answer(raw, None, values_of(r.indices, np.int64), values_of(r.lengths, np.uint64).astype(np.int64))
    found = values_of(r.lengths, np.uint64) > 0
    values = np.zeros(n, dtype=raw.dtype)
    values[found] = raw
    rows = np.full(n, -1, dtype=np.int64)
    rows[found] = values_of(r.indices, np.int64)
    return Answer(values, found, rows)


def _concat(parts: list[Answer]) -> Answer:
    if len(parts) == 1:
        return parts[0]
    joined = [np.concatenate([getattr(p, f) for p in parts]) if getattr(parts[0], f) is not None else None
              for f in ("values", "found", "rows", "lengths")]
    return Answer(*joined)


@dataclass
class _Grouped:
    """What GroupBy answered, every page joined: the groups' keys (values
    and validity, per key column) and each aggregation's answer (its
    partial states, one row per group, where they were asked for)."""
    groups: int
    keys: list[tuple[np.ndarray, np.ndarray]]
    answers: list[Any]


def concat_states(parts: list[tp.Partial]) -> tp.Partial:
    """States of consecutive rows (pages of groups, blocks of rows), as one
    state of all the rows."""
    first = parts[0]
    if len(parts) == 1:
        return first
    fields = {name: np.concatenate([getattr(p, name) for p in parts]) for name in _STATE_ROWS}
    return tp.Partial(op=first.op, dtype=first.dtype, segmented=True, version=first.version, **fields)


def take_states(p: tp.Partial, at: np.ndarray) -> tp.Partial:
    """The rows ``at`` of a state, in that order; -1 gives the empty state
    (the merge identity) there."""
    if len(at) == 0 or at.min() >= 0:
        # Every row taken: each field indexed once, without building the
        # empty state first and assigning into it (a third of a Dask
        # group-by's merging at 500K groups went there).
        return tp.Partial(op=p.op, dtype=p.dtype, segmented=True, version=p.version,
                          **{name: getattr(p, name)[at] for name in _STATE_ROWS})
    out = tp.empty(p.op, p.dtype, len(at))
    out.version = p.version
    has = at >= 0
    for name in _STATE_ROWS:
        getattr(out, name)[has] = getattr(p, name)[at[has]]
    return out


# The fields of a Partial that hold one entry (histograms: a row) per row.
_STATE_ROWS = ("count", "value", "sum_squares", "mean", "m2", "index", "histogram", "below", "above", "nan",
               "elements", "function_state", "product", "nonzero", "max", "exact_sum", "exact_sum_squares")


class _Pages:
    """GroupBy's messages joined as they arrive (add), so that a message's
    bytes go once copied rather than every message being held until the
    last (h2o's q10, 10M groups in 339 messages: the client's peak memory
    2.4 -> 0.9 GB over its frame's), and the copying can overlap the wait
    for the next: each key column's values (and validity, made where some
    message has it) and each result of one number per group are copied into
    arrays of every group, made at the first message; the other results
    (top-k's entries, histograms, partial states) are kept per message and
    joined by joined(). len() is the messages added."""

    def __init__(self) -> None:
        self.messages = 0
        self.groups = 0
        self.read = 0  # groups held so far
        self.keys: list[np.ndarray] = []
        self.valid: list[Optional[np.ndarray]] = []  # None: every key so far valid
        self.values: list[Optional[np.ndarray]] = []  # None: the result kept per message
        self.kept: list[list] = []  # per result, where kept: (result, groups, partial states' bytes)

    def __len__(self) -> int:
        return self.messages

    def complete(self) -> bool:
        """Whether every group has arrived (a message past it is a repeat)."""
        return self.messages > 0 and self.read >= self.groups

    def add(self, page: Any) -> None:
        if self.messages == 0:
            self.groups = page.groups
            self.keys = [np.empty(self.groups, dtype=_key_dtype(c)) for c in page.keys]
            self.valid = [None] * len(page.keys)
            self.values = [None] * len(page.results)
            self.kept = [[] for _ in page.results]
        self.messages += 1
        at = page.first_group
        n = (len(page.keys[0].data) // _key_dtype(page.keys[0]).itemsize if len(page.keys)
             else self.groups - at)
        for k, c in enumerate(page.keys):
            self.keys[k] = _put(self.keys[k], at, np.frombuffer(c.data, dtype=_key_dtype(c)))
            bits = np.frombuffer(c.validity, dtype=np.uint8)
            if len(bits):
                if self.valid[k] is None:
                    self.valid[k] = np.ones(self.groups, dtype=bool)
                self.valid[k][at:at + n] = np.unpackbits(bits, count=n, bitorder="little").astype(bool)
        for j, r in enumerate(page.results):
            raw = _plain_values(r, n)
            if raw is not None and (self.values[j] is not None or (self.messages == 1 and not self.kept[j])):
                if self.values[j] is None:
                    self.values[j] = np.empty(self.groups, dtype=raw.dtype)
                self.values[j] = _put(self.values[j], at, raw)
                continue
            if self.values[j] is not None:
                raise RuntimeError(f"GroupBy's result {j} was one number a group, then not, at group {at}")
            states = page.partial_states(j) if isinstance(page, _Page) and r.WhichOneof("values") == "partials" \
                else None
            self.kept[j].append((r, n, states))
        self.read = at + n

    def joined(self, ops: Optional[list[Op]] = None) -> _Grouped:
        """Every group's keys and answers (partial states where ``ops``,
        the results' ops, are given)."""
        keys = [(v, m if m is not None else np.ones(self.groups, dtype=bool)) for v, m in zip(self.keys, self.valid)]
        answers = []
        for j, values in enumerate(self.values):
            if values is not None:
                if ops is not None:
                    raise RuntimeError(f"GroupBy answered result {j} as numbers where its partial states were asked")
                answers.append(Answer(values))
                continue
            if ops is None:
                answers.append(_concat([_page_answer(r, n) for r, n, _ in self.kept[j]]))
            else:
                answers.append(concat_states([tp.Partial.from_proto(ops[j], r, True, states)
                                              for r, _, states in self.kept[j]]))
        return _Grouped(self.groups, keys, answers)


def _key_dtype(c: Any) -> np.dtype:
    return FROM_WIRE[c.dtype].newbyteorder("<")


def _put(whole: np.ndarray, at: int, part: np.ndarray) -> np.ndarray:
    """``part`` into ``whole`` from ``at`` on; a part of another dtype
    widens the whole as np.concatenate would."""
    if part.dtype != whole.dtype:
        whole = whole.astype(np.result_type(whole.dtype, part.dtype))
    whole[at:at + len(part)] = part
    return whole


def _plain_values(r: Any, n: int) -> Optional[np.ndarray]:
    """A result's numbers where it holds one per group (not top-k's
    entries, histograms or partial states), else None."""
    if r.aggregation.op in (pb.OP_TOPK, pb.OP_BOTTOMK) or r.WhichOneof("values") not in ("doubles", "int64s",
                                                                                         "uint64s"):
        return None
    raw = result_values(r)
    return raw if len(raw) == n else None


def _group_values(v: _Values, func: str, got: Callable[[Op], Answer],
                  sizes: Optional[np.ndarray]) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """``func``'s value per group (rows of the table for idxmin and idxmax)
    and where pandas has none (None: every group has one)."""
    col = v.col
    if func == "size":
        return sizes, None
    count = got(Op.parse(_count_name(col))).values.astype(np.int64)
    if func == "count":
        return count, None
    if func == "nunique":
        distinct = got(Op.parse("count_distinct")).values.astype(np.int64)
        if col.nan_ops:
            # count_distinct counts NaN once; pandas' nunique leaves it out.
            distinct -= count < got(Op.parse("count")).values.astype(np.int64)
        return distinct, None
    a = got(Op.parse(_op_name(col, func, v.partial)))
    if a.found is not None:
        return (a.rows if func in _INDEX_FUNCS else a.values), (None if a.found.all() else ~a.found)
    missing = count <= _NEEDS.get(func, -1)
    return a.values, (missing if missing.any() else None)


# -- pandas' dtypes --------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _result_dtype(dtype: Any, func: str) -> Any:
    """The dtype of pandas' groupby ``func`` over a column of ``dtype``,
    asked of pandas, so that it follows its version (pandas 1.5 gives
    Float64 means and float64 std of Int64, int64 sums of bools)."""
    import pandas as pd

    try:
        values = pd.Series([0, 1, 1, None], dtype=object).astype(dtype)
    except (TypeError, ValueError):  # no missing values in this dtype
        values = pd.Series([0, 1, 1, 0], dtype=object).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pd.DataFrame({"k": [0, 0, 1, 1], "v": values}).groupby("k")["v"].agg(func).dtype


def _widened(dtype: Any, values: np.ndarray, missing: Optional[np.ndarray]) -> Any:
    """pandas 1.5 casts groups' sums and products back to the column's
    narrower integer dtype only where every one fits (its
    maybe_downcast_to_dtype); the others stay 64-bit. pandas 2 answers
    64-bit, which the probe then says already."""
    import pandas as pd

    base = dtype if isinstance(dtype, np.dtype) else getattr(dtype, "numpy_dtype", None)
    if base is None or base.kind not in "iu" or base.itemsize == 8:
        return dtype
    present = values if missing is None else values[~missing]
    info = np.iinfo(base)
    if not len(present) or (present.min() >= info.min and present.max() <= info.max):
        return dtype
    wide = np.dtype(np.int64 if base.kind == "i" else np.uint64)
    return wide if isinstance(dtype, np.dtype) else pd.api.types.pandas_dtype("Int64" if base.kind == "i" else "UInt64")


def _with_missing(values: np.ndarray, missing: Optional[np.ndarray], dtype: Any) -> Any:
    """``values`` as an array of ``dtype``, missing where ``missing`` says:
    NA in a nullable dtype, else NaN (in float64 where the dtype holds none,
    as pandas)."""
    if isinstance(dtype, np.dtype):
        if missing is None:
            return values.astype(dtype)
        out = values.astype(dtype if dtype.kind in "fc" else np.float64)
        out[missing] = np.nan
        return out
    data = values.copy() if missing is None else np.where(missing, 0, values)
    mask = np.zeros(len(values), dtype=bool) if missing is None else missing
    return dtype.construct_array_type()(data.astype(dtype.numpy_dtype), mask)


def _times(ticks: np.ndarray, missing: Optional[np.ndarray], dtype: Any, kind: str) -> Any:
    """int64 ticks as datetime64 (with the column's time zone) or timedelta64."""
    import pandas as pd

    i8 = ticks.astype(np.int64)
    if missing is not None:
        i8 = np.where(missing, np.iinfo(np.int64).min, i8)  # NaT
    unit = time_unit(dtype)
    if kind == "timedelta":
        return pd.array(i8.view(f"m8[{unit}]"))
    out = pd.array(i8.view(f"M8[{unit}]"))
    tz = getattr(dtype, "tz", None)
    return out.tz_localize("UTC").tz_convert(tz) if tz is not None else out


def _labels(index: Any, rows: np.ndarray, missing: Optional[np.ndarray]) -> Any:
    """The index labels of table rows; NaN where there is no row, as pandas'
    idxmin (a numeric index becomes float64 then); no groups answer an
    empty float64 column, as pandas' does."""
    import pandas as pd

    if not len(rows):
        # pandas 3 answers no groups in the index's dtype, pandas 1.5 in float64.
        return index.array[:0] if groupby_idx_refuses_groups_without_values() else np.empty(0, dtype=np.float64)
    if isinstance(index, pd.MultiIndex):
        index = index.to_flat_index()  # tuples, as pandas labels them
    if missing is None:
        return index.array.take(rows)  # the index's dtype (pandas 3's str labels stay str)
    taken = index.take(np.where(missing, 0, rows))
    out = taken.to_numpy(dtype=np.float64 if taken.dtype.kind in "iuf" else object)
    out[missing] = np.nan
    return out


def _pandas_values(v: _Values, func: str, values: np.ndarray, missing: Optional[np.ndarray], index: Any) -> Any:
    import pandas as pd

    col = v.original
    if func in _COUNTS:
        return _with_missing(values, None, _count_dtype(col, func))
    if func in _INDEX_FUNCS:
        if missing is not None and groupby_idx_refuses_groups_without_values():
            raise _no_value_for_index(v.label, func)
        return _labels(index, values, missing)
    if col.kind == "category":
        codes = values.astype(np.int64) if missing is None else np.where(missing, -1, values.astype(np.int64))
        return pd.Categorical.from_codes(codes, dtype=col.dtype)
    if col.kind in ("datetime", "timedelta"):
        return _times(values, missing, col.dtype, col.kind)
    return _with_missing(values, missing, _widened(_result_dtype(col.dtype, func), values, missing))


def _count_dtype(col: Column, func: str) -> Any:
    """The dtype of pandas' count, size and nunique per group: int64, but a
    nullable column's count and size are Int64 where pandas makes them so
    (from pandas 2: GroupBy.count answers an IntegerArray for a
    BaseMaskedArray, SeriesGroupBy.size converts to numpy_nullable dtypes;
    nunique stays int64), which the probe of pandas says."""
    return _result_dtype(col.dtype, func) if col.kind == "masked" else np.dtype(np.int64)


def _no_value_for_index(label: Any, func: str) -> ValueError:
    return ValueError(f"column {label!r}: {func} with skipna=True of a group with no value (all NaN or NA, or "
                      f"an unobserved category): pandas raises ValueError for it from 3.0, and so does tally; "
                      f"drop those rows first (dropna), or pass observed=True")


def _multi_index(levels: list, names: list) -> Any:
    """A MultiIndex of the keys' Indexes, NA kept as a value of its level
    (as pandas' groupby makes it with dropna=False), not as code -1."""
    import pandas as pd

    uniques, codes = [], []
    for idx in levels:
        c, u = pd.factorize(idx)
        na = c == -1
        if na.any():
            u = u.append(idx[na][:1])
            c = np.where(na, len(u) - 1, c)
        uniques.append(u)
        codes.append(c)
    return pd.MultiIndex(levels=uniques, codes=codes, names=names, verify_integrity=False)


def _numpy_values(v: _Values, func: str, values: np.ndarray, missing: Optional[np.ndarray]) -> np.ndarray:
    """numpy's dtype for ``func`` over the column (int64 counts and rows);
    NaN where there is no value (a float64 array where the dtype holds no
    NaN), -1 for idxmin and idxmax of a group with no value."""
    if func in _COUNTS or func in _INDEX_FUNCS:
        out = values.astype(np.int64)
        if missing is not None:
            out[missing] = -1
        return out
    dtype = _values.value_dtype(Op.parse(_FUNCS[func][0]), v.original.values.dtype)
    return _with_missing(values, missing, dtype)


# -- The call --------------------------------------------------------------------

class _Names:
    """Unique wire names for columns (tally.proto: 1 to 256 bytes), taken
    from their labels so that the server's errors name them."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, label: Any) -> str:
        base = str(label).encode()[:_MAX_NAME_BYTES - 8].decode(errors="ignore") or "column"
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}#{n}"
        self.used.add(name)
        return name


def _wire_column(name: str, values: np.ndarray, valid: Optional[np.ndarray],
                 shared: Optional[SharedArray | _Resident] = None, packed: Optional[PackedColumns] = None,
                 streamed: Optional[dict] = None) -> Any:
    """The column as GroupBy takes it: a resident dataset by its name;
    where its values as sent are a contiguous view of ``shared``'s memory
    (its own values, or bools seen as uint8), the place in its region that
    holds them; else where ``packed`` holds their copy; else the bytes, in
    the column or, with ``streamed``, kept there by name (its bytes and
    validity, for GroupByStream's chunks)."""
    if isinstance(shared, _Resident):  # the dataset's own dtype, read where it lies
        return pb.Column(name=name, dataset=shared.name)
    a, _ = prepare(values)
    c = pb.Column(name=name, dtype=wire_dtype(a.dtype))
    region = None if shared is None else shared.region_column(a)
    if region is None and packed is not None:
        region = packed.region_column(values)
    validity = None if valid is None else prepare_validity(valid, a.shape)
    if region is not None:
        c.region.CopyFrom(region)
    elif streamed is not None:
        streamed[name] = (byte_view(a), validity)
        return c
    else:
        c.data = byte_view(a).tobytes()
    if validity is not None:
        c.validity = validity
    return c


def _batches(values: list[_Values], room: int) -> list[list[_Values]]:
    """Value columns in requests of at most ``room`` aggregations each (the
    first also counts the rows)."""
    out: list[list[_Values]] = [[]]
    used = 1
    for v in values:
        if out[-1] and used + len(v.ops) > room:
            out.append([])
            used = 0
        out[-1].append(v)
        used += len(v.ops)
    return out


def _unobserved(result: Any, keys: list[_Key], outputs: list[_Output], sort: bool) -> Any:
    """pandas' observed=False: every category of a category key is a group,
    in the order of the result's categories (NA last), those with no rows
    answering what pandas answers for no values (sum 0, count 0, NaN, ...).
    Other keys take their observed values; with several keys, every
    combination is a group (pandas' product of the levels)."""
    import pandas as pd

    levels = []
    for i, k in enumerate(keys):
        seen = result.index.get_level_values(i)
        if k.category is None:
            level = seen.unique()
            levels.append(level.sort_values(na_position="last") if sort and len(keys) > 1 else level)
            continue
        every = list(range(len(seen.categories))) + [-1] * bool((np.asarray(seen.codes) == -1).any())
        levels.append(pd.CategoricalIndex(pd.Categorical.from_codes(every, dtype=seen.dtype), name=k.label))
    full = levels[0] if len(levels) == 1 else pd.MultiIndex.from_product(levels, names=[k.label for k in keys])
    if len(full) == len(result) and full.equals(result.index):
        return result
    # Taken by position, not reindexed: a fill keeps the column's dtype (a
    # uint64 sum through float64 would round).
    at = result.index.get_indexer(full)

    def grown(column: Any, func: str) -> Any:
        if func in _INDEX_FUNCS and (at == -1).any() and groupby_idx_refuses_groups_without_values():
            raise _no_value_for_index(column.name, func)
        fill = _EMPTY_GROUP.get(func)
        values = column.to_numpy() if isinstance(column.dtype, np.dtype) else column.array
        if fill is None and isinstance(values, np.ndarray) and values.dtype.kind in "biu":
            # NaN for no value, as pandas: in float64, but with several keys
            # pandas reindexes its observed answer, which makes bools objects.
            values = values.astype(object if values.dtype.kind == "b" and len(keys) > 1 else np.float64)
        return pd.api.extensions.take(values, at, allow_fill=True, fill_value=fill)

    if isinstance(result, pd.Series):
        return pd.Series(grown(result, "size"), index=full, name=result.name)
    frame = pd.DataFrame({j: grown(result.iloc[:, j], out.func) for j, out in enumerate(outputs)}, index=full)
    frame.columns = result.columns
    return frame


@dataclass
class GroupByPlan:
    """A groupby call made ready: the result's columns and shape, the key
    columns and value columns as sent, whether the groups' sizes are asked
    for, and the table's rows."""
    frame: bool
    by: list
    outputs: list[_Output]
    shape: str
    keys: list[_Key]
    values: list[_Values]
    want_sizes: bool
    rows: int


def plan_groupby(data: Any, by: Any, agg: Any, named: dict, sort: bool, dropna: bool, observed: bool,
                 partial: bool = False) -> GroupByPlan:
    """Checks a groupby call's arguments and prepares its columns (the value
    columns' ops asking for partial states, with ``partial``). The errors
    :meth:`GroupByFunctions.groupby` names."""
    frame = type(data).__module__.startswith("pandas")
    if frame:
        import pandas as pd

        if not isinstance(data, pd.DataFrame):
            raise TypeError(f"groupby takes a pandas DataFrame or a mapping of column names to arrays, "
                            f"not {type(data).__name__}")
        if not data.columns.is_unique:
            raise ValueError("groupby needs unique column labels; this DataFrame repeats "
                             f"{list(data.columns[data.columns.duplicated()])}")
        labels = list(data.columns)
    elif isinstance(data, Mapping):
        labels = list(data)
    else:
        raise TypeError(f"groupby takes a pandas DataFrame or a mapping of column names to arrays, "
                        f"not {type(data).__name__}")
    if not isinstance(sort, bool) or not isinstance(dropna, bool) or not isinstance(observed, bool):
        raise TypeError("sort, dropna and observed are True or False")
    by = list(by) if isinstance(by, list) else [by]
    if not by:
        raise ValueError("by: at least one key column is required")
    for label in by:
        try:
            hash(label)
        except TypeError:
            raise TypeError(f"by: give column labels (one, or a list), not {type(label).__name__}; grouping "
                            f"by arrays or functions is not supported") from None
        if label not in labels:
            raise KeyError(f"by: no column {label!r} in the data")
    outputs, shape = _outputs(labels, by, agg, named)
    for out in outputs:
        if out.column is not None and out.column not in labels:
            raise KeyError(f"agg: no column {out.column!r} in the data")

    shared: dict[Any, SharedArray] = {}  # a mapping's SharedArray columns, by label
    if frame:
        keys = [_pandas_key(data[label], sort) for label in by]
        columns = {c: column(data[c]) for c in dict.fromkeys(o.column for o in outputs if o.column is not None)}
        rows = len(data)
    else:
        arrays = {}
        for label in dict.fromkeys(by + [o.column for o in outputs if o.column is not None]):
            arrays[label] = np.asarray(_shared_column(label, data[label], shared))
        rows = _same_length(arrays)
        keys = [_numpy_key(label, arrays[label], shared.get(label)) for label in by]
        columns = {}
        for c in dict.fromkeys(o.column for o in outputs if o.column is not None):
            a = arrays[c]
            if not _takes(a.dtype):
                raise TypeError(f"column {c!r} holds dtype {a.dtype}, which tally cannot aggregate; "
                                f"supported: {SUPPORTED_NAMES}")
            columns[c] = Column(c, a, None, "number", a.dtype, len(a))
    funcs: dict[Any, list[str]] = {}
    for out in outputs:
        if out.column is not None:
            funcs.setdefault(out.column, [])
            if out.func not in funcs[out.column]:
                funcs[out.column].append(out.func)
    if frame:
        for label, fs in funcs.items():
            _refuse_as_pandas(columns[label], fs)
    values = [_values_column(label, columns[label], fs, partial, shared.get(label)) for label, fs in funcs.items()]
    return GroupByPlan(frame, by, outputs, shape, keys, values, any(o.func == "size" for o in outputs), rows)


def _shared_column(label: Any, x: Any, shared: dict) -> Any:
    """A mapping's column as numpy reads it: a SharedArray's read-only view,
    a resident dataset's (DatasetInfo) stand-in (either noted in ``shared``
    by label), anything else as it is. ValueError, naming the column, for a
    SharedArray or dataset of rows, or a closed SharedArray."""
    from .client import DatasetInfo  # (client.py imports this module)

    if isinstance(x, DatasetInfo):
        if x.row_length:
            raise ValueError(f"column {label!r}: the dataset {x.name!r} holds rows ({x.length // x.row_length} x "
                             f"{x.row_length}), not a column")
        if not _takes(x.dtype):
            raise TypeError(f"column {label!r}: the dataset {x.name!r} holds dtype {x.dtype}, which this client "
                            f"cannot read")
        resident = _Resident(x.name, np.broadcast_to(np.zeros((), dtype=x.dtype), (x.length,)))
        shared[label] = resident
        return resident.stand_in
    if not isinstance(x, SharedArray):
        return x
    if x.row_length:
        raise ValueError(f"column {label!r}: a SharedArray of rows ({x.length // x.row_length} x {x.row_length}) "
                         f"is not a column; share a 1-D array")
    try:
        view = x.values
    except ValueError as e:
        raise ValueError(f"column {label!r}: {e}") from None
    shared[label] = x
    return view


def assemble_result(p: GroupByPlan, decoded: list, answers: Mapping[Any, Callable[[Op], Answer]],
                    sizes: Optional[np.ndarray], index: Any, sort: bool, observed: bool) -> Any:
    """The result pandas gives (a dict of numpy arrays for a mapping): from
    the groups' keys as labels (``decoded``, per key column), each value
    column's answers by op, the groups' sizes (when asked for) and the
    Index whose labels idxmin's and idxmax's rows are."""
    results = []
    for out in p.outputs:
        if out.column is None:
            results.append((sizes, None, None))
            continue
        v = next(x for x in p.values if x.label == out.column)
        results.append((*_group_values(v, out.func, answers[out.column], sizes), v))

    if not p.frame:
        out_dict: dict[Any, Any] = {}
        for k, labels in zip(p.keys, decoded):
            out_dict[k.label] = labels
        for out, (vals, missing, v) in zip(p.outputs, results):
            label = out.func if out.label is None else out.label
            if label in out_dict:
                raise ValueError(f"result column {label!r} has the name of a key column; rename it "
                                 f"(named aggregations)")
            out_dict[label] = vals.astype(np.int64) if v is None else _numpy_values(v, out.func, vals, missing)
        return out_dict

    import pandas as pd

    index_of_groups = decoded[0] if len(decoded) == 1 else _multi_index(decoded, p.by)
    if p.shape == "series":
        result = pd.Series(sizes.astype(np.int64), index=index_of_groups)
    else:
        cols = {j: (vals.astype(np.int64) if v is None else _pandas_values(v, out.func, vals, missing, index))
                for j, (out, (vals, missing, v)) in enumerate(zip(p.outputs, results))}
        result = pd.DataFrame(cols, index=index_of_groups)
        result.columns = (pd.MultiIndex.from_tuples([o.label for o in p.outputs]) if p.shape == "multi" and p.outputs
                          else pd.Index([o.label for o in p.outputs]))
    if not observed and any(k.category is not None for k in p.keys):
        result = _unobserved(result, p.keys, p.outputs, sort)
    if any(k.category is not None for k in p.keys) and groupby_keeps_category_dtype():
        result = _category_dtypes(result, p.keys)
    return result


def _category_dtypes(result: Any, keys: list[_Key]) -> Any:
    """pandas 3's dtypes of category keys' groups (groupby_keeps_category_dtype):
    the column's own categories, in its order, observed or not (pandas
    3.0.6 keeps an unused category in the index's dtype with observed=True)."""
    import pandas as pd

    multi = isinstance(result.index, pd.MultiIndex)
    levels = list(result.index.levels) if multi else [result.index]
    for i, k in enumerate(keys):
        if k.category is not None:
            levels[i] = levels[i].set_categories(k.category.categories)
    return result.set_axis(result.index.set_levels(levels, verify_integrity=False) if multi else levels[0])


class GroupByFunctions:
    """pandas' ``DataFrame.groupby(...).agg(...)`` as a method of
    :class:`tally.Client`."""

    def groupby(self, data: Any, by: Any, agg: Any = None, *, sort: bool = True, dropna: bool = True,
                observed: Optional[bool] = None, timeout: Optional[float] = None, **named: Any) -> Any:
        """What ``data.groupby(by, sort=sort, dropna=dropna,
        observed=observed).agg(agg)`` answers, each group aggregated by the
        server (GroupBy).

        ``data``: a pandas DataFrame, or a mapping of column names to 1-D
        numpy arrays of one length. ``by``: a column label, or a list of 1
        to 8 (a composite key; more are INVALID_ARGUMENT, naming ``keys``).
        ``agg``: a function name, a list of names, a dict {column: name or
        list of names}, or pandas' named aggregations as keyword arguments
        (``total=("price", "sum")``). Functions, as pandas' groupby methods
        with their defaults (NaN and NA skipped, ddof=1 for std and var):
        sum, prod, mean, min, max, count, size, std, var, median, quantile
        (q=0.5, linear), any, all, nunique (NaN not counted), idxmin and
        idxmax (index labels; NaN for a group with no value, where pandas
        3 raises ValueError, and so does tally there). first, last and
        others are a ValueError naming them. What pandas refuses, tally
        refuses with the same exception (pandas 3: quantile of bools,
        TypeError).

        Keys: integer, bool and float columns are sent as they are (NaN is
        NA; -0.0 and 0.0 one key); nullable Int/UInt/Float/boolean as values
        and a mask; category as its codes (in the categories' order, with
        pandas' ``observed``, whose default, None, is pandas': False, True
        from pandas 3); strings, objects and datetimes are factorised
        here (pandas.factorize, sort=True) and sent as codes. NA keys are
        dropped, or with ``dropna=False`` one more group, last when sorted.
        ``sort=False``: groups in the order their keys are first seen.
        Values: as :meth:`agg` takes them (numbers, nullable, category's
        count, nunique, min and max; datetime64 and timedelta64's min, max,
        count, size and nunique).

        A mapping's column may also be a 1-D :class:`SharedArray`
        (:meth:`share`; one of rows is a ValueError naming the column),
        which the server then reads in place, as a region column (no bytes
        sent), wherever the column goes as it lies: keys of numbers and
        bools, value columns (bools as uint8, the same bytes). A float value
        column that needs a mask of its non-NaN values (prod, any, all,
        idxmin, idxmax) goes as its region with that mask beside it, one bit
        a row; a key factorised here (bfloat16) goes inline, as its codes.
        The client reads the values it needs for these (masks, codes,
        lengths) through the read-only :attr:`SharedArray.values`; the
        answers are those of the same numpy arrays.

        A mapping's column may also be a resident dataset: the
        :class:`DatasetInfo` that :meth:`put_dataset` or
        :meth:`describe_dataset` gives. It goes by name and the server
        reads it where it lies (a cuda server groups a key and values
        resident on one GPU there); its values never come to the client, so
        what needs them there is a ValueError naming the column: a float
        column's prod, any, all, idxmin and idxmax (its NaNs masked on the
        client), a key to factorise, a dataset of rows.

        Returns pandas' answer for a DataFrame: a DataFrame indexed by the
        keys (a MultiIndex for several), columns as pandas names them
        (``(column, func)`` pairs for lists), pandas' dtypes; a Series for
        ``agg="size"``. For a mapping, a dict: each key label to the
        groups' keys (numpy arrays; a string key's labels), then each
        result column's label, as pandas would name it, to a numpy array
        with one value per group (numpy's dtype for the function: int64
        counts; NaN where a group has no value; idxmin and idxmax as row
        positions, -1 for none). Needs no pandas.

        A table of more than ``stream_threshold`` bytes sent over gRPC goes
        in chunks (GroupByStream). One past the server's whole in-flight
        budget (RESOURCE_EXHAUSTED naming ``--max_inflight_bytes``) is, for
        a DataFrame without named aggregations, grouped again in runs of
        rows that each hold at most half the budget, every run answering
        its groups' partial states, merged here as :func:`tally.dask.groupby`
        merges partitions: the same answer.

        Errors: KeyError for a column not in ``data``; ValueError for
        columns of different lengths; TypeError for a dtype tally cannot
        take, naming the column; :class:`tally.Error` for what the server
        refuses (INVALID_ARGUMENT naming the field)."""
        if observed is None:
            observed = _default_observed(data)
        p = plan_groupby(data, by, agg, named, sort, dropna, observed)
        try:
            grouped, answers, sizes = self._group(p.keys, p.values, p.want_sizes, p.rows, sort, dropna, timeout)
        except Exception as e:  # tally.Error (client.py imports this module)
            parts = _parts_within_budget(e) if p.frame and not named else None
            if parts is None:
                raise
            return self._groupby_in_parts(data, by, agg, sort, dropna, observed, parts, timeout)
        decoded = [k.decode(kv, kvalid) for k, (kv, kvalid) in zip(p.keys, grouped.keys)]
        return assemble_result(p, decoded, {label: got.__getitem__ for label, got in answers.items()},
                         None if sizes is None else sizes.values.astype(np.int64),
                         data.index if p.frame else None, sort, observed)

    def _groupby_in_parts(self, df: Any, by: Any, agg: Any, sort: bool, dropna: bool, observed: bool, parts: int,
                          timeout: Optional[float]) -> Any:
        """groupby of a frame the server cannot hold whole: ``parts`` runs
        of its rows, each grouped into partial states, merged here as
        tally.dask merges a Dask DataFrame's partitions, then finished."""
        from . import _dask_steps as steps

        step = -(-len(df) // parts)
        states = [steps.group_part(self, df.iloc[at:at + step], by, agg, sort, dropna, block, timeout)
                  for block, at in enumerate(range(0, len(df), step))]
        return steps.finish_groups(steps.merge_groups(*states), df.iloc[:0], by, agg, sort, dropna, observed)

    def groupby_nlargest(self, data: Any, by: Any, column: Any, n: int = 5, *, sort: bool = True,
                         dropna: bool = True, timeout: Optional[float] = None) -> Any:
        """What ``data.groupby(by, sort=sort, dropna=dropna)[column].nlargest(n)``
        answers: each group's n largest values of ``column`` (fewer where the
        group has fewer), largest first, ties to the earlier row (pandas'
        ``keep="first"``), NaN and NA left out; the server's topk per group
        (the h2o benchmark's "largest two v3 by id6").

        ``data``, ``by``, ``sort`` and ``dropna`` as :meth:`groupby` takes
        them. Returns, for a DataFrame, a Series named ``column`` in its
        dtype, indexed by the keys and then the rows' index labels (a
        MultiIndex, as pandas'); for a mapping, a dict: each key label to
        the key of each value, ``"row"`` to each value's row position, and
        ``column`` to the values. ``n`` of 0 answers nothing; more than the
        server's top-k limit (65,536) is :class:`tally.Error`
        (INVALID_ARGUMENT naming k). A column of bools is a TypeError, as in
        pandas."""
        return self._group_extremes(data, by, column, n, True, sort, dropna, timeout)

    def groupby_nsmallest(self, data: Any, by: Any, column: Any, n: int = 5, *, sort: bool = True,
                          dropna: bool = True, timeout: Optional[float] = None) -> Any:
        """:meth:`groupby_nlargest`'s counterpart:
        ``data.groupby(by, sort=sort, dropna=dropna)[column].nsmallest(n)``,
        smallest first (the server's bottomk per group)."""
        return self._group_extremes(data, by, column, n, False, sort, dropna, timeout)

    def _group_extremes(self, data: Any, by: Any, column: Any, n: int, largest: bool, sort: bool, dropna: bool,
                        timeout: Optional[float]) -> Any:
        method = "nlargest" if largest else "nsmallest"
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"groupby_{method}: n is an int, not {type(n).__name__}")
        if n < 0:
            raise ValueError(f"groupby_{method}: n must be 0 or more, got {n}")
        p = plan_groupby(data, by, {column: "count"}, {}, sort, dropna, True)
        (v,) = p.values
        x = v.original.values
        dtype = data[column].dtype if p.frame else x.dtype
        if v.original.kind != "number" or x.dtype.kind not in "iuf":
            raise TypeError(f"column {column!r} of dtype {dtype}: tally's groupby_{method} takes numpy's integer "
                            f"and float columns (pandas refuses bools; for a nullable column, "
                            f".astype('float64') or a numpy dtype)")
        # pandas' order: the n largest (smallest) numbers, ties to the
        # earlier row, then NaN rows in row order where a group has fewer
        # numbers than n. bottomk is numpy's sort order, NaN last and ties
        # by row: nsmallest as it is, and a float column's nlargest as the
        # bottomk of its negation (exact); integers have no NaN, and
        # nlargest is their topk.
        negate = largest and x.dtype.kind == "f"
        if negate and v.shared is not None:
            raise ValueError(f"column {column!r} is shared or resident: groupby_nlargest of a float column sends "
                             f"its negation, made from the values on the client; send the array itself")
        sent = v.col if not negate else Column(v.col.name, np.negative(x), None, "number", x.dtype, len(x))
        try:
            op = Op.parse(f"{'topk' if largest and not negate else 'bottomk'}:{max(int(n), 1)}")
        except ValueError as e:
            raise ValueError(f"groupby_{method}: n of {n} is past what top-k takes ({e})") from None
        v = _Values(v.label, v.original, sent, ["count"], [op], False, None if negate else v.shared)
        if n == 0 or p.rows == 0:
            values, rows, lengths = np.empty(0), np.empty(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
            decoded = [k.decode(k.values[:0], np.empty(0, dtype=bool)) for k in p.keys]
        else:
            grouped, answers, _ = self._group(p.keys, [v], False, p.rows, sort, dropna, timeout)
            a = answers[column][op]
            if a.lengths is None:  # n = 1: one entry a group where it has one
                values, rows, lengths = a.values[a.found], a.rows[a.found], a.found.astype(np.int64)
            else:
                values, rows, lengths = a.values, a.rows, a.lengths
            if negate:  # the column's own values at the rows found (NaN's sign bit as it was)
                values = x[rows]
            decoded = [k.decode(kv, kvalid) for k, (kv, kvalid) in zip(p.keys, grouped.keys)]
        values = values.astype(x.dtype)
        if not p.frame:
            out = {label: np.repeat(np.asarray(d), lengths) for label, d in zip(p.by, decoded)}
            out["row"] = rows
            out[column] = values
            return out
        import pandas as pd

        levels = [pd.Index(d).repeat(lengths) for d in decoded]
        # The rows' labels, a level each of the frame's index (pandas' too).
        rows_index = data.index.take(rows)
        levels += [rows_index.get_level_values(i) for i in range(data.index.nlevels)]
        index = _multi_index(levels, list(p.by) + list(data.index.names))
        return pd.Series(values, index=index, name=column).astype(dtype)

    def _group(self, keys: list[_Key], values: list[_Values], want_sizes: bool, rows: int, sort: bool,
               dropna: bool, timeout: Optional[float], base_index: Optional[int] = None
               ) -> tuple[_Grouped, dict[Any, dict[Op, Any]], Any]:
        """Sends the GroupBy requests (one per batch of value columns, each
        with the keys) and joins their pages: the first request's groups,
        each value column's answers by op, and the answer counting each
        group's rows (None unless ``want_sizes``). With ``base_index`` every
        aggregation asks for its partial states (argmin's rows counted from
        base_index), which the answers then are."""
        if rows == 0:
            # No rows, no groups: answered here, as the server refuses min
            # and max of an empty column even with no group to answer.
            def empty(op: Op, dtype: np.dtype) -> Any:
                if base_index is not None:
                    return tp.empty(op, dtype, 0)
                found = np.empty(0, dtype=bool) if op.kind in ("topk", "bottomk") else None
                return Answer(np.empty(0), found, None if found is None else np.empty(0, dtype=np.int64))
            return (_Grouped(0, [(k.values[:0], np.empty(0, dtype=bool)) for k in keys], []),
                    {v.label: {op: empty(op, v.col.values.dtype) for op in v.ops} for v in values},
                    empty(Op.parse("count"), np.dtype(np.uint8)) if want_sizes else None)
        # Each group's rows: OP_COUNT over a key column without a mask (a
        # masked one counts only the rows whose key is present), else over a
        # column of zeros sent for it. Partial states: always the zeros, so
        # that every part's states of it have one dtype to merge.
        counted = None if base_index is not None else next((i for i, k in enumerate(keys) if k.valid is None), None)
        zeros = np.zeros(rows, dtype=np.uint8) if want_sizes and counted is None else None
        inline = ([k.values for k in keys if k.shared is None] + [v.col.values for v in values if v.shared is None]
                  + ([zeros] if zeros is not None else []))
        packed = self._pack_columns(inline, timeout)
        # Columns sent with the request come to at least stream_threshold
        # bytes: in chunks instead (GroupByStream), so that a table of any
        # size fits the server's message limit.
        streamed = ({} if packed is None and sum(np.asarray(a).nbytes for a in inline) >= max(self.stream_threshold, 1)
                    else None)
        try:
            return self._group_sent(keys, values, want_sizes, base_index, zeros, counted, packed, streamed, rows,
                                    sort, dropna, timeout)
        finally:
            if packed is not None:
                packed.close()

    def _group_sent(self, keys: list[_Key], values: list[_Values], want_sizes: bool, base_index: Optional[int],
                    zeros: Optional[np.ndarray], counted: Optional[int], packed: Optional[PackedColumns],
                    streamed: Optional[dict], rows: int, sort: bool, dropna: bool, timeout: Optional[float]
                    ) -> tuple[_Grouped, dict[Any, dict[Op, Any]], Any]:
        """_group's requests, the columns sent inline, in chunks (where
        ``streamed`` is a dict, which gathers their bytes) or as regions."""
        names = _Names()
        key_columns = [_wire_column(names(k.label), k.values, k.valid, k.shared, packed, streamed) for k in keys]
        key_names = [c.name for c in key_columns]
        size_column = None if counted is None else key_columns[counted]
        extra = []
        if zeros is not None:
            size_column = _wire_column(names("size"), zeros, None, None, packed, streamed)
            extra.append(size_column)
        wire = {id(v): _wire_column(names(v.label), v.col.values, v.col.valid, v.shared, packed, streamed)
                for v in values}
        count = Op.parse("count")
        answers: dict[Any, dict[Op, Any]] = {}
        sizes = None
        first: Optional[_Grouped] = None
        for n, batch in enumerate(_batches(values, _MAX_AGGREGATIONS)):
            aggs, owners = [], []
            if n == 0 and want_sizes:
                aggs.append(pb.GroupAggregation(column=size_column.name, aggregation=self._wire_op(count, base_index)))
                owners.append(None)
            for v in batch:
                for op in v.ops:
                    aggs.append(pb.GroupAggregation(column=wire[id(v)].name,
                                                    aggregation=self._wire_op(op, base_index)))
                    owners.append((v.label, op))
            if not aggs:  # no value column: the keys alone, counted
                aggs.append(pb.GroupAggregation(column=key_names[0], aggregation=self._wire_op(count, base_index)))
                owners.append(None)
            request = pb.GroupByRequest(columns=key_columns + extra * (n == 0) + [wire[id(v)] for v in batch],
                                        keys=key_names, aggregations=aggs, first_seen_order=not sort,
                                        keep_na_keys=not dropna)
            ops = None if base_index is None else [count if o is None else o[1] for o in owners]
            if streamed is None:
                pages = self._call(self._group_by_pages, request, timeout)
            else:
                send = functools.partial(self._group_by_stream_pages, streamed=streamed, rows=rows)
                pages = self._call(send, request, timeout)
            grouped = pages.joined(ops)
            if first is None:
                first = grouped
            elif grouped.groups != first.groups:
                raise RuntimeError(f"GroupBy answered {grouped.groups} groups, then {first.groups} for the same keys")
            for owner, a in zip(owners, grouped.answers):
                if owner is None:
                    if n == 0 and want_sizes:
                        sizes = a
                    continue
                answers.setdefault(owner[0], {})[owner[1]] = a
        return first, answers, sizes

    def _group_by_pages(self, request: Any, timeout: Optional[float], metadata: Any) -> _Pages:
        """GroupBy's answer, its messages joined as they are read (_Pages;
        errors raise as they are read). A message past the last group ends
        the call: for an answer of no groups the server repeats its one
        message without end."""
        group_by = self._raw_method("unary_stream", "GroupBy", _Page)
        return _read_pages(group_by(request.SerializeToString(), timeout=timeout, metadata=metadata))

    def _group_by_stream_pages(self, request: Any, timeout: Optional[float], metadata: Any, *, streamed: dict,
                               rows: int) -> _Pages:
        """As _group_by_pages, the request's columns named in ``streamed``
        sent in chunks of chunk_bytes (GroupByStream): each column's bytes,
        then its validity."""
        group_by = self._raw_method("stream_stream", "GroupByStream", _Page)  # messages serialized below
        order = [(i, c.name) for i, c in enumerate(request.columns) if c.name in streamed]
        masked = [i for i, name in order if streamed[name][1] is not None]
        header = pb.GroupByStreamRequest.Header(request=request, rows=rows, masked_columns=masked)
        step = self.chunk_bytes
        chunk = pb.GroupByStreamRequest.CHUNK_FIELD_NUMBER
        column = pb.GroupByStreamRequest.COLUMN_FIELD_NUMBER
        validity_field = pb.GroupByStreamRequest.VALIDITY_FIELD_NUMBER

        def messages() -> Iterator[bytes]:
            yield pb.GroupByStreamRequest(header=header).SerializeToString()
            for i, name in order:
                data, validity = streamed[name]
                for at in range(0, len(data), step):
                    yield _wire.chunk_message(data[at:at + step], chunk, ((column, i),))
                bits = memoryview(validity or b"")
                for at in range(0, len(bits), step):
                    yield _wire.chunk_message(bits[at:at + step], chunk, ((column, i), (validity_field, 1)))

        return _read_pages(group_by(messages(), timeout=timeout, metadata=metadata))


def _read_pages(call: Any) -> _Pages:
    """A GroupBy call's messages, up to the one that holds its last group,
    joined as they arrive."""
    pages = _Pages()
    for page in call:
        if pages.complete():
            call.cancel()
            break
        pages.add(page)
    return pages


class _Page:
    """A GroupByResponse and the bytes it arrived in: its fields read as the
    message's, and each result's partial states handed on as their own
    bytes (partial_states)."""

    __slots__ = ("raw", "message")

    def __init__(self, raw: bytes):
        self.raw = raw
        self.message = pb.GroupByResponse.FromString(raw)

    def __getattr__(self, name: str) -> Any:
        if name in _Page.__slots__:  # not set yet (a copy being made): no message to ask
            raise AttributeError(name)
        return getattr(self.message, name)

    def partial_states(self, j: int) -> Optional[bytes]:
        """Result j's PartialStates bytes (GroupByResponse.results = 4,
        AggregationResult.partials = 6); None where it holds none."""
        result = _wire.nth_field(memoryview(self.raw), 4, j)
        states = _wire.nth_field(result, 6, 0) if result is not None else None
        return bytes(states) if states is not None else None


# GroupByStream's refusal of a table past the server's whole in-flight
# budget (server/frontend/group_by_stream.cc): what it would hold, and the
# budget.
_PAST_BUDGET = re.compile(r"^header\.rows: a streamed table of \d+ rows holds (\d+) bytes .* "
                          r"past --max_inflight_bytes \((\d+)\)")


def _parts_within_budget(e: Exception) -> Optional[int]:
    """For the server's refusal of a streamed table past its in-flight
    budget, the parts to cut the table into so that each holds at most half
    the budget (room for others' requests); None for any other error."""
    m = _PAST_BUDGET.match(getattr(e, "message", ""))
    if m is None or getattr(e, "code", None) != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    held, budget = int(m.group(1)), int(m.group(2))
    return max(2, -(-2 * held // max(budget, 1)))


def _default_observed(data: Any) -> bool:
    """pandas' default ``observed`` for a DataFrame (False, True from pandas
    3.0); a mapping has no category keys."""
    return type(data).__module__.startswith("pandas") and groupby_observed_default()


def _same_length(arrays: dict) -> int:
    """The arrays' common length; ValueError naming two that differ."""
    first = None
    for label, a in arrays.items():
        if a.ndim != 1:
            raise ValueError(f"column {label!r} must be 1-D, got shape {a.shape}")
        if first is None:
            first = (label, len(a))
        elif len(a) != first[1]:
            raise ValueError(f"column {label!r} has {len(a)} rows, but column {first[0]!r} has {first[1]}; "
                             f"every column must have the same length")
    return 0 if first is None else first[1]
