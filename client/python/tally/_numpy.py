"""numpy's reductions answered by a tally server: numpy's signatures,
axes, keepdims, result dtypes and scalars, over :meth:`Client.aggregate`.

The server reduces whole arrays and rows of a C-order batch. A reduction
over the last axes is sent as rows without a copy; one over other axes
moves them last first, which copies the array (numpy's own reductions read
it in place).
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _values
from ._arrays import check_dtype, refuse_pandas
from ._ops import INDEX_OPS, NO_EMPTY_ANSWER, Op

try:  # numpy 2 moved it
    from numpy.lib.array_utils import normalize_axis_tuple
except ImportError:
    from numpy.core.numeric import normalize_axis_tuple

Axis = Union[None, int, Sequence[int]]


def layout(a: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, Optional[np.ndarray], tuple[int, ...]]:
    """What to send for a reduction of ``a`` over ``axes``: the data (1-D
    for a whole-array answer, else 2-D with one row per answer), offsets
    when each row is empty (the server takes no rows of no elements, but
    takes empty segments), and the shape of the answers."""
    kept = tuple(i for i in range(a.ndim) if i not in axes)
    if not kept:
        return a.reshape(-1), None, ()
    shape = tuple(a.shape[i] for i in kept)
    moved = np.moveaxis(a, axes, tuple(range(len(kept), a.ndim)))
    rows = int(np.prod(shape))
    n = int(np.prod([a.shape[i] for i in axes]))
    if n == 0:
        return np.empty(0, a.dtype), np.zeros(rows + 1, np.int64), shape
    return moved.reshape(rows, n), None, shape


def reduce(client: Any, name: str, x: Any, axis: Axis = None, keepdims: bool = False, dtype: Any = None,
           ddof: Optional[float] = None) -> Any:
    """numpy.<name>(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    as numpy answers it, computed by ``client``'s server. ``name`` is a
    numpy function that is also a tally op (``"std"``, ``"nanargmax"``,
    ``"count_nonzero"``)."""
    op = Op.parse(name) if ddof is None else Op(Op.parse(name).kind, ddof=ddof)
    refuse_pandas(x)
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"numpy.ma arrays answer with masks: use aggregate(x, {name!r}) for the answer over the "
                        f"valid elements")
    a = np.asarray(x)
    if dtype is not None:
        a = a.astype(dtype)  # numpy reduces in the dtype asked for: the elements are cast to it first
    check_dtype(a.dtype)
    if axis is not None and op.kind in INDEX_OPS and not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: axis must be an integer or None, not {type(axis).__name__}")
    axes = tuple(range(a.ndim)) if axis is None else tuple(sorted(normalize_axis_tuple(axis, a.ndim)))
    data, offsets, shape = layout(a, axes)
    rows = int(np.prod(shape))
    if op.kind in NO_EMPTY_ANSWER and rows and (data.size == 0 or offsets is not None):
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
    if rows == 0:  # nothing to reduce into: numpy's empty answer, without a call
        out = np.empty(shape, _values.value_dtype(op, a.dtype))
    else:
        out = np.asarray(client.aggregate(data, [op], offsets=offsets)[0]).reshape(shape)
    if dtype is not None:
        out = out.astype(dtype)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(a.shape)))
    elif out.ndim == 0:
        # numpy answers a whole reduction with a scalar (count_nonzero with a Python int).
        return int(out) if op.kind == "count_nonzero" and axis is None else out[()]
    return out


def histogram(client: Any, x: Any, bins: Any = 10, range: Optional[tuple[float, float]] = None,
              density: Optional[bool] = None) -> tuple[np.ndarray, np.ndarray]:
    """numpy.histogram(x, bins, range, density) over the flattened ``x``:
    ``(counts, edges)``. ``bins`` is a number of equal-width bins (tally's
    histograms have no other kind). Without ``range`` the server is asked
    for the minimum and maximum first, numpy's default range (a second
    pass over the data)."""
    try:
        bins = operator.index(bins)
    except TypeError:
        raise TypeError(f"bins must be an integer, the number of equal-width bins, not {bins!r}: tally's "
                        f"histograms have no other kind") from None
    refuse_pandas(x)
    a = np.asarray(x).reshape(-1)
    check_dtype(a.dtype)
    lo, hi = _outer_edges(client, a, range)
    h = client.aggregate(a, [Op("histogram", bins=bins, lo=float(lo), hi=float(hi))])[0]
    counts, edges = h.counts, h.edges
    if density:
        widths = np.diff(edges)
        with np.errstate(divide="ignore", invalid="ignore"):
            return counts / widths / counts.sum(), edges
    return counts, edges


def _outer_edges(client: Any, a: np.ndarray, range: Optional[tuple[float, float]]) -> tuple[Any, Any]:
    """numpy.histogram's outer edges (numpy.lib.histograms._get_outer_edges),
    the data's minimum and maximum asked of the server."""
    if range is not None:
        lo, hi = range
        if lo > hi:
            raise ValueError("max must be larger than min in range parameter.")
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"supplied range of [{lo}, {hi}] is not finite")
    elif a.size == 0:
        lo, hi = 0, 1
    else:
        lo, hi = client.aggregate(a, [Op("minmax")])[0]
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"autodetected range of [{lo}, {hi}] is not finite")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return lo, hi


class NumpyFunctions:
    """numpy's reductions as methods of :class:`tally.Client`, each answering
    exactly what the numpy function of the same name answers (shape, dtype,
    a numpy scalar for a whole reduction), to floating-point rounding:
    tally adds floats in float64. ``axis`` is None, an integer or a tuple of
    them (one integer for the argmin family); reducing over axes other than
    the last ones copies the array first (numpy.moveaxis, then C order).
    ``dtype`` casts the elements before they are sent, as numpy computes in
    it. Bad input raises what numpy raises (ValueError for an empty
    reduction with no identity, numpy's AxisError for a bad axis, TypeError
    for a dtype tally does not take); the server's refusals raise
    :class:`tally.Error`."""

    def sum(self, x: Any, axis: Axis = None, dtype: Any = None, *, keepdims: bool = False) -> Any:
        """numpy.sum."""
        return reduce(self, "sum", x, axis, keepdims, dtype)

    def prod(self, x: Any, axis: Axis = None, dtype: Any = None, *, keepdims: bool = False) -> Any:
        """numpy.prod."""
        return reduce(self, "prod", x, axis, keepdims, dtype)

    def mean(self, x: Any, axis: Axis = None, dtype: Any = None, *, keepdims: bool = False) -> Any:
        """numpy.mean."""
        return reduce(self, "mean", x, axis, keepdims, dtype)

    def var(self, x: Any, axis: Axis = None, dtype: Any = None, *, ddof: float = 0, keepdims: bool = False) -> Any:
        """numpy.var (ddof=0, numpy's default)."""
        return reduce(self, "var", x, axis, keepdims, dtype, ddof)

    def std(self, x: Any, axis: Axis = None, dtype: Any = None, *, ddof: float = 0, keepdims: bool = False) -> Any:
        """numpy.std (ddof=0, numpy's default)."""
        return reduce(self, "std", x, axis, keepdims, dtype, ddof)

    def min(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.min."""
        return reduce(self, "min", x, axis, keepdims)

    def max(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.max."""
        return reduce(self, "max", x, axis, keepdims)

    def ptp(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.ptp: max - min in the input's dtype."""
        return reduce(self, "ptp", x, axis, keepdims)

    def argmin(self, x: Any, axis: Optional[int] = None, *, keepdims: bool = False) -> Any:
        """numpy.argmin: the first occurrence; axis None counts in the
        flattened array."""
        return reduce(self, "argmin", x, axis, keepdims)

    def argmax(self, x: Any, axis: Optional[int] = None, *, keepdims: bool = False) -> Any:
        """numpy.argmax."""
        return reduce(self, "argmax", x, axis, keepdims)

    def any(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.any."""
        return reduce(self, "any", x, axis, keepdims)

    def all(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.all."""
        return reduce(self, "all", x, axis, keepdims)

    def count_nonzero(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.count_nonzero (a Python int for axis None, as numpy's)."""
        return reduce(self, "count_nonzero", x, axis, keepdims)

    def nansum(self, x: Any, axis: Axis = None, dtype: Any = None, *, keepdims: bool = False) -> Any:
        """numpy.nansum."""
        return reduce(self, "nansum", x, axis, keepdims, dtype)

    def nanmean(self, x: Any, axis: Axis = None, dtype: Any = None, *, keepdims: bool = False) -> Any:
        """numpy.nanmean."""
        return reduce(self, "nanmean", x, axis, keepdims, dtype)

    def nanvar(self, x: Any, axis: Axis = None, dtype: Any = None, *, ddof: float = 0,
               keepdims: bool = False) -> Any:
        """numpy.nanvar."""
        return reduce(self, "nanvar", x, axis, keepdims, dtype, ddof)

    def nanstd(self, x: Any, axis: Axis = None, dtype: Any = None, *, ddof: float = 0,
               keepdims: bool = False) -> Any:
        """numpy.nanstd."""
        return reduce(self, "nanstd", x, axis, keepdims, dtype, ddof)

    def nanmin(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.nanmin (NaN for an all-NaN slice, without numpy's warning)."""
        return reduce(self, "nanmin", x, axis, keepdims)

    def nanmax(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.nanmax."""
        return reduce(self, "nanmax", x, axis, keepdims)

    def nanargmin(self, x: Any, axis: Optional[int] = None, *, keepdims: bool = False) -> Any:
        """numpy.nanargmin (an all-NaN slice: :class:`tally.Error`, where numpy
        raises ValueError)."""
        return reduce(self, "nanargmin", x, axis, keepdims)

    def nanargmax(self, x: Any, axis: Optional[int] = None, *, keepdims: bool = False) -> Any:
        """numpy.nanargmax."""
        return reduce(self, "nanargmax", x, axis, keepdims)

    def histogram(self, x: Any, bins: int = 10, range: Optional[tuple[float, float]] = None,
                  density: Optional[bool] = None) -> tuple[np.ndarray, np.ndarray]:
        """numpy.histogram with equal-width bins: ``(counts, edges)``; numpy's
        default range (the data's minimum and maximum) costs a second pass."""
        return histogram(self, x, bins, range, density)
