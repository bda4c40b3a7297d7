"""The steps of tally.dask's reductions: a block's partial states from a
tally server (the chunk step), their merge (combine), and the merged
states of a block of answers (aggregate). Picklable, for dask.distributed."""
from __future__ import annotations

import socket
import threading
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from . import partial as tp
from ._numpy import layout
from ._ops import INDEX_OPS, Op
from .client import Client

Targets = Union[str, Sequence[str], Mapping[str, str]]

# One client per target in each worker process, shared by its threads.
_clients: dict[tuple, Client] = {}
_clients_lock = threading.Lock()


def client(target: str, options: tuple) -> Client:
    key = (target, options)
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = Client(target, **dict(options))
        return c


def pick_target(targets: Targets, block: int) -> str:
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


def block_ids(numblocks: tuple, block_info: Optional[dict] = None) -> np.ndarray:
    """A block of the block-number array: the block's number in C order,
    repeated without memory (a zero-stride view)."""
    info = block_info[None]
    return np.broadcast_to(np.int64(np.ravel_multi_index(info["chunk-location"], numblocks)), info["chunk-shape"])


class Parts:
    """What a reduction carries between steps: per block of answers (keyed
    by the offsets of its first answer along the kept axes), one partial
    state per op, and the shape of that block of answers."""

    __slots__ = ("rows", "shape")

    def __init__(self, rows: dict[tuple, list[tp.Partial]], shape: tuple) -> None:
        self.rows, self.shape = rows, shape

    def merged_with(self, other: "Parts") -> "Parts":
        rows = dict(self.rows)
        for first, states in other.rows.items():
            mine = rows.get(first)
            rows[first] = states if mine is None else [tp.merge(a, b) for a, b in zip(mine, states)]
        return Parts(rows, self.shape)


def _flatten(blocks: Any) -> list[Parts]:
    if isinstance(blocks, np.ndarray):
        return [p for p in blocks.reshape(-1) if p is not None]
    out: list[Parts] = []
    for b in blocks:
        out.extend(_flatten(b))
    return out


def wrap(parts: Parts, ndim: int) -> np.ndarray:
    out = np.empty((1,) * ndim, dtype=object)
    out.reshape(-1)[0] = parts
    return out


def merge_blocks(blocks: Any) -> Parts:
    # Dask hands the blocks in block order: the merge tree is fixed by the
    # chunking and split_every, so float merges are deterministic too.
    parts = _flatten(blocks)
    if not parts:  # every block was empty
        return Parts({}, ())
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merged_with(p)
    return merged


def _depth(blocks: Any) -> int:
    """The dimensions of the blocks Dask hands over (lists nested per reduced axis)."""
    d = 0
    while isinstance(blocks, list):
        d, blocks = d + 1, blocks[0]
    return max(d, blocks.ndim if isinstance(blocks, np.ndarray) else 0)


def combine(blocks: Any, axis: Any = None, keepdims: bool = True) -> np.ndarray:
    return wrap(merge_blocks(blocks), _depth(blocks))


def merged_states(parts: Parts, ops: Sequence[Op], dtype: np.dtype) -> list[tp.Partial]:
    """The states of one block of answers (the merge identity where every
    block it covers was empty)."""
    if parts.rows:
        (states,) = parts.rows.values()
        return states
    rows = int(np.prod(parts.shape))
    return [tp.empty(op, dtype, rows if parts.shape else None) for op in ops]


class Chunk:
    """The chunk step: one block's partial states from a tally server,
    reduced over ``reduce_axes`` (the server's rows are the block's other
    axes). argmin and argmax indices count along the whole array: from the
    block's offset along one reduced axis, or as flat indices of the whole
    array where several axes are reduced."""

    def __init__(self, ops: list[Op], targets: Targets, chunks: tuple, options: tuple, reduce_axes: tuple,
                 shared_memory: bool = False) -> None:
        self.ops, self.targets, self.options = ops, targets, options
        self.reduce_axes, self.shared_memory = reduce_axes, shared_memory
        self.numblocks = tuple(len(c) for c in chunks)
        self.shape = tuple(int(sum(c)) for c in chunks)
        # Where each block along each axis starts.
        self.bounds = tuple(tuple(np.cumsum((0,) + tuple(c))[:-1].tolist()) for c in chunks)

    def __call__(self, x: np.ndarray, ids: np.ndarray, axis: Any = None, keepdims: bool = True) -> np.ndarray:
        if not any(x.shape):  # Dask asking for the chunk step's type on an empty stand-in
            return np.empty((0,) * x.ndim, dtype=object)
        data, offsets, shape = layout(x, self.reduce_axes)
        if x.size == 0:  # no elements, and no block number to place it: the merge identity
            return wrap(Parts({}, shape), x.ndim)
        block = int(ids.reshape(-1)[0])
        at = [self.bounds[d][i] for d, i in enumerate(np.unravel_index(block, self.numblocks))]
        base = at[self.reduce_axes[0]] if len(self.reduce_axes) == 1 else 0
        c = client(pick_target(self.targets, block), self.options)
        if self.shared_memory and offsets is None:
            # The block is copied once into /dev/shm and read there by the
            # server, instead of travelling through gRPC.
            with c.share(data) as shared:
                states = shared.partial(self.ops, base_index=base)
        else:
            states = c.partial(data, self.ops, base_index=base, offsets=offsets)
        if len(self.reduce_axes) > 1:
            self._place_indices(states, x.shape, at)
        kept = tuple(at[d] for d in range(x.ndim) if d not in self.reduce_axes)
        return wrap(Parts({kept: states}, shape), x.ndim)

    def _place_indices(self, states: list[tp.Partial], block_shape: tuple, at: list[int]) -> None:
        """Flat indices in the block's reduced axes -> flat indices in the
        whole array's (numpy's argmin over several axes is over all of them)."""
        axes = self.reduce_axes
        local_shape = tuple(block_shape[d] for d in axes)
        whole_shape = tuple(self.shape[d] for d in axes)
        for s in states:
            if s.op.kind not in INDEX_OPS:
                continue
            found = s.index >= 0
            coords = np.unravel_index(np.where(found, s.index, 0), local_shape)
            placed = np.ravel_multi_index(tuple(c + at[d] for c, d in zip(coords, axes)), whole_shape)
            s.index = np.where(found, placed, s.index).astype(np.int64)
