"""Dask arrays and DataFrames aggregated by tally servers, lazily, on
Dask's own scheduler.

Every function here builds a Dask graph and sends nothing: results compute
on ``.compute()`` (or ``dask.compute`` with other work). The graph is a
tree reduction: its chunk step asks a tally server for each block's (each
partition's) partial states, round-robin over ``targets`` by block or the
server on the worker's own host; its combine steps merge them
(tally.merge) on the workers; its last step finishes the merged states
into answers. It runs on the local schedulers and on dask.distributed
alike. Needs dask (and distributed, for a cluster).

- numpy's reductions over Dask Arrays of any chunking and axis, as Dask
  Arrays: :func:`sum`, :func:`prod`, :func:`mean`, :func:`var`,
  :func:`std`, :func:`min`, :func:`max`, :func:`ptp`, :func:`argmin`,
  :func:`argmax`, :func:`count_nonzero`, :func:`any`, :func:`all` and the
  nan-functions (``tally.dask.nanmean(x, axis=0, targets=...)``).
- pandas' ``agg`` over a Dask DataFrame or Series: :func:`agg`, a Delayed.
- pandas' ``groupby(by).agg(...)`` over a Dask DataFrame: :func:`groupby`,
  a Delayed.
- the fused many-ops call of :meth:`tally.Client.aggregate`:
  :func:`aggregate`, a Delayed of :class:`tally.Results`.

``targets`` (the tally servers, ``"host:port"`` strings: a list is used
round-robin by block; a mapping from host names to servers sends each
worker's blocks to its own host's server) may be set once with
:func:`use`.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np

import dask
import dask.array as da

from . import _dask_steps as steps
from . import _groupby
from . import _pandas
from . import _values
from . import partial as tp
from ._arrays import check_dtype
from ._groupby import concat_states
from ._numpy import normalize_axis_tuple
from ._ops import INDEX_OPS, Op, OpLike, parse_ops, spelled_ops
from ._results import Results

Targets = steps.Targets
_defaults: dict[str, Any] = {"targets": None, "client_options": {}}


def use(targets: Targets, **client_options: Any) -> None:
    """The servers (and :class:`tally.Client` options, e.g. ``token``) that
    calls without ``targets=`` use."""
    _defaults["targets"], _defaults["client_options"] = targets, dict(client_options)


def _targets(targets: Optional[Targets]) -> Targets:
    targets = _defaults["targets"] if targets is None else targets
    if not targets:
        raise ValueError("no tally servers: pass targets= or call tally.dask.use(targets) first")
    return targets if isinstance(targets, (str, Mapping)) else tuple(targets)


def _options(timeout: Optional[float], client_options: Optional[Mapping[str, Any]]) -> tuple:
    options = dict(_defaults["client_options"] if client_options is None else client_options)
    options.setdefault("timeout", timeout)
    return tuple(sorted(options.items()))


def _chunked_reduction(array: "da.Array", ops: list[Op], targets: Optional[Targets], axes: tuple,
                       reduce_axes: tuple, aggregate: Any, keepdims: bool, dtype: Any, meta: np.ndarray,
                       timeout: Optional[float], split_every: Optional[int],
                       client_options: Optional[Mapping[str, Any]], shared_memory: bool = False) -> "da.Array":
    """dask.array.reduction over ``axes`` whose chunk step asks a server for
    each block's states over ``reduce_axes``."""
    ids = da.map_blocks(steps.block_ids, array.numblocks, dtype=np.int64, chunks=array.chunks,
                        meta=np.empty((0,) * array.ndim, dtype=np.int64))
    chunk = steps.Chunk(ops, _targets(targets), array.chunks, _options(timeout, client_options), reduce_axes,
                        shared_memory)
    return da.reduction(array, chunk, aggregate, combine=steps.combine, axis=axes, keepdims=keepdims,
                        dtype=dtype, concatenate=False, split_every=split_every, weights=ids, meta=meta,
                        name="tally-" + "-".join(op.kind for op in ops))


# -- numpy's reductions -------------------------------------------------------

# numpy functions answered from partial states, each by its own op's.
# ptp's state holds the min and the max, and finishing it takes max - min
# in the input's dtype (numpy.ptp), as the server would.
_FUNCTION_OPS = {name: (name,) for name in (
    "sum", "prod", "mean", "var", "std", "min", "max", "ptp", "argmin", "argmax", "count_nonzero", "any", "all",
    "nansum", "nanmean", "nanvar", "nanstd", "nanmin", "nanmax", "nanargmin", "nanargmax")}
_DDOF_FUNCTIONS = ("var", "std", "nanvar", "nanstd")
# numpy functions without a dtype argument (numpy.any(x, dtype=...) is a TypeError).
_NO_DTYPE_FUNCTIONS = ("count_nonzero", "any", "all")


class _Finish:
    """The aggregate step of a numpy reduction: the merged states of a
    block of answers, finished, in numpy's shape and dtype."""

    def __init__(self, name: str, ops: list[Op], dtype: np.dtype, out_dtype: np.dtype) -> None:
        self.name, self.ops, self.dtype, self.out_dtype = name, ops, dtype, out_dtype

    def __call__(self, blocks: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
        parts = steps.merge_blocks(blocks)
        states = steps.merged_states(parts, self.ops, self.dtype)
        try:
            (value,) = [np.asarray(tp.finish(s)) for s in states]
        except ValueError:  # no elements for min, max, ptp or an index: numpy's error
            raise ValueError(f"zero-size array to reduction operation {self.name} which has no identity") from None
        out = value.astype(self.out_dtype).reshape(parts.shape)
        if keepdims:
            ndim = len(parts.shape) + len(axis)
            kept = iter(parts.shape)
            out = out.reshape(tuple(1 if d in axis else next(kept) for d in range(ndim)))
        return out


def reduce(name: str, x: Any, axis: Any = None, *, keepdims: bool = False, dtype: Any = None, ddof: float = 0,
           targets: Optional[Targets] = None, split_every: Optional[int] = None, timeout: Optional[float] = 60.0,
           client_options: Optional[Mapping[str, Any]] = None) -> "da.Array":
    """numpy.<name>(x, axis, dtype, ddof, keepdims) over the Dask Array ``x``,
    as a lazy Dask Array of numpy's shape and dtype (0-d for a whole
    reduction). Computed by tally servers from each block's partial states,
    merged in the graph. Blocks reduced over axes other than their last are
    copied first (as :meth:`tally.Client.sum` does)."""
    if name not in _FUNCTION_OPS:
        raise ValueError(f"tally.dask has no {name!r}; it has {', '.join(_FUNCTION_OPS)}")
    if ddof and name not in _DDOF_FUNCTIONS:
        raise TypeError(f"{name} takes no ddof")
    if dtype is not None and name in _NO_DTYPE_FUNCTIONS:
        raise TypeError(f"{name} takes no dtype")
    x = x if isinstance(x, da.Array) else da.asarray(x)
    if dtype is not None:
        x = x.astype(dtype)
    in_dtype = check_dtype(x.dtype)
    if axis is not None and name in INDEX_OPS and not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: axis must be an integer or None, not {type(axis).__name__}")
    axes = tuple(range(x.ndim)) if axis is None else tuple(sorted(normalize_axis_tuple(axis, x.ndim)))
    ops = [Op(Op.parse(k).kind, ddof=ddof) if name in _DDOF_FUNCTIONS else Op.parse(k) for k in _FUNCTION_OPS[name]]
    out_dtype = np.dtype(dtype) if dtype is not None else _values.value_dtype(Op.parse(name), in_dtype)
    if x.ndim == 0:
        x = x.reshape(1)
        axes, squeeze = (0,), True
    else:
        squeeze = False
    out_ndim = x.ndim if keepdims else x.ndim - len(axes)
    result = _chunked_reduction(x, ops, targets, axes, axes, _Finish(name, ops, in_dtype, out_dtype), keepdims,
                                out_dtype, np.empty((0,) * out_ndim, out_dtype), timeout, split_every,
                                client_options)
    return result.reshape(()) if squeeze and keepdims else result


def _function(name: str) -> Any:
    def function(x: Any, axis: Any = None, *, keepdims: bool = False, dtype: Any = None, ddof: float = 0,
                 targets: Optional[Targets] = None, split_every: Optional[int] = None,
                 timeout: Optional[float] = 60.0, client_options: Optional[Mapping[str, Any]] = None) -> "da.Array":
        return reduce(name, x, axis, keepdims=keepdims, dtype=dtype, ddof=ddof, targets=targets,
                      split_every=split_every, timeout=timeout, client_options=client_options)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = (f"numpy.{name} over a Dask Array, lazily, computed by tally servers: see "
                        f":func:`tally.dask.reduce`.")
    return function


sum = _function("sum")
prod = _function("prod")
mean = _function("mean")
var = _function("var")
std = _function("std")
min = _function("min")
max = _function("max")
ptp = _function("ptp")
argmin = _function("argmin")
argmax = _function("argmax")
count_nonzero = _function("count_nonzero")
any = _function("any")
all = _function("all")
nansum = _function("nansum")
nanmean = _function("nanmean")
nanvar = _function("nanvar")
nanstd = _function("nanstd")
nanmin = _function("nanmin")
nanmax = _function("nanmax")
nanargmin = _function("nanargmin")
nanargmax = _function("nanargmax")


# -- The fused many-ops call ---------------------------------------------------

def _aggregate_step(blocks: Any, axis: Any, keepdims: bool) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = steps.merge_blocks(blocks)
    return out


def reduce_partials(array: "da.Array", ops: Union[OpLike, Iterable[OpLike]], targets: Optional[Targets] = None, *,
                    timeout: Optional[float] = 60.0, split_every: Optional[int] = None,
                    client_options: Optional[Mapping[str, Any]] = None,
                    shared_memory: bool = False) -> "da.Array":
    """The lazy reduction behind :func:`aggregate`: a 0-d dask array of
    dtype object whose one element is the merged partial states, for
    :func:`finish` to turn into answers. Arguments as :func:`aggregate`."""
    parsed = parse_ops(ops)
    check_dtype(array.dtype)
    if array.ndim not in (1, 2):
        raise ValueError(f"tally.dask.aggregate takes 1-D arrays (whole) and 2-D arrays (by row), not {array.ndim}-D")
    return _chunked_reduction(array, parsed, targets, tuple(range(array.ndim)), (array.ndim - 1,), _aggregate_step,
                              False, object, np.empty((), dtype=object), timeout, split_every, client_options,
                              shared_memory)


def finish(merged: Any, ops: Union[OpLike, Iterable[OpLike]], segmented: bool) -> Results:
    """The answers from :func:`reduce_partials`'s computed value (``segmented``:
    the array was 2-D), keyed by the spellings in ``ops``."""
    spelled = spelled_ops(ops)
    parts = merged[()] if isinstance(merged, np.ndarray) else merged
    firsts = sorted(parts.rows)
    values = []
    for k in range(len(spelled)):
        if not segmented:
            values.append(tp.finish(parts.rows[firsts[0]][k]))
        else:
            values.append(tp.finish(_concat_rows([parts.rows[f][k] for f in firsts])))
    return Results([op for _, op in spelled], values, None, [key for key, _ in spelled])


def _concat_rows(blocks: list[tp.Partial]) -> tp.Partial:
    """Row blocks' states, in row order, as one state of all the rows."""
    return concat_states(blocks)


def aggregate(array: "da.Array", ops: Union[OpLike, Iterable[OpLike]], targets: Optional[Targets] = None, *,
              timeout: Optional[float] = 60.0, split_every: Optional[int] = None,
              client_options: Optional[Mapping[str, Any]] = None, shared_memory: bool = False) -> "dask.delayed":
    """Aggregates a Dask array on tally servers, as
    :meth:`tally.Client.aggregate` would the whole array: a Delayed whose
    ``.compute()`` gives the :class:`tally.Results` (``execution`` is None:
    many servers answered). Nothing is sent before.

    ``array``: a 1-D dask array (aggregated whole) or a 2-D one (row by row,
    every answer an array with one entry per row), of a dtype tally
    aggregates, chunked any way along either axis.

    ``ops`` as :meth:`tally.Client.aggregate` takes them, among those with
    partial states: sum, min, max, mean, count, sum_squares, variance,
    stddev, argmin, argmax, histogram, prod, count_nonzero, any, all, ptp
    and the NaN-skipping ops (nansum, nanmean, nanmin, nanmax, nanargmin,
    nanargmax, nanvar, nanstd, nancount: pandas' skipna), and the functions
    whose states tally's rules keep (quantile, nanquantile, median,
    nanmedian, topk, bottomk, hll, ddsketch, count_distinct: merged by the
    package's native module, exactly, so their answers are those of one
    request over the whole array; topk's indices count along the whole
    row). minmax has none (ValueError: ask for min and max).

    Each chunk's partial states come from a server (the chunk step, on the
    workers), are merged in Dask's combine and aggregate steps (on the
    workers, in block order: deterministic for a given chunking and
    ``split_every``), and are finished in the last task. Every chunk's
    call has a deadline of ``timeout`` seconds, so a server that dies or
    stalls fails the computation with :class:`tally.Error` (UNAVAILABLE,
    DEADLINE_EXCEEDED, ...) instead of hanging it. ``client_options`` are
    passed to each worker's :class:`tally.Client` (e.g. ``token``, ``tls``).
    ``shared_memory=True`` hands each block to its server through a POSIX
    shared-memory object (:meth:`tally.Client.share`) instead of gRPC: for
    servers on the workers' own hosts (a ``targets`` mapping of host names,
    or loopback addresses), it saves the block's trip through the socket."""
    merged = reduce_partials(array, ops, targets, timeout=timeout, split_every=split_every,
                             client_options=client_options, shared_memory=shared_memory)
    return dask.delayed(finish)(merged, [key for key, _ in spelled_ops(ops)], array.ndim == 2)


# -- pandas' agg over Dask DataFrames -----------------------------------------

class _FrameStates:
    """Per requested column: its ops, their merged partial states, and the
    rows seen."""

    __slots__ = ("columns",)

    def __init__(self, columns: list[tuple[list[Op], list[tp.Partial], int]]) -> None:
        self.columns = columns

    def merged_with(self, other: "_FrameStates") -> "_FrameStates":
        return _FrameStates([(ops, [tp.merge(a, b) for a, b in zip(mine, theirs)], n + m)
                             for (ops, mine, n), (_, theirs, m) in zip(self.columns, other.columns)])


def _partition_states(partition: Any, func: Any, targets: Targets, block: int, options: tuple) -> _FrameStates:
    c = steps.client(steps.pick_target(targets, block), options)
    out = []
    for col, funcs in _pandas.requests(partition, func):
        ops = _pandas.ops_for(col, funcs, every_op=True)
        out.append((ops, c.partial(col.values, ops, valid=col.valid), col.size))
    return _FrameStates(out)


def _merge_states(*parts: _FrameStates) -> _FrameStates:
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merged_with(p)
    return merged


def _frame_answer(merged: _FrameStates, meta: Any, func: Any) -> Any:
    answers = []
    for (col, funcs), (ops, states, rows) in zip(_pandas.requests(meta, func), merged.columns):
        col.size = rows

        def value(op: Op, ops: list[Op] = ops, states: list[tp.Partial] = states) -> Any:
            return tp.finish(states[ops.index(op)])

        answers.append([_pandas.answer(col, f, value) for f in funcs])
    return _pandas.assemble(meta, func, answers)


def agg(frame: Any, func: Union[str, list, dict], targets: Optional[Targets] = None, *, split_every: int = 8,
        timeout: Optional[float] = 60.0, client_options: Optional[Mapping[str, Any]] = None) -> "dask.delayed":
    """What pandas' ``agg(func)`` answers for the whole of a Dask DataFrame or
    Series (:meth:`tally.Client.agg`'s functions and rules), as a Delayed:
    each partition's partial states come from a server, merged in a tree of
    ``split_every`` (the graph's tasks), finished into pandas' answer by the
    last task.
    Nothing is sent before ``.compute()``. Category columns need known
    categories (``ddf.categorize()``), so that every partition's codes mean
    the same."""
    meta = frame._meta
    for col, funcs in _pandas.requests(meta, func):  # refuses bad names and dtypes now, not at compute
        if col.kind == "category" and "__UNKNOWN_CATEGORIES__" in list(col.dtype.categories):
            raise TypeError(f"column {col.name!r} has unknown categories: call .categorize() first")
    targets, options = _targets(targets), _options(timeout, client_options)
    level = [dask.delayed(_partition_states)(p, func, targets, k, options)
             for k, p in enumerate(frame.to_delayed())]
    while len(level) > 1:
        level = [dask.delayed(_merge_states)(*level[k:k + split_every]) for k in range(0, len(level), split_every)]
    return dask.delayed(_frame_answer)(level[0], meta, func)


# -- pandas' groupby over Dask DataFrames ----------------------------------------

# Client.groupby's functions whose states tally's rules keep as bytes, merged by tally._states.
_NATIVE_GROUP_STATES = ("median", "quantile", "nunique")


def groupby(frame: Any, by: Any, agg: Any, targets: Optional[Targets] = None, *, sort: bool = True,
            dropna: bool = True, observed: Optional[bool] = None, split_every: int = 8,
            timeout: Optional[float] = 60.0, client_options: Optional[Mapping[str, Any]] = None) -> "dask.delayed":
    """What pandas' ``frame.groupby(by, sort=sort, dropna=dropna,
    observed=observed).agg(agg)`` answers for the whole of a Dask DataFrame
    (``ddf.groupby(...).agg(...).compute()``), as a Delayed of that pandas
    DataFrame (a Series for ``agg="size"``), as :func:`agg` answers a
    Delayed. Nothing is sent before ``.compute()``.

    ``by`` and ``agg`` as :meth:`tally.Client.groupby` takes them (a label or
    a list of 1 to 8; a name, a list or a dict {column: names}), with its
    rules for keys, values, NA and pandas' dtypes (``observed``: whether a
    category key's categories without rows are left out; None, the default,
    is the installed pandas' default, False before pandas 3, True from it), and
    its functions, every one with partial states per group: sum, prod,
    mean, min, max, count, size, std, var, any, all, idxmin and idxmax
    (index labels, from the nanargmin and nanargmax states; the first row
    on ties, as pandas), and median, quantile and nunique, whose states
    tally's rules merge in the package's native module (tally._states:
    without it they are an ImportError).

    Each partition goes to a server (round-robin over ``targets`` by
    partition, or the worker's host's own, as :func:`agg`) in one GroupBy
    call (one per 64 aggregations) that answers each group's partial states
    (argmin's rows counted from partition << 40, so that they are ordered as
    the frame's rows); keys that are not numbers are factorised per
    partition and carried through the merge as their values. The graph's
    combine steps merge the states of equal keys (NA as one key with
    ``dropna=False``, -0.0 and 0.0 as one) in partition order, in a tree of
    ``split_every`` (tally.merge), and the last task finishes them, sorts
    the groups by key (``sort=True``, NA last) or keeps them in the order
    first seen across the partitions, and assembles pandas' result.
    Category keys and values need known categories (``ddf.categorize()``)."""
    import pandas as pd

    meta = getattr(frame, "_meta", None)
    if not isinstance(meta, pd.DataFrame) or not hasattr(frame, "to_delayed"):
        raise TypeError(f"tally.dask.groupby takes a Dask DataFrame, not {type(frame).__name__}")
    if not isinstance(split_every, int) or split_every < 2:
        raise ValueError(f"split_every must be an integer >= 2, got {split_every!r}")
    if observed is None:
        observed = _groupby._default_observed(meta)  # Client.groupby's default: pandas'
    plan = _groupby.plan_groupby(meta, by, agg, {}, sort, dropna, observed, partial=True)  # refuses bad input now
    funcs = {f for v in plan.values for f in v.funcs}
    native = [f for f in _NATIVE_GROUP_STATES if f in funcs]
    if native:
        try:
            from . import _states  # noqa: F401
        except ImportError:
            raise ImportError(f"tally.dask.groupby: merging the partial states of {native} needs tally's native "
                              f"module (tally._states), which is built with the package where pybind11 is "
                              f"installed (Debian: pybind11-dev)") from None
    for label in list(plan.by) + [v.label for v in plan.values]:
        dtype = meta[label].dtype
        if isinstance(dtype, pd.CategoricalDtype) and "__UNKNOWN_CATEGORIES__" in list(dtype.categories):
            raise TypeError(f"column {label!r} has unknown categories: call .categorize() first")
    parts = frame.to_delayed()
    if len(parts) > steps.MAX_PARTITIONS:
        raise ValueError(f"tally.dask.groupby takes at most {steps.MAX_PARTITIONS} partitions, not {len(parts)}")
    targets, options = _targets(targets), _options(timeout, client_options)
    level = [dask.delayed(steps.group_partition)(p, by, agg, sort, dropna, targets, k, options)
             for k, p in enumerate(parts)]
    while len(level) > 1:
        level = [dask.delayed(steps.merge_groups)(*level[k:k + split_every])
                 for k in range(0, len(level), split_every)]
    return dask.delayed(steps.finish_groups)(level[0], meta, by, agg, sort, dropna, observed)
