"""Dask arrays aggregated by tally servers, on Dask's own scheduler.

:func:`aggregate` is a ``dask.array.reduction``: its chunk step asks a tally
server for each chunk's partial states (round-robin over ``targets`` by
block, or the server on the worker's own host), its combine and aggregate
steps merge them (tally.merge) on the workers, and the client finishes the
one merged state it receives (tally.finish). It works with the local
schedulers and with dask.distributed alike. Needs dask (and distributed,
for a cluster).
"""
from __future__ import annotations

import socket
import threading
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

import dask.array as da

from . import partial as tp
from ._arrays import check_dtype
from ._ops import Op, OpLike, parse_ops
from .client import Client, Results

Targets = Union[str, Sequence[str], Mapping[str, str]]

# One client per target in each worker process, shared by its threads.
_clients: dict[tuple, Client] = {}
_clients_lock = threading.Lock()


def _client(target: str, options: tuple) -> Client:
    key = (target, options)
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = Client(target, **dict(options))
        return c


def _pick_target(targets: Targets, block: int) -> str:
    """The server for a block: the worker host's own when ``targets`` maps
    host names to servers and names this host, else round-robin by block."""
    if isinstance(targets, str):
        return targets
    if isinstance(targets, Mapping):
        own = targets.get(socket.gethostname())
        if own is not None:
            return own
        targets = sorted(targets.values())
    return targets[block % len(targets)]


def _block_starts(ncols: int, block_info: Optional[dict] = None) -> np.ndarray:
    """A block of the position array: its first element's flat position,
    repeated without memory (a zero-stride view), row * ncols + column."""
    info = block_info[None]
    location = info["array-location"]
    start = location[0][0] * ncols + location[1][0] if len(location) == 2 else location[0][0]
    return np.broadcast_to(np.int64(start), info["chunk-shape"])


class _Parts:
    """What the reduction carries between steps: per block of rows (keyed
    by the first row; 0 for a 1-D array), one partial state per op."""

    __slots__ = ("rows",)

    def __init__(self, rows: dict[int, list[tp.Partial]]) -> None:
        self.rows = rows

    def merged_with(self, other: "_Parts") -> "_Parts":
        rows = dict(self.rows)
        for first, states in other.rows.items():
            mine = rows.get(first)
            rows[first] = states if mine is None else [tp.merge(a, b) for a, b in zip(mine, states)]
        return _Parts(rows)


def _flatten(blocks: Any) -> list[_Parts]:
    if isinstance(blocks, np.ndarray):
        return [p for p in blocks.reshape(-1) if p is not None]
    out: list[_Parts] = []
    for b in blocks:
        out.extend(_flatten(b))
    return out


def _wrap(parts: _Parts, ndim: int) -> np.ndarray:
    out = np.empty((1,) * ndim, dtype=object)
    out.reshape(-1)[0] = parts
    return out


def _merge_blocks(blocks: Any) -> _Parts:
    # Dask hands the blocks in block order: the merge tree is fixed by the
    # chunking and split_every, so float merges are deterministic too.
    parts = _flatten(blocks)
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merged_with(p)
    return merged


def _combine(blocks: Any, axis: Any, keepdims: bool) -> np.ndarray:
    return _wrap(_merge_blocks(blocks), _depth(blocks))


def _depth(blocks: Any) -> int:
    """The dimensions of the blocks Dask hands over (lists nested per reduced axis)."""
    d = 0
    while isinstance(blocks, list):
        d, blocks = d + 1, blocks[0]
    return max(d, blocks.ndim if isinstance(blocks, np.ndarray) else 0)


def _aggregate(blocks: Any, axis: Any, keepdims: bool) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = _merge_blocks(blocks)
    return out


def _finish(parts: _Parts, ops: list[Op], segmented: bool) -> list[Any]:
    firsts = sorted(parts.rows)
    if not segmented:
        return [tp.finish(s) for s in parts.rows[firsts[0]]]
    values = []
    for k in range(len(ops)):
        blocks = [parts.rows[f][k] for f in firsts]
        values.append(tp.finish(_concat_rows(blocks)))
    return values


def _concat_rows(blocks: list[tp.Partial]) -> tp.Partial:
    """Row blocks' states, in row order, as one state of all the rows."""
    first = blocks[0]
    fields = {name: np.concatenate([getattr(b, name) for b in blocks])
              for name in ("count", "value", "sum_squares", "mean", "m2", "index", "histogram", "below", "above", "nan",
                           "elements")}
    return tp.Partial(op=first.op, dtype=first.dtype, segmented=True, version=first.version, **fields)


def reduce_partials(array: "da.Array", ops: Union[OpLike, Iterable[OpLike]], targets: Targets, *,
                    timeout: Optional[float] = 60.0, split_every: Optional[int] = None,
                    client_options: Optional[Mapping[str, Any]] = None,
                    shared_memory: bool = False) -> "da.Array":
    """The lazy reduction behind :func:`aggregate`: a 0-d dask array of
    dtype object whose one element is the merged partial states, for
    :func:`finish` to turn into answers. Arguments as :func:`aggregate`."""
    parsed = parse_ops(ops)
    check_dtype(array.dtype)
    if array.ndim not in (1, 2):
        raise ValueError(f"tally.dask aggregates 1-D arrays (whole) and 2-D arrays (by row), not {array.ndim}-D")
    if not targets:
        raise ValueError("no tally servers in targets")
    ncols = array.shape[-1]
    options = dict(client_options or {})
    options.setdefault("timeout", timeout)
    starts = da.map_blocks(_block_starts, ncols, dtype=np.int64, chunks=array.chunks,
                           meta=np.empty((0,) * array.ndim, dtype=np.int64))
    chunk = _Chunk(parsed, targets if isinstance(targets, (str, Mapping)) else tuple(targets), array.chunks,
                   tuple(sorted(options.items())), shared_memory)
    return da.reduction(array, chunk, _aggregate, combine=_combine, dtype=object, concatenate=False,
                        split_every=split_every, weights=starts, name="tally-aggregate",
                        meta=np.empty((), dtype=object))


def finish(merged: Any, ops: Union[OpLike, Iterable[OpLike]], segmented: bool) -> Results:
    """The answers from :func:`reduce_partials`'s computed value (``segmented``:
    the array was 2-D)."""
    parsed = parse_ops(ops)
    parts = merged[()] if isinstance(merged, np.ndarray) else merged
    return Results(parsed, _finish(parts, parsed, segmented), None)


def aggregate(array: "da.Array", ops: Union[OpLike, Iterable[OpLike]], targets: Targets, *,
              timeout: Optional[float] = 60.0, split_every: Optional[int] = None,
              client_options: Optional[Mapping[str, Any]] = None, shared_memory: bool = False) -> Results:
    """Aggregates a Dask array on tally servers, as
    :meth:`tally.Client.aggregate` would the whole array, and returns the
    :class:`tally.Results` (``execution`` is None: many servers answered).

    ``array``: a 1-D dask array (aggregated whole) or a 2-D one (row by row,
    every answer an array with one entry per row), of a dtype tally
    aggregates, chunked any way along either axis. ``targets``: the tally
    servers, ``"host:port"`` strings: a list is used round-robin by block; a
    mapping from host names to servers sends each worker's chunks to its own
    host's server (and round-robin over them from other hosts).

    ``ops`` as :meth:`tally.Client.aggregate` takes them, among those with
    partial states: sum, min, max, mean, count, sum_squares, variance,
    stddev, argmin, argmax, histogram and the NaN-skipping ops (nansum,
    nanmean, nanmin, nanmax, nanargmin, nanargmax, nanvar, nanstd, nancount:
    pandas' skipna). prod, count_nonzero, any, all and ptp have none yet
    (the servers refuse them:
    :class:`tally.Error`, INVALID_ARGUMENT), nor has minmax (ValueError: ask
    for min and max).

    Each chunk's partial states come from a server (the chunk step, on the
    workers), are merged in Dask's combine and aggregate steps (on the
    workers, in block order: deterministic for a given chunking and
    ``split_every``), and are finished here, on the client. Every chunk's
    call has a deadline of ``timeout`` seconds, so a server that dies or
    stalls fails the computation with :class:`tally.Error` (UNAVAILABLE,
    DEADLINE_EXCEEDED, ...) instead of hanging it. ``client_options`` are
    passed to each worker's :class:`tally.Client` (e.g. ``token``, ``tls``).
    ``shared_memory=True`` hands each block to its server through a POSIX
    shared-memory object (:meth:`tally.Client.share`) instead of gRPC: for
    servers on the workers' own hosts (a ``targets`` mapping of host names,
    or loopback addresses), it saves the block's trip through the socket.
    Computes with the current Dask scheduler (a dask.distributed Client
    when one is active)."""
    merged = reduce_partials(array, ops, targets, timeout=timeout, split_every=split_every,
                             client_options=client_options, shared_memory=shared_memory).compute()
    return finish(merged, ops, array.ndim == 2)


class _Chunk:
    """The chunk step: one block's partial states from a tally server.
    Picklable, for dask.distributed."""

    def __init__(self, ops: list[Op], targets: Targets, chunks: tuple, options: tuple,
                 shared_memory: bool = False) -> None:
        self.ops, self.targets, self.options = ops, targets, options
        self.shared_memory = shared_memory
        # Where each block along each axis starts, to number the blocks.
        self.bounds = tuple(tuple(np.cumsum((0,) + tuple(c))[:-1].tolist()) for c in chunks)
        self.ncols = int(sum(chunks[-1]))

    def __call__(self, x: np.ndarray, starts: np.ndarray, axis: Any = None, keepdims: bool = True) -> np.ndarray:
        flat = int(starts.reshape(-1)[0]) if starts.size else 0
        first_row, first_col = divmod(flat, self.ncols) if x.ndim == 2 and self.ncols else (0, flat)
        # Blocks numbered in C order, for the round-robin.
        col_block = int(np.searchsorted(self.bounds[-1], first_col, side="right")) - 1
        row_block = int(np.searchsorted(self.bounds[0], first_row, side="right")) - 1 if x.ndim == 2 else 0
        block = row_block * len(self.bounds[-1]) + col_block
        client = _client(_pick_target(self.targets, block), self.options)
        if self.shared_memory:
            # The block is copied once into /dev/shm and read there by the
            # server, instead of travelling through gRPC.
            with client.share(x) as shared:
                states = shared.partial(self.ops, base_index=first_col)
        else:
            states = client.partial(x, self.ops, base_index=first_col)
        return _wrap(_Parts({first_row: states}), x.ndim)
