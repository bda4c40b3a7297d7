"""numpy's reductions answered by a tally server: numpy's signatures,
axes, keepdims, result dtypes and scalars, over :meth:`Client.aggregate`.

The server reduces whole arrays and rows of a C-order batch. A reduction
over the last axes is sent as rows without a copy; one over other axes
moves them last first, which copies the array (numpy's own reductions read
it in place).

Quantiles, medians, the k largest and smallest elements and distinct
counts follow the same layout: numpy.quantile's answers (q's axes first),
torch.topk's (the reduced axis holds the k answers), numpy.unique's count.
"""
from __future__ import annotations

import operator
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _values
from ._arrays import check_dtype, refuse_pandas
from ._ops import INDEX_OPS, MAX_QUANTILES, NO_EMPTY_ANSWER, PICKING_METHODS, Op

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


def _array(x: Any, name: str) -> np.ndarray:
    """``x`` as the array a numpy-style function reduces; TypeError for
    pandas objects and numpy.ma arrays (their masks: :meth:`aggregate`'s
    ``valid=``)."""
    refuse_pandas(x)
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"numpy.ma arrays answer with masks: use aggregate(x, {name!r}) for the answer over the "
                        f"valid elements")
    return np.asarray(x)


def reduce(client: Any, name: str, x: Any, axis: Axis = None, keepdims: bool = False, dtype: Any = None,
           ddof: Optional[float] = None, op: Optional[Op] = None) -> Any:
    """numpy.<name>(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    as numpy answers it, computed by ``client``'s server. ``name`` is a
    numpy function that is also a tally op (``"std"``, ``"nanargmax"``,
    ``"count_nonzero"``), or ``op`` the op itself (one value per row)."""
    if op is None:
        op = Op.parse(name) if ddof is None else Op(Op.parse(name).kind, ddof=ddof)
    a = _array(x, name)
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
        # numpy answers a whole reduction with a scalar (count_nonzero with
        # the installed numpy's type, the distinct counts with a Python int,
        # as len(numpy.unique(x))).
        if axis is None and op.kind == "count_nonzero":
            return _COUNT_NONZERO_SCALAR(out)
        return int(out) if op.kind in _PYTHON_INT and axis is None else out[()]
    return out


# Whole reductions len() answers with a Python int.
_PYTHON_INT = ("count_distinct", "hll")

# numpy.count_nonzero of a whole array: a Python int in numpy 1, numpy.intp
# in numpy 2; tally answers as the installed numpy does.
_COUNT_NONZERO_SCALAR = type(np.count_nonzero(np.zeros(1)))


def _probabilities(q: Any, percent: bool) -> np.ndarray:
    """q as float64, checked as numpy checks it (ValueError with numpy's
    sentence); percentiles divided by 100 first, as numpy.percentile does."""
    qa = np.true_divide(q, 100) if percent else q
    qa = np.asanyarray(qa, dtype=np.float64)
    if qa.size and not (qa.min() >= 0 and qa.max() <= 1):
        raise ValueError("Percentiles must be in the range [0, 100]" if percent
                         else "Quantiles must be in the range [0, 1]")
    return qa


def quantiles(client: Any, name: str, x: Any, q: np.ndarray, axis: Axis, keepdims: bool, make_op: Any,
              numpy_empty: Any = None) -> Any:
    """numpy.quantile's answer for the probabilities ``q`` (checked) over
    ``axis``: shape q.shape + the kept axes (keepdims: reduced axes as 1),
    a numpy scalar for a scalar q over the whole array. ``make_op(qs)`` is
    the op for a list of up to 1024 q (longer lists take several ops, in
    one call). An empty array sends nothing: ``numpy_empty()`` answers it
    (numpy's own answer, as there is nothing to reduce), else NaN."""
    a = _array(x, name)
    check_dtype(a.dtype)
    axes = tuple(range(a.ndim)) if axis is None else tuple(sorted(normalize_axis_tuple(axis, a.ndim)))
    kept_shape = tuple(1 if i in axes else s for i, s in enumerate(a.shape)) if keepdims else \
        tuple(s for i, s in enumerate(a.shape) if i not in axes)
    flat = q.reshape(-1)
    if a.size == 0 and numpy_empty is not None:
        return numpy_empty(a)
    data, offsets, shape = layout(a, axes)
    rows = int(np.prod(shape))
    sample = make_op([0.5])
    dtype = _values.value_dtype(sample, a.dtype)
    if flat.size == 0 or rows == 0:
        return np.empty(q.shape + kept_shape, dtype)
    if a.size == 0:  # rows of no elements: NaN (nanquantile, ddsketch), as numpy's nan-functions
        return np.full(q.shape + kept_shape, np.nan, dtype)
    # The server refuses quantiles of bools, numpy only their interpolation:
    # the methods that pick an element pick it among the bools as uint8.
    picks_bools = a.dtype == np.bool_ and sample.method in PICKING_METHODS
    ops = [make_op(list(flat[i:i + MAX_QUANTILES])) for i in range(0, flat.size, MAX_QUANTILES)]
    results = client.aggregate(data.view(np.uint8) if picks_bools else data, ops, offsets=offsets)
    # Each op answers (rows, its q) per row, (its q,) for the whole array.
    per_q = np.concatenate([np.asarray(results[i]).reshape(rows, -1) for i in range(len(ops))], axis=1)
    out = per_q.T.astype(dtype).reshape(q.shape + kept_shape)
    return out[()] if out.ndim == 0 else out


def _nan_dtype(kind: str, a: np.ndarray, q: np.ndarray, axis: Axis, out: Any) -> Any:
    """numpy 1.24's dtype where NaN decides it, for float32 and float16
    input, whose interpolated quantiles are otherwise float64: quantile of
    a whole array that holds a NaN, for a scalar q, answers the NaN element
    itself (numpy's _quantile returns arr[-1]); nanquantile answers a slice
    of only NaN with NaN of the input's dtype, and along an axis
    numpy.apply_along_axis gives every answer the first slice's dtype."""
    o = np.asarray(out)
    if o.dtype == a.dtype or a.dtype.kind != "f" or o.size == 0 or not np.isnan(o).any():
        return out
    whole = axis is None or len(normalize_axis_tuple(axis, a.ndim)) == a.ndim
    if kind == "quantile":
        cast = whole and q.ndim == 0 and bool(np.isnan(a).any())
    else:
        axes = tuple(range(a.ndim)) if whole else normalize_axis_tuple(axis, a.ndim)
        first = np.moveaxis(a, axes, tuple(range(a.ndim - len(axes), a.ndim)))
        first = first.reshape(-1) if whole else first.reshape(-1, int(np.prod([a.shape[i] for i in axes])))[0]
        cast = bool(np.isnan(first).all())
    if not cast:
        return out
    return a.dtype.type(out) if np.ndim(out) == 0 and not isinstance(out, np.ndarray) else o.astype(a.dtype)


def topk(client: Any, x: Any, k: int, axis: Optional[int], largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """torch.topk(x, k, dim=axis, largest=largest, sorted=True) as numpy
    arrays: (values, indices), the reduced axis holding min(k, its length)
    answers. axis None: the flattened array."""
    name = "topk" if largest else "bottomk"
    op = Op(name, k=k)
    a = _array(x, name)
    check_dtype(a.dtype)
    if axis is None:
        a, axis = a.reshape(-1), 0
    elif not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: axis must be an integer or None, not {type(axis).__name__}")
    (axis,) = normalize_axis_tuple(int(axis), a.ndim)
    moved = np.moveaxis(a, axis, -1)
    kept, n = moved.shape[:-1], moved.shape[-1]
    m = min(op.k, n)
    rows = int(np.prod(kept))
    values, indices = np.empty(kept + (m,), a.dtype), np.empty(kept + (m,), np.int64)
    if rows and m:
        answer = client.aggregate(moved.reshape(rows, n) if kept else moved, [op])[0]
        pairs = answer if kept else [answer]
        values.reshape(rows, m)[:] = np.stack([v for v, _ in pairs])
        indices.reshape(rows, m)[:] = np.stack([i for _, i in pairs])
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


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
    counts, edges = h.counts, _numpy_edges(lo, hi, bins, a, h.edges)
    if density:
        widths = np.diff(edges)
        with np.errstate(divide="ignore", invalid="ignore"):
            return counts / widths / counts.sum(), edges
    return counts, edges


def _numpy_edges(lo: Any, hi: Any, bins: int, a: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """numpy.histogram's edges (numpy's _get_bin_edges): a linspace in the
    type numpy promotes the outer edges and the data to, from the outer
    edges as numpy holds them, so that its rounding is numpy's: numpy 2
    (NEP 50) computes a float32 array's edges in float32, numpy 1 in
    float64. ``edges`` (the histogram's own) where numpy has no such type."""
    try:
        bin_type = np.result_type(lo, hi, a)
    except TypeError:
        return edges
    if np.issubdtype(bin_type, np.integer):
        bin_type = np.result_type(bin_type, float)
    return np.linspace(lo, hi, bins + 1, endpoint=True, dtype=bin_type)


def _outer_edges(client: Any, a: np.ndarray, range: Optional[tuple[float, float]]) -> tuple[Any, Any]:
    """numpy.histogram's outer edges (numpy.lib.histograms._get_outer_edges),
    the data's minimum and maximum asked of the server, as numpy holds them
    (scalars of the data's numpy dtype)."""
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
        if a.dtype.kind in "iuf" and isinstance(a.dtype.type(0), np.number):
            lo, hi = a.dtype.type(lo), a.dtype.type(hi)  # numpy's a.min(), a.max()
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
        """numpy.count_nonzero (for axis None the installed numpy's scalar type)."""
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

    # -- Quantiles, medians, the k largest and smallest, distinct counts -----
    # One value per q (per row), computed by the server's rules; numpy's
    # answers bitwise for float64 input (tally.proto, OP_QUANTILE).

    def quantile(self, x: Any, q: Any, axis: Axis = None, *, method: str = "linear",
                 keepdims: bool = False) -> Any:
        """numpy.quantile(x, q, axis=axis, method=method, keepdims=keepdims):
        the answers' shape is q's followed by the kept axes, a numpy scalar
        for a scalar q over the whole array; float64, or the input's dtype
        for the methods that pick an element (lower, higher, nearest,
        inverted_cdf, closest_observation). Every one of numpy's 13 methods,
        exact: bitwise numpy's for float64 input, within float64 rounding
        for the others. Any NaN in a slice gives NaN. q outside [0, 1] is
        numpy's ValueError; an unknown method a ValueError naming the 13;
        an empty array numpy's IndexError. bool input takes the methods
        that pick an element (numpy refuses to interpolate bools: TypeError).
        More than 1024 q go in several aggregations of one call."""
        return self._quantile("quantile", x, q, axis, method, keepdims)

    def nanquantile(self, x: Any, q: Any, axis: Axis = None, *, method: str = "linear",
                    keepdims: bool = False) -> Any:
        """numpy.nanquantile: :meth:`quantile` of the non-NaN elements; NaN for
        a slice with none (numpy warns "All-NaN slice encountered"). An
        empty array answers as numpy's (NaN)."""
        return self._quantile("nanquantile", x, q, axis, method, keepdims)

    def percentile(self, x: Any, q: Any, axis: Axis = None, *, method: str = "linear",
                   keepdims: bool = False) -> Any:
        """numpy.percentile: :meth:`quantile` of q / 100 (q in [0, 100], else
        numpy's ValueError)."""
        return self._quantile("quantile", x, q, axis, method, keepdims, percent=True)

    def nanpercentile(self, x: Any, q: Any, axis: Axis = None, *, method: str = "linear",
                      keepdims: bool = False) -> Any:
        """numpy.nanpercentile: :meth:`nanquantile` of q / 100."""
        return self._quantile("nanquantile", x, q, axis, method, keepdims, percent=True)

    def _quantile(self, kind: str, x: Any, q: Any, axis: Axis, method: str, keepdims: bool,
                  percent: bool = False) -> Any:
        qa = _probabilities(q, percent)
        Op(kind, q=0.5, method=method)  # the method's check, before anything is sent
        method = method.lower()
        a = x if isinstance(x, np.ma.MaskedArray) else np.asarray(x)
        if a.dtype == np.bool_ and method not in PICKING_METHODS:
            raise TypeError("numpy boolean subtract, the `-` operator, is not supported: quantiles of bools "
                            "take the methods that pick an element (lower, higher, nearest, inverted_cdf, "
                            "closest_observation)")
        name = kind.replace("quantile", "percentile") if percent else kind
        numpy_empty = lambda e: getattr(np, name)(e, q, axis=axis, method=method, keepdims=keepdims)  # noqa: E731
        out = quantiles(self, name, a, qa, axis, keepdims, lambda qs: Op(kind, q=qs, method=method), numpy_empty)
        return _nan_dtype(kind, a, qa, axis, out)

    def median(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.median: the middle element, or the mean of the middle two as
        numpy.mean computes it (float32 for float32 input, float64 for
        integers); NaN where a slice holds a NaN, and for an empty one
        (numpy warns)."""
        return reduce(self, "median", x, axis, keepdims)

    def nanmedian(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """numpy.nanmedian: :meth:`median` of the non-NaN elements; NaN for a
        slice with none."""
        return reduce(self, "nanmedian", x, axis, keepdims)

    def topk(self, x: Any, k: int, axis: Optional[int] = -1, *,
             largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` largest (``largest=False``: smallest) elements along
        ``axis`` and their indices, as torch.topk(x, k, dim=axis) answers
        them, sorted: ``(values, indices)``, numpy arrays of x's shape with
        that axis holding min(k, its length) answers (torch raises for a
        k beyond it), values in x's dtype, indices int64 along the axis.
        ``axis=None``: the flattened array. The order is numpy.sort's,
        stable: NaN above every number (first for the largest, last for
        the smallest), -0.0 equal to 0.0, ties to the smaller index, so
        for the largest, ``np.argsort(-x, kind="stable")[:k]`` where x has
        no NaN. k from 1 to 65536, else ValueError naming k."""
        return topk(self, x, k, axis, largest)

    def bottomk(self, x: Any, k: int, axis: Optional[int] = -1) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`topk` with ``largest=False``: the k smallest, smallest first."""
        return topk(self, x, k, axis, False)

    def count_distinct(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """The exact number of distinct elements, ``len(numpy.unique(x))``
        (a Python int for axis None, int64 arrays otherwise): -0.0 equals
        0.0 and every NaN is one value. The server keeps each slice's
        distinct values while it reads them (RESOURCE_EXHAUSTED beyond its
        --max_holistic_bytes: :meth:`approx_count_distinct` is bounded)."""
        return reduce(self, "count_distinct", x, axis, keepdims)

    def mode(self, x: Any, axis: Axis = None, *, keepdims: bool = False) -> Any:
        """The most frequent element, the smallest of equals
        (``scipy.stats.mode``'s value, pandas' ``Series.mode()[0]``), in the
        input's dtype: NaN left out (NaN for a slice of only NaN), -0.0
        equal to 0.0; an empty slice is INVALID_ARGUMENT. The server keeps
        each slice's distinct values and their counts while it reads them
        (within --max_holistic_bytes)."""
        return reduce(self, "mode", x, axis, keepdims)

    def approx_count_distinct(self, x: Any, axis: Axis = None, *, precision: int = 12,
                              keepdims: bool = False) -> Any:
        """The number of distinct elements by HyperLogLog over 2^precision
        registers (precision 4 to 18, else ValueError naming it): exact up
        to 2^precision / 4 distinct values, then within about
        1.04 / sqrt(2^precision) relative standard error (1.6% at 12).
        Values are told apart as :meth:`count_distinct` tells them."""
        return reduce(self, "hll", x, axis, keepdims, op=Op("hll", precision=precision))

    def ddsketch_quantile(self, x: Any, q: Any = 0.5, axis: Axis = None, *, relative_accuracy: float = 0.01,
                          keepdims: bool = False) -> Any:
        """Quantiles by DDSketch: for each q, a value within
        ``relative_accuracy`` (0.001 to 0.5, else ValueError naming it)
        relative error of numpy.quantile(x, q, method="lower") of the
        non-NaN elements; NaN for a slice with none. Shapes as
        :meth:`quantile` (q's axes first), float64. Its state is bounded
        by the range of the values, not their number, and merges exactly."""
        qa = _probabilities(q, False)
        Op("ddsketch", relative_accuracy=relative_accuracy)  # its check, before anything is sent
        return quantiles(self, "ddsketch_quantile", x, qa, axis, keepdims,
                         lambda qs: Op("ddsketch", relative_accuracy=relative_accuracy, q=qs))
