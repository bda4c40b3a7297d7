"""Partial states: what an aggregation knows about part of an array, merged
with other parts' states and finished on the client.

The rules are tally.proto's (PartialState, version 1), the same the server
and the C++ client follow (tally/rules/partial.h), operation for operation:
a state finished here is bitwise the value the server would answer, and
merges give the same bits as the C++ client's for the same merge tree.
Integers, counts, extremes, first-occurrence indices and histograms merge
exactly in any order, and so do float sums whose states carry their exact
sum (``exact_sum``, the cpu backend's: merged by tally._exact, the same bits
as one request over the same elements); other float sums and moments are
deterministic for a given merge tree and agree with one request over the
whole array to rounding (tally.proto says how closely).

The functions whose states tally's rules keep (quantile, nanquantile,
median, nanmedian, topk, bottomk, hll, ddsketch, count_distinct) carry
their state as opaque bytes (``function_state``, one per row), which the
package's native module ``tally._states`` merges and finishes with those
rules themselves (built with the package where pybind11 is installed;
without it, merging or finishing such a state raises ImportError).
Their merges are exact: a merged state is bitwise the one a single
request over the same elements gives, whatever the order.

prod, count_nonzero, any, all and ptp merge here too: products multiply
(in float64 for float dtypes, modulo 2^64 for integers), nonzero counts
add, and ptp keeps its min and max, whose difference is taken in the
input's dtype only when the state is finished (as numpy.ptp's).
tests/python/partial_rules_test.py holds this module's merges and
finishes to tally/rules/partial.h's, bitwise, through tally._states.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from . import _exact, _values
from ._arrays import FROM_WIRE, check_dtype
from ._ops import STATE_OPS, TOPK_OPS, Op
from .v1 import tally_pb2 as pb
from . import _arrays

#: The version of the rules this package merges and finishes.
STATE_VERSION = 1

_F64, _I64, _U64 = np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64)

#: A NaN-skipping op's state is its plain op's over the elements that are
#: not NaN (``count`` is theirs, ``elements`` every element), so it merges
#: as the plain op's does.
_PLAIN = {"nansum": "sum", "nanmean": "mean", "nanmin": "min", "nanmax": "max", "nanargmin": "argmin",
          "nanargmax": "argmax", "nanvar": "variance", "nanstd": "stddev", "nancount": "count"}


def _plain(kind: str) -> str:
    return _PLAIN.get(kind, kind)


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    """Where sums and extremes of ``dtype`` live in a state."""
    # bool is reduced as uint8 on the server (tally.proto, DTYPE_BOOL).
    return _F64 if _arrays.is_float(dtype) else (_I64 if dtype.kind == "i" else _U64)


@dataclass
class Partial:
    """One aggregation's partial state over some elements of an array (of
    each row, when ``segmented``): one entry per row in every field.

    Fields an op does not use are zeros. ``value`` holds sums (``sum``) or
    extremes (min, max, argmin, argmax, and ptp's min) in float64, int64 or
    uint64 by the input's dtype; ``index`` the argmin/argmax index (-1
    where ``count`` is 0); ``mean`` and ``m2`` the moments (``m2`` stays 0
    for mean); ``histogram`` the counts (rows x bins) and ``below``,
    ``above``, ``nan``; ``product`` prod's product and ``max`` ptp's max,
    by dtype as ``value``; ``nonzero`` the elements that are not zero
    (count_nonzero, any, all).
    For the NaN-skipping ops ``count`` is the elements that are not NaN and
    ``elements`` every element (0 for the other ops). The functions of
    :data:`tally._ops.STATE_OPS` keep each row's state in ``function_state``
    (an object array of bytes, b"" for the empty state; ``count`` the valid
    elements covered), which only :mod:`tally._states` reads.
    Picklable, so Dask can move it between workers.
    """

    op: Op
    dtype: np.dtype
    segmented: bool
    count: np.ndarray
    value: np.ndarray
    sum_squares: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    index: np.ndarray
    histogram: np.ndarray
    below: np.ndarray
    above: np.ndarray
    nan: np.ndarray
    elements: np.ndarray = None  # type: ignore[assignment]
    version: int = field(default=STATE_VERSION)
    function_state: np.ndarray = None  # type: ignore[assignment]
    product: np.ndarray = None  # type: ignore[assignment]
    nonzero: np.ndarray = None  # type: ignore[assignment]
    max: np.ndarray = None  # type: ignore[assignment]
    exact_sum: np.ndarray = None  # type: ignore[assignment]
    exact_sum_squares: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        n = len(self.count)
        if self.elements is None:
            self.elements = np.zeros(n, dtype=_U64)
        if self.function_state is None:
            self.function_state = _object_array([b""] * n)
        if self.product is None:
            self.product = np.zeros(n, dtype=_acc_dtype(self.dtype))
        if self.nonzero is None:
            self.nonzero = np.zeros(n, dtype=_U64)
        if self.max is None:
            self.max = np.zeros(n, dtype=_acc_dtype(self.dtype))
        if self.exact_sum is None:
            self.exact_sum = _object_array([b""] * n)
        if self.exact_sum_squares is None:
            self.exact_sum_squares = _object_array([b""] * n)

    @property
    def rows(self) -> int:
        return len(self.count)

    def merge(self, other: "Partial") -> "Partial":
        """The state of this part's elements followed by ``other``'s."""
        return merge(self, other)

    def finish(self) -> Any:
        """The value, as :meth:`tally.Client.aggregate` answers it."""
        return finish(self)

    @classmethod
    def from_proto(cls, op: Op, result: "pb.AggregationResult", segmented: bool,
                   serialized: Optional[bytes] = None) -> "Partial":
        """A state from the server's answer (``serialized``: its
        PartialStates' bytes as they arrived, where the caller has them).
        ValueError for a version this package does not know or an unknown
        dtype."""
        if result.WhichOneof("values") != "partials":
            raise ValueError(f"{op}: the server answered with values, not a partial state")
        p = result.partials
        if p.version != STATE_VERSION:
            raise ValueError(f"{op}: partial state version {p.version} is not one this package knows ({STATE_VERSION})")
        if p.dtype not in FROM_WIRE:
            raise ValueError(f"{op}: unknown dtype {p.dtype} in a partial state")
        dtype = FROM_WIRE[p.dtype]
        states = p.states
        acc = _acc_dtype(dtype)
        # The fields by dtype: float64, int64 or uint64 (bfloat16's numpy kind is not "f").
        by_kind = {_F64: "float_", _I64: "int_", _U64: "uint_"}[acc]
        field_name = by_kind + ("sum" if _plain(op.kind) == "sum" else "extreme")
        bins = op.bins if op.kind == "histogram" else 0
        native = _native_or_none() if not bins and len(states) >= _NATIVE_STATE_ROWS else None
        columns = native.partial_columns(serialized if serialized is not None else p.SerializeToString()) \
            if native is not None else None
        if columns is not None:
            # Every field of every state read in one native pass (tally._states).
            zeros = np.zeros(len(states), dtype=np.uint64)
            return cls(
                op=op, dtype=dtype, segmented=segmented, count=columns["count"],
                value=columns[field_name].astype(acc, copy=False), sum_squares=columns["sum_squares"],
                mean=columns["mean"], m2=columns["m2"], index=columns["index"],
                histogram=np.zeros((len(states), 0), dtype=np.uint64), below=zeros, above=zeros.copy(),
                nan=zeros.copy(), elements=columns["elements"],
                function_state=_object_array(columns["function_state"]),
                product=columns[by_kind + "product"].astype(acc, copy=False), nonzero=columns["nonzero"],
                max=columns[by_kind + "max"].astype(acc, copy=False),
                exact_sum=_object_array(columns["exact_sum"]),
                exact_sum_squares=_object_array(columns["exact_sum_squares"]))
        hist = np.zeros((len(states), bins), dtype=np.uint64)
        if bins:
            for r, s in enumerate(states):
                if len(s.histogram.counts) != bins:
                    raise ValueError(f"{op}: row {r}'s histogram has {len(s.histogram.counts)} bins, not {bins}")
                hist[r] = s.histogram.counts
        return cls(
            op=op, dtype=dtype, segmented=segmented,
            count=np.array([s.count for s in states], dtype=np.uint64),
            value=np.array([getattr(s, field_name) for s in states], dtype=acc),
            sum_squares=np.array([s.sum_squares for s in states], dtype=np.float64),
            mean=np.array([s.mean for s in states], dtype=np.float64),
            m2=np.array([s.m2 for s in states], dtype=np.float64),
            index=np.array([s.index for s in states], dtype=np.int64),
            histogram=hist,
            below=np.array([s.histogram.below for s in states], dtype=np.uint64),
            above=np.array([s.histogram.above for s in states], dtype=np.uint64),
            nan=np.array([s.histogram.nan for s in states], dtype=np.uint64),
            elements=np.array([s.elements for s in states], dtype=np.uint64),
            function_state=_bytes_array([s.function_state for s in states]),
            product=np.array([getattr(s, by_kind + "product") for s in states], dtype=acc),
            nonzero=np.array([s.nonzero for s in states], dtype=np.uint64),
            max=np.array([getattr(s, by_kind + "max") for s in states], dtype=acc),
            exact_sum=_bytes_array([s.exact_sum for s in states]),
            exact_sum_squares=_bytes_array([s.exact_sum_squares for s in states]))


def _bytes_array(items: list) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = [bytes(b) for b in items]
    return out


def _object_array(items: list) -> np.ndarray:
    """A list of bytes objects as an object array, uncopied."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _native() -> Any:
    states = _native_or_none()
    if states is None:
        raise ImportError("merging and finishing the partial states of quantile, topk, hll, ddsketch and "
                          "count_distinct needs tally's native module (tally._states), which is built with "
                          "the package where pybind11 is installed (Debian: pybind11-dev)")
    return states


def _native_spec(p: Partial) -> tuple:
    """The aggregation as tally._states takes it: tally.v1.Aggregation's op,
    q, method, k, precision and relative_accuracy."""
    op = p.op
    method = 0 if op.method is None else pb.QuantileMethod.Value("QUANTILE_METHOD_" + op.method.upper())
    return (getattr(pb, "OP_" + op.kind.upper()), list(op.q or ()), method, op.k or 0, op.precision or 0,
            op.relative_accuracy or 0.0)


def _merge_functions(a: Partial, b: Partial) -> Partial:
    """Two states of a function tally's rules keep, merged by those rules."""
    native = _native()
    spec, dtype = _native_spec(a), _arrays.wire_dtype(a.dtype)
    try:
        merged = [native.merge(spec, dtype, x, y) for x, y in zip(a.function_state, b.function_state)]
    except ValueError as e:
        raise ValueError(f"cannot merge partial states of {a.op}: {e}") from None
    out = empty(a.op, a.dtype, a.rows if a.segmented else None)
    out.count, out.elements = a.count + b.count, a.elements + b.elements
    out.function_state = _bytes_array(merged)
    return out


def _finish_function(p: Partial) -> Any:
    """A function's answer from its state, finished by tally's rules, as
    :meth:`tally.Client.aggregate` answers it."""
    native = _native()
    spec, dtype = _native_spec(p), _arrays.wire_dtype(p.dtype)
    rows = []
    for r in range(p.rows):
        try:
            rows.append(native.finish(spec, dtype, int(p.count[r]), int(p.elements[r]), p.function_state[r]))
        except ValueError as e:
            raise ValueError(f"{p.op}, row {r}: {e}") from None
    # Which of doubles, int64s and uint64s the answer is in: where the rules wrote it.
    at = next((i for i in range(3) if any(len(row[i]) for row in rows)), 0)
    raw = np.concatenate([row[at] for row in rows]) if rows else np.empty(0)
    if p.op.kind in TOPK_OPS:
        indices = np.concatenate([row[3] for row in rows]) if rows else np.empty(0, np.int64)
        lengths = np.array([len(row[at]) for row in rows], dtype=_U64)
        return _values.present_topk(p.op, p.dtype, raw, indices, lengths, p.segmented)
    return _values.present(p.op, p.dtype, raw, p.segmented)


def _check(a: Partial, b: Partial) -> None:
    for p in (a, b):
        if p.version != STATE_VERSION:
            raise ValueError(f"partial state version {p.version} is not one this package knows ({STATE_VERSION})")
    if a.op != b.op:
        raise ValueError(f"cannot merge partial states of different aggregations: {a.op} and {b.op}")
    if a.dtype != b.dtype:
        raise ValueError(f"cannot merge partial states of {a.dtype} and {b.dtype} elements")
    if a.segmented != b.segmented or a.rows != b.rows:
        raise ValueError(f"cannot merge partial states of {a.rows} and {b.rows} rows "
                         f"({'per row' if a.segmented else 'whole'} and {'per row' if b.segmented else 'whole'})")


def _min_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # rules::MinNan: a if a is NaN, else b if b is NaN, else (b < a ? b : a).
    return np.where(a != a, a, np.where(b != b, b, np.where(b < a, b, a)))


def _max_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(a != a, a, np.where(b != b, b, np.where(b > a, b, a)))


def _pick_arg(av: np.ndarray, ai: np.ndarray, bv: np.ndarray, bi: np.ndarray, is_max: bool) -> np.ndarray:
    """rules::Better(a, b) for non-empty candidates: True where a wins."""
    a_nan, b_nan = av != av, bv != bv
    either = a_nan | b_nan
    nan_rule = np.where(a_nan & b_nan, ai < bi, a_nan)
    better = (av > bv) if is_max else (av < bv)
    value_rule = better | ((av == bv) & (ai < bi))
    return np.where(either, nan_rule, value_rule)


# States from which the native module reads a PartialStates message's
# fields in one pass (tally._states.partial_columns) instead of one state at
# a time.
_NATIVE_STATE_ROWS = 64

# Rows of exact sums to merge from which the native module's one call
# (tally._states, the rules' own merge) beats tally._exact's Python steps.
_NATIVE_EXACT_ROWS = 64


def _native_or_none() -> Any:
    """tally._states where it is built, else None (the package's own steps)."""
    try:
        from . import _states
    except ImportError:
        return None
    return _states


def _merge_exact_sums(rows: np.ndarray, a_bytes: np.ndarray, a_values: np.ndarray, b_bytes: np.ndarray,
                      b_values: np.ndarray, out_bytes: np.ndarray, out_values: np.ndarray) -> None:
    """Rows ``rows`` of two sums' exact states merged (rules::Merge's
    MergeSum: a side without bytes counts as its value) into ``out_bytes``
    and ``out_values``."""
    native = _native_or_none() if len(rows) >= _NATIVE_EXACT_ROWS else None
    if native is not None:
        merged, values = native.merge_exact_sums(list(a_bytes[rows]), a_values[rows], list(b_bytes[rows]),
                                                 b_values[rows])
        out_bytes[rows] = _object_array(merged)
        out_values[rows] = values
        return
    for r in rows:
        out_bytes[r], out_values[r] = _exact.merge_bytes(a_bytes[r], float(a_values[r]), b_bytes[r],
                                                         float(b_values[r]))


def _merge_exact_moments(rows: np.ndarray, a: "Partial", b: "Partial", count: np.ndarray, exact: np.ndarray,
                         exact_squares: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
    """Rows ``rows`` of two variance states that both keep exact sums and
    sums of squares merged into ``exact``, ``exact_squares``, ``mean`` and
    ``m2``."""
    native = _native_or_none() if len(rows) >= _NATIVE_EXACT_ROWS else None
    if native is not None:
        sums, squares, mean[rows], m2[rows] = native.merge_exact_moments(
            list(a.exact_sum[rows]), list(a.exact_sum_squares[rows]), list(b.exact_sum[rows]),
            list(b.exact_sum_squares[rows]), count[rows])
        exact[rows] = _object_array(sums)
        exact_squares[rows] = _object_array(squares)
        return
    for r in rows:
        exact[r], exact_squares[r], mean[r], m2[r] = _exact.moments_bytes(
            a.exact_sum[r], a.exact_sum_squares[r], b.exact_sum[r], b.exact_sum_squares[r], int(count[r]))


def merge(a: Partial, b: Partial) -> Partial:
    """The state of ``a``'s elements followed by ``b``'s (tally.proto's
    merge rules). ValueError for states of different aggregations (op,
    ddof, histogram spec), dtypes, row counts or unknown versions."""
    _check(a, b)
    if a.op.kind in STATE_OPS:
        return _merge_functions(a, b)
    with np.errstate(all="ignore"):
        a_empty, b_empty = a.count == 0, b.count == 0
        # An empty state is the identity: rows where one side is empty take the other.
        take_b = a_empty & ~b_empty
        keep_a = b_empty

        def pick(merged: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
            sel = take_b.reshape((-1,) + (1,) * (merged.ndim - 1))
            kept = keep_a.reshape((-1,) + (1,) * (merged.ndim - 1))
            return np.where(kept, x, np.where(sel, y, merged))

        kind = _plain(a.op.kind)
        count = a.count + b.count
        value, index = a.value, a.index
        mean, m2, sum_squares = a.mean, a.m2, a.sum_squares
        hist, below, above, nan = a.histogram, a.below, a.above, a.nan
        product, nonzero, high = a.product, a.nonzero, a.max
        exact, exact_squares = a.exact_sum, a.exact_sum_squares
        if kind == "sum":
            if a.value.dtype == _I64:  # wraps modulo 2^64, as numpy's
                value = (a.value.view(_U64) + b.value.view(_U64)).view(_I64)
            else:
                value = a.value + b.value
                # Rows where either side keeps its exact sum merge exactly.
                exact = a.exact_sum.copy()
                rows = np.flatnonzero([bool(x) or bool(y) for x, y in zip(a.exact_sum, b.exact_sum)])
                _merge_exact_sums(rows, a.exact_sum, a.value, b.exact_sum, b.value, exact, value)
        elif kind == "sum_squares":
            sum_squares = a.sum_squares + b.sum_squares
            # Rows where either side keeps its exact sum of squares merge exactly.
            exact_squares = a.exact_sum_squares.copy()
            rows = np.flatnonzero([bool(x) or bool(y) for x, y in zip(a.exact_sum_squares, b.exact_sum_squares)])
            _merge_exact_sums(rows, a.exact_sum_squares, a.sum_squares, b.exact_sum_squares, b.sum_squares,
                              exact_squares, sum_squares)
        elif kind in ("mean", "variance", "stddev"):
            # Exact where both sides keep their exact sums, else as below.
            exact = _object_array([b""] * a.rows)
            exact_squares = _object_array([b""] * a.rows)
            # rules::MergeMoments, in the same order of operations.
            na, nb = a.count.astype(np.float64), b.count.astype(np.float64)
            n = na + nb
            with np.errstate(invalid="ignore", over="ignore"):
                delta = b.mean - a.mean
                wb = nb / n
                mean = a.mean + delta * wb
                m2 = np.zeros_like(a.m2) if kind == "mean" else a.m2 + b.m2 + delta * delta * na * wb
                # A mean that is not finite (an infinity or NaN in the
                # values): numpy's mean is the sum's, which adding the means
                # gives, and its variance NaN.
                inf = ~np.isfinite(a.mean) | ~np.isfinite(b.mean)
                mean = np.where(inf, a.mean + b.mean, mean)
                m2 = np.where(inf & (kind != "mean"), np.nan, m2)
            if kind == "mean":
                rows = np.flatnonzero([bool(x) and bool(y) for x, y in zip(a.exact_sum, b.exact_sum)])
                total = np.empty(len(rows))
                if len(rows):
                    merged_bytes = exact[rows]
                    unused = np.zeros(len(rows))  # both sides keep bytes: no value counts
                    _merge_exact_sums(np.arange(len(rows)), a.exact_sum[rows], unused, b.exact_sum[rows], unused,
                                      merged_bytes, total)
                    exact[rows] = merged_bytes
                    mean[rows] = total / count[rows].astype(np.float64)
            else:
                rows = np.flatnonzero([bool(w) and bool(x) and bool(y) and bool(z) for w, x, y, z in zip(
                    a.exact_sum, a.exact_sum_squares, b.exact_sum, b.exact_sum_squares)])
                _merge_exact_moments(rows, a, b, count, exact, exact_squares, mean, m2)
        elif kind in ("min", "max"):
            value = _min_nan(a.value, b.value) if kind == "min" else _max_nan(a.value, b.value)
        elif kind in ("argmin", "argmax"):
            a_wins = _pick_arg(a.value, a.index, b.value, b.index, kind == "argmax")
            value = np.where(a_wins, a.value, b.value)
            index = np.where(a_wins, a.index, b.index)
        elif kind == "histogram":
            hist, below, above, nan = a.histogram + b.histogram, a.below + b.below, a.above + b.above, a.nan + b.nan
        elif kind == "prod":
            if a.product.dtype == _I64:  # wraps modulo 2^64, as numpy's
                product = (a.product.view(_U64) * b.product.view(_U64)).view(_I64)
            else:
                product = a.product * b.product
        elif kind in ("count_nonzero", "any", "all"):
            nonzero = a.nonzero + b.nonzero
        elif kind == "ptp":  # its min and max, merged as min's and max's
            value, high = _min_nan(a.value, b.value), _max_nan(a.max, b.max)
        return Partial(
            op=a.op, dtype=a.dtype, segmented=a.segmented, count=count,
            value=pick(value, a.value, b.value), sum_squares=pick(sum_squares, a.sum_squares, b.sum_squares),
            mean=pick(mean, a.mean, b.mean), m2=pick(m2, a.m2, b.m2), index=pick(index, a.index, b.index),
            histogram=pick(hist, a.histogram, b.histogram), below=pick(below, a.below, b.below),
            above=pick(above, a.above, b.above), nan=pick(nan, a.nan, b.nan),
            elements=a.elements + b.elements,  # even where a side has count 0
            product=pick(product, a.product, b.product), nonzero=pick(nonzero, a.nonzero, b.nonzero),
            max=pick(high, a.max, b.max), exact_sum=pick(exact, a.exact_sum, b.exact_sum),
            exact_sum_squares=pick(exact_squares, a.exact_sum_squares, b.exact_sum_squares))


def merge_all(states: list[Partial]) -> Partial:
    """The states merged left to right: ((s0 + s1) + s2) + ..."""
    if not states:
        raise ValueError("no partial states to merge")
    out = states[0]
    for s in states[1:]:
        out = merge(out, s)
    return out


def finish_raw(p: Partial) -> np.ndarray:
    """The wire values of a state, per row, as the server finishes them:
    every NaN numpy's default NaN (rules::FinishDouble), whichever NaN the
    state holds."""
    out = _finish_raw(p)
    if out.dtype == np.float64:
        out = np.where(out != out, np.nan, out)
    return out


def _finish_raw(p: Partial) -> np.ndarray:
    """finish_raw's values before NaNs are made one:
    float64, int64 or uint64 (the tally.proto result field). Histograms
    are not scalars; see :func:`finish`. prod of no elements is 1, any 0
    and all 1 (numpy's identities); ptp is max - min in the input's dtype.
    ValueError for min, max, argmin, argmax or ptp of a row with no
    elements (numpy raises too); on float dtypes
    for nanargmin and nanargmax of a row with no element that is not NaN,
    and for nanmin and nanmax of an empty row (of an all-NaN one they are
    NaN, as numpy's)."""
    nan_float = p.op.kind in _PLAIN and _arrays.is_float(p.dtype)
    kind = _plain(p.op.kind)
    if kind in ("min", "max", "argmin", "argmax", "ptp"):
        no_value = p.count == 0
        if nan_float and kind in ("min", "max"):
            no_value &= p.elements == 0
        if np.any(no_value):
            raise ValueError(f"{p.op} of no elements has no value")
    if nan_float and kind in ("min", "max"):
        return np.where(p.count == 0, np.nan, p.value)
    with np.errstate(all="ignore"):
        if kind in ("sum", "min", "max"):
            return p.value.copy()
        if kind == "count":
            return p.count.copy()
        if kind in ("argmin", "argmax"):
            return p.index.copy()
        if kind == "sum_squares":
            return p.sum_squares.copy()
        if kind == "prod":  # the empty product is 1
            return np.where(p.count == 0, p.product.dtype.type(1), p.product)
        if kind == "count_nonzero":
            return p.nonzero.copy()
        if kind == "any":
            return (p.nonzero > 0).astype(_U64)
        if kind == "all":
            return (p.nonzero == p.count).astype(_U64)
        if kind == "ptp":
            return ptp_in(p.dtype, p.value, p.max)
        if kind == "mean":
            return np.where(p.count == 0, np.nan, p.mean)
        if kind in ("variance", "stddev"):
            # rules::VarianceOf: m2 / max(n - ddof, 0); NaN for no elements.
            divisor = p.count.astype(np.float64) - p.op.ddof
            if nan_float:  # rules::NanVarianceOf: NaN where count - ddof <= 0
                var = np.where(divisor > 0.0, p.m2 / np.where(divisor > 0.0, divisor, 1.0), np.nan)
            else:
                divisor = np.where(divisor < 0.0, 0.0, divisor)
                var = np.where(p.count == 0, np.nan, p.m2 / divisor)
            return np.sqrt(var) if kind == "stddev" else var
    raise ValueError(f"{p.op} has no scalar value")


def _bfloat16_bits(f: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even), as
    float32 bits: bfloat16 is float32's top half."""
    u = f.view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return np.where(f != f, u | np.uint32(0x00400000), rounded).astype(np.uint32)


def _to_bfloat16(d: np.ndarray) -> np.ndarray:
    """float64 values rounded once to bfloat16, as float32. Through float32
    rounded to odd (truncated, its last bit set where inexact), so that the
    second rounding cannot land on a tie the first one made."""
    f = d.astype(np.float32)
    u = f.view(np.uint32).copy()
    inexact = (f.astype(np.float64) != d) & (d == d)
    # A float32 that rounded away from zero: one step back towards it (for
    # an overflow to inf, down to float32's largest).
    u[inexact & (np.abs(f.astype(np.float64)) > np.abs(d))] -= np.uint32(1)
    u[inexact] |= np.uint32(1)
    return _bfloat16_bits(u.view(np.float32)).view(np.float32)


def ptp_in(dtype: np.dtype, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """numpy.ptp from the min and max a state holds (float64, int64 or
    uint64 by dtype): max - min computed in ``dtype`` (rules::PtpOf), as
    the wire value (float64, int64 or uint64). float32 and float64
    subtract in their own type (float32 may overflow to inf); float16 and
    bfloat16 in float32, rounded once to the dtype; integers wrap at their
    width; a NaN extreme gives NaN."""
    if _arrays.is_float(dtype):
        return float_ptp(dtype.name, lo, hi)
    # Integers: the difference at the element's width (bool as uint8), wrapped.
    width = np.dtype(np.uint8) if dtype == np.bool_ else np.dtype(f"u{dtype.itemsize}")
    wide = lo.dtype
    d = hi.view(_U64).astype(width) - lo.view(_U64).astype(width)
    narrow = np.dtype(f"i{width.itemsize}") if wide == _I64 else width
    return d.view(narrow).astype(wide)


def float_ptp(name: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """:func:`ptp_in` of the float dtype called ``name`` ("float64",
    "float32", "float16" or "bfloat16", which needs no ml_dtypes here),
    from float64 extremes, as float64."""
    lo, hi = np.asarray(lo, dtype=_F64), np.asarray(hi, dtype=_F64)
    with np.errstate(all="ignore"):
        if name == "float64":
            return hi - lo
        if name == "float32":
            return (hi.astype(np.float32) - lo.astype(np.float32)).astype(_F64)
        if name == "float16":
            d = hi.astype(np.float16).astype(np.float32) - lo.astype(np.float16).astype(np.float32)
            return d.astype(np.float16).astype(_F64)
        if name == "bfloat16":
            d = _to_bfloat16(hi) - _to_bfloat16(lo)
            return _bfloat16_bits(d).view(np.float32).astype(_F64)
    raise ValueError(f"{name} is not a float dtype tally aggregates")


def finish(p: Partial) -> Any:
    """A state's value as :meth:`tally.Client.aggregate` answers it: numpy's
    dtypes, a scalar (an array per row when segmented), histograms as
    :class:`tally.Histogram`."""
    if p.version != STATE_VERSION:
        raise ValueError(f"partial state version {p.version} is not one this package knows ({STATE_VERSION})")
    if p.op.kind == "histogram":
        return _values.present_histogram(p.op, p.dtype, p.histogram, p.below, p.above, p.nan, p.segmented)
    if p.op.kind in STATE_OPS:
        return _finish_function(p)
    return _values.present(p.op, p.dtype, finish_raw(p), p.segmented)


def empty(op: Op, dtype: Any, rows: int | None = None) -> Partial:
    """The state of no elements (the merge identity); ``rows`` None for a
    whole-array state, else that many rows."""
    dt = check_dtype(dtype)
    n = 1 if rows is None else rows
    z = lambda d: np.zeros(n, dtype=d)  # noqa: E731
    acc = _acc_dtype(dt)
    return Partial(op=op, dtype=dt, segmented=rows is not None, count=z(_U64), value=z(acc),
                   sum_squares=z(_F64), mean=z(_F64), m2=z(_F64), index=np.full(n, -1, dtype=_I64),
                   histogram=np.zeros((n, op.bins if op.kind == "histogram" else 0), dtype=_U64),
                   below=z(_U64), above=z(_U64), nan=z(_U64), elements=z(_U64),
                   function_state=_object_array([b""] * n), product=z(acc), nonzero=z(_U64), max=z(acc),
                   exact_sum=_object_array([b""] * n), exact_sum_squares=_object_array([b""] * n))
