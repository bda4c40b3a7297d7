"""The steps of tally.dask's reductions: a block's partial states from a
tally server (the chunk step), their merge (combine), and the merged
states of a block of answers (aggregate). Picklable, for dask.distributed."""
from __future__ import annotations

import socket
import threading
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from . import _groupby as gb
from . import partial as tp
from ._groupby import take_states
from ._numpy import layout
from ._ops import INDEX_OPS, NO_EMPTY_ANSWER, STATE_OPS, Op
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


# -- pandas' groupby over Dask DataFrames ----------------------------------------

# Partition k's rows are numbered from k << ROW_BITS in the partial states
# (PartialRequest.base_index): argmin's and argmax's rows are then ordered
# as the frame's rows and distinct across partitions, so that the merge
# keeps the first occurrence, without the partitions' lengths (which Dask
# knows only once every earlier partition is computed). 2^40 rows a
# partition, 2^23 partitions: within base_index's 2^63.
ROW_BITS = 40
MAX_PARTITIONS = 1 << (63 - ROW_BITS)


class GroupStates:
    """What a groupby carries between steps, one entry per group, groups in
    the order their keys were first seen: the keys as labels (an Index per
    key column, NA as pandas has it), each value column's partial states by
    op, the index labels of the rows argmin's states (and argmax's, ...)
    hold, and the state counting each group's rows (None when no size is
    asked for)."""

    __slots__ = ("keys", "states", "labels", "sizes")

    def __init__(self, keys: list, states: dict, labels: dict, sizes: Optional[tp.Partial]) -> None:
        self.keys, self.states, self.labels, self.sizes = keys, states, labels, sizes

    @property
    def groups(self) -> int:
        return len(self.keys[0])


def group_partition(partition: Any, by: Any, agg: Any, sort: bool, dropna: bool, targets: Targets, block: int,
                    options: tuple) -> GroupStates:
    """The chunk step of a groupby: one GroupBy request (one per 64
    aggregations) over the partition, every aggregation asking for its
    partial states, the groups' keys decoded into labels here, so that they
    mean the same in every partition (strings are factorised per partition)."""
    return group_part(client(pick_target(targets, block), options), partition, by, agg, sort, dropna, block, None)


def group_part(c: Client, partition: Any, by: Any, agg: Any, sort: bool, dropna: bool, block: int,
               timeout: Optional[float]) -> GroupStates:
    """group_partition's work, through the client ``c``."""
    # Category keys decoded in their dtype's order (sort=True), the same in
    # every partition; the last step orders them as pandas would.
    p = gb.plan_groupby(partition, by, agg, {}, True, dropna, False, partial=True)
    if p.rows == 0:
        return GroupStates([k.decode(k.values[:0], np.empty(0, dtype=bool)) for k in p.keys], {}, {}, None)
    base = block << ROW_BITS
    grouped, states, sizes = c._group(p.keys, p.values, p.want_sizes, p.rows, sort, dropna, timeout,
                                      base_index=base)
    keys = [k.decode(kv, valid) for k, (kv, valid) in zip(p.keys, grouped.keys)]
    labels = {}
    for label, by_op in states.items():
        for op, s in by_op.items():
            if op.kind in INDEX_OPS:  # a group with no value has none: any label stands there
                labels[(label, op)] = partition.index.take(np.where(s.count > 0, s.index - base, 0))
    return GroupStates(keys, states, labels, sizes)


def _group_ids(keys: list) -> tuple[np.ndarray, np.ndarray]:
    """Each row's group, numbered in the order keys are first seen, and each
    group's first row. Keys compare as pandas' factorize compares them
    (-0.0 equals 0.0; NaN, None, NA and NaT are one NA key)."""
    import pandas as pd

    ids = None
    for k in keys:
        codes, uniques = pd.factorize(k)
        codes = codes.astype(np.int64) + 1  # NA (-1) as one more key
        ids = codes if ids is None else ids * (len(uniques) + 1) + codes
        ids = pd.factorize(ids)[0].astype(np.int64)
    return ids, np.unique(ids, return_index=True)[1]


def merge_groups(*parts: GroupStates) -> GroupStates:
    """The combine step: the groups of equal keys merged (tally.merge), the
    parts' states taken in partition order (a's elements before b's), the
    groups in the order first seen."""
    full = [p for p in parts if p.groups]
    if len(full) <= 1:
        return full[0] if full else parts[0]
    keys = [full[0].keys[c].append([p.keys[c] for p in full[1:]]) for c in range(len(full[0].keys))]
    ids, firsts = _group_ids(keys)
    n = len(firsts)
    every = np.arange(n)
    at = []  # per part: the part's row of each merged group, -1 for none
    start = 0
    for p in full:
        where = np.full(n, -1, dtype=np.int64)
        where[ids[start:start + p.groups]] = np.arange(p.groups)
        at.append(where)
        start += p.groups

    def merged(parts_states: list[tp.Partial], parts_labels: Optional[list] = None) -> tuple[tp.Partial, Any]:
        """The parts' states of each group merged in part order, and the
        label of the row an argmin's merge kept."""
        state, labels = None, None
        for k, where in enumerate(at):
            b = take_states(parts_states[k], where)
            b_labels = None if parts_labels is None else parts_labels[k].take(np.maximum(where, 0))
            if state is None:
                state, labels = b, b_labels
                continue
            state = tp.merge(state, b)
            if parts_labels is not None:
                from_b = (b.count > 0) & (state.index == b.index)  # rows are distinct across partitions
                labels = labels.append(b_labels).take(np.where(from_b, n + every, every))
        return state, labels

    states: dict = {}
    labels: dict = {}
    for label, by_op in full[0].states.items():
        states[label] = {}
        for op in by_op:
            key = (label, op)
            parts_labels = [p.labels[key] for p in full] if key in full[0].labels else None
            states[label][op], kept = merged([p.states[label][op] for p in full], parts_labels)
            if parts_labels is not None:
                labels[key] = kept
    sizes = None if full[0].sizes is None else merged([p.sizes for p in full])[0]
    return GroupStates([k.take(firsts) for k in keys], states, labels, sizes)


def _finished(s: tp.Partial) -> np.ndarray:
    """A state's value per group, as the server finishes it; for the ops
    with no value for no elements (min, quantile, ...) a group with none
    holds 0, which the answer marks missing (its count says so)."""
    if s.op.kind in NO_EMPTY_ANSWER:
        has = np.flatnonzero(s.count > 0)
        part = _finished_all(take_states(s, has))
        out = np.zeros(s.rows, dtype=part.dtype)
        out[has] = part
        return out
    return _finished_all(s)


def _finished_all(s: tp.Partial) -> np.ndarray:
    return np.asarray(tp.finish(s)) if s.op.kind in STATE_OPS else tp.finish_raw(s)


def finish_groups(merged: GroupStates, meta: Any, by: Any, agg: Any, sort: bool, dropna: bool,
                  observed: bool) -> Any:
    """The last step: the merged states finished (tally.finish), the groups
    sorted by key (sort=True; NA last) or left in the order first seen, and
    pandas' result assembled as :meth:`tally.Client.groupby` assembles it
    (a category key's categories without rows added unless ``observed``)."""
    import pandas as pd

    p = gb.plan_groupby(meta, by, agg, {}, sort, dropna, observed, partial=True)
    n = merged.groups
    order = np.arange(n)
    if sort and n:
        ranks = []
        for k in merged.keys:
            codes, uniques = pd.factorize(k, sort=True)
            ranks.append(np.where(codes == -1, len(uniques), codes))
        order = np.lexsort(ranks[::-1])
    keys = [k.take(order) for k in merged.keys]
    # Category keys: their codes decoded as the whole frame's would be
    # (pandas' order of categories with sort=False).
    decoded = [mk.decode(np.asarray(k.codes), np.asarray(k.codes) != -1) if mk.category is not None else k
               for mk, k in zip(p.keys, keys)]

    index_labels = [meta.index[:0]]
    answers: dict = {}
    for v in p.values:
        got: dict = {}
        for op in v.ops:
            s = merged.states.get(v.label, {}).get(op)
            if op.kind in INDEX_OPS:
                rows = np.arange(n, dtype=np.int64) + sum(len(x) for x in index_labels)
                if s is not None:
                    index_labels.append(merged.labels[(v.label, op)].take(order))
                found = np.ones(n, dtype=bool) if s is None else take_states(s, order).count > 0
                got[op] = gb.Answer(rows, found, rows)
            else:
                got[op] = gb.Answer(np.empty(0) if s is None else _finished(take_states(s, order)))
        answers[v.label] = got.__getitem__
    sizes = None
    if p.want_sizes:
        sizes = np.empty(0, np.int64) if merged.sizes is None else \
            take_states(merged.sizes, order).count.astype(np.int64)
    index = index_labels[0].append(index_labels[1:]) if len(index_labels) > 1 else index_labels[0]
    return gb.assemble_result(p, decoded, answers, sizes, index, sort, observed)
