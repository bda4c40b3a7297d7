"""What a call answers: the values keyed by the spellings the caller asked
for, and what the server reports it did."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from ._ops import Op


@dataclass(frozen=True)
class Execution:
    """What the server reports it did for one call: ``elements`` and
    ``bytes`` aggregated, ``rows`` answered (1 for a whole array),
    ``backend`` ("cpu", "cuda"), ``device`` (the GPU or CPU model) and
    ``seconds`` on the server, from the first byte received to the result."""

    elements: int
    bytes: int
    rows: int
    backend: str
    device: str
    seconds: float

    @classmethod
    def from_proto(cls, e: Any) -> Optional["Execution"]:
        """From a tally.v1.Execution message; None for None."""
        if e is None or isinstance(e, Execution):
            return e
        return cls(int(e.elements), int(e.bytes), int(e.rows), e.backend, e.device, float(e.server_seconds))


class Results(Mapping[str, Any]):
    """The answers of one call, in request order, keyed by the spellings the
    ops were asked for (``"std:1"`` stays ``"std:1"``; an :class:`Op` object
    is keyed by its canonical spelling, ``"stddev:1.0"``). Any other
    spelling of an op, an :class:`Op` or a position finds its answer too.
    ``execution`` is the server's :class:`Execution` (None where many
    servers answered)."""

    def __init__(self, ops: Sequence[Op], values: Sequence[Any], execution: Any = None,
                 keys: Optional[Sequence[str]] = None) -> None:
        self._ops = list(ops)
        self._values = list(values)
        self._keys = [str(op) for op in self._ops] if keys is None else list(keys)
        if not len(self._keys) == len(self._ops) == len(self._values):
            raise ValueError(f"{len(self._ops)} ops, {len(self._values)} values and {len(self._keys)} keys")
        self.execution = Execution.from_proto(execution)

    def _position(self, key: Union[int, str, Op]) -> int:
        if isinstance(key, int):
            return key
        if isinstance(key, str) and key in self._keys:
            return self._keys.index(key)
        try:
            return self._ops.index(key if isinstance(key, Op) else Op.parse(key))
        except ValueError:  # not asked for, or not an op at all
            raise KeyError(key) from None

    def __getitem__(self, key: Union[int, str, Op]) -> Any:
        return self._values[self._position(key)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._ops)

    def __repr__(self) -> str:
        return "Results({" + ", ".join(f"{k!r}: {v!r}" for k, v in zip(self._keys, self._values)) + "})"
