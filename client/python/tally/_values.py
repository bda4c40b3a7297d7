"""tally's answers as numpy answers: values in the dtypes numpy's own
reductions return, histograms as numpy.histogram's (counts, edges)."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ._ops import PICKING_METHODS, Q_OPS, Op, numpy_dtype_rule
from . import _arrays


def value_dtype(op: Op, dtype: np.dtype) -> np.dtype:
    """The dtype numpy returns for ``op`` over ``dtype`` input, by the op's
    ``numpy_dtype`` in tally.proto's OpFacts.

    numpy.sum gives int64 for signed, uint64 for unsigned integers and the
    input's float type (tally adds floats in float64, then rounds to it);
    min and max the input's dtype; mean, var and std float32 for float32
    input (float16 and bfloat16 for theirs) and float64 otherwise. sum_squares (tally's own) is float64;
    count, argmin and argmax are int64 (numpy's intp). The nan-functions
    answer as their plain ones (numpy.nansum as numpy.sum, ...); nancount
    is int64 like count. prod answers as sum (numpy's accumulator types:
    int64 for signed, uint64 for unsigned integers; tally multiplies floats
    in float64, then rounds to the input's float type); ptp in the input's
    dtype like min and max; any and all are bool; count_nonzero is int64
    (numpy's intp; numpy gives a Python int for a whole array).

    quantile and nanquantile are float64, but in the input's dtype for the
    methods that pick an element (numpy.quantile's rule: lower, higher,
    nearest, inverted_cdf, closest_observation; the server sends the
    element as float64, so int64 and uint64 elements beyond 2^53 come back
    rounded); median and nanmedian as mean; ddsketch float64; topk, bottomk
    and mode the input's dtype (topk's indices int64); hll and
    count_distinct int64."""
    rule = numpy_dtype_rule(op.kind)
    if rule == "quantile":
        return dtype if op.method in PICKING_METHODS else np.dtype(np.float64)
    if rule == "input":
        return dtype
    if rule == "sum":
        # bool sums and products are int64, as for signed integers.
        return dtype if _arrays.is_float(dtype) else np.dtype(np.int64 if dtype.kind in "ib" else np.uint64)
    if rule == "mean":
        # float16 and bfloat16 too answer in their own dtype, as numpy does.
        return dtype if _arrays.is_float(dtype) and dtype.itemsize <= 4 else np.dtype(np.float64)
    if rule == "float64":
        return np.dtype(np.float64)
    if rule == "bool":
        return np.dtype(np.bool_)
    return np.dtype(np.int64)


def edge_dtype(dtype: np.dtype) -> np.dtype:
    """numpy.histogram's edge dtype: the input's for float32, float16 and
    bfloat16, else float64."""
    return dtype if _arrays.is_float(dtype) and dtype.itemsize <= 4 else np.dtype(np.float64)


class Histogram:
    """A histogram as numpy.histogram returns it, ``counts, edges = h``, plus
    the values it did not count: ``below`` lo, ``above`` hi and ``nan``.

    For a 2-D input, ``counts`` has one row per input row and ``below``,
    ``above`` and ``nan`` are arrays with one entry per row; ``edges`` is
    shared."""

    __slots__ = ("counts", "edges", "below", "above", "nan")

    def __init__(self, counts: np.ndarray, edges: np.ndarray, below: Any, above: Any, nan: Any) -> None:
        self.counts, self.edges, self.below, self.above, self.nan = counts, edges, below, above, nan

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.counts, self.edges))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> np.ndarray:
        return (self.counts, self.edges)[i]

    def __repr__(self) -> str:
        return (f"Histogram(counts={self.counts!r}, edges={self.edges!r}, below={self.below!r}, "
                f"above={self.above!r}, nan={self.nan!r})")


def present(op: Op, dtype: np.dtype, raw: np.ndarray, segmented: bool) -> Any:
    """Per-row wire values (float64, int64 or uint64) as numpy would answer:
    an array for a segmented request, else a numpy scalar. minmax answers
    two values per row: a ``(min, max)`` tuple, or an array of shape
    (rows, 2) when segmented. quantile, nanquantile and ddsketch answer one
    value per q: an array of len(q) (shape (rows, len(q)) when segmented),
    a scalar (an array per row) for a scalar q."""
    out = raw.astype(value_dtype(op, dtype), copy=False)
    if op.kind in Q_OPS:
        # One value per q, row by row: (rows, len(q)), or (rows,) for a
        # scalar q (and ddsketch's median).
        per_row = out.reshape(-1, op.values_per_row)
        if op.scalar_q:
            per_row = per_row[:, 0]
        return per_row if segmented else per_row[0]
    if op.kind == "minmax":
        pairs = out.reshape(-1, 2)
        return pairs if segmented else (pairs[0, 0], pairs[0, 1])
    return out if segmented else out[0]


def present_histogram(op: Op, dtype: np.dtype, counts: np.ndarray, below: np.ndarray, above: np.ndarray,
                      nan: np.ndarray, segmented: bool) -> Histogram:
    """Per-row histogram counts (rows x bins) as a :class:`Histogram`."""
    edges = np.linspace(op.lo, op.hi, op.bins + 1, dtype=edge_dtype(dtype))
    counts = counts.astype(np.int64)
    below, above, nan = (np.asarray(x).astype(np.int64) for x in (below, above, nan))
    if segmented:
        return Histogram(counts, edges, below, above, nan)
    return Histogram(counts[0], edges, below[0], above[0], nan[0])


def present_topk(op: Op, dtype: np.dtype, raw: np.ndarray, indices: np.ndarray, lengths: np.ndarray,
                 segmented: bool) -> Any:
    """topk's and bottomk's wire values, every row's in turn, with their
    indices and each row's number of them, as ``(values, indices)`` numpy
    arrays (values in the input's dtype, indices int64): one pair, or a
    list of pairs, one per row, when segmented (rows may hold fewer than k:
    as many as they have elements)."""
    values = raw.astype(value_dtype(op, dtype), copy=False)
    indices = np.asarray(indices, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    cuts = np.cumsum(lengths)[:-1]
    pairs = list(zip(np.split(values, cuts), np.split(indices, cuts))) if len(lengths) else []
    return pairs if segmented else pairs[0]
