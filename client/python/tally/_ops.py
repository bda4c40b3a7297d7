"""Aggregations: parsed from the command line's mini-language ("sum",
"std:1", "hist:256:-1:1") or built as :class:`Op` objects."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Union

# Canonical op names (tally/rules/op.h) and their aliases, as the CLI accepts.
_ALIASES = {
    "sum": "sum", "min": "min", "max": "max", "mean": "mean", "count": "count",
    "sum_squares": "sum_squares", "sumsq": "sum_squares",
    "variance": "variance", "var": "variance",
    "stddev": "stddev", "std": "stddev",
    "argmin": "argmin", "argmax": "argmax",
    "histogram": "histogram", "hist": "histogram",
    "nansum": "nansum", "nanmean": "nanmean", "nanmin": "nanmin", "nanmax": "nanmax",
    "nanargmin": "nanargmin", "nanargmax": "nanargmax", "nanvar": "nanvar", "nanstd": "nanstd",
    "nancount": "nancount",
    "prod": "prod", "product": "prod", "count_nonzero": "count_nonzero", "nnz": "count_nonzero",
    "any": "any", "all": "all", "ptp": "ptp", "minmax": "minmax",
}
OP_NAMES = ("sum", "min", "max", "mean", "count", "sum_squares", "variance", "stddev",
            "argmin", "argmax", "histogram",
            # numpy's nan-functions: NaN elements are skipped (tally.proto, OP_NANSUM...).
            "nansum", "nanmean", "nanmin", "nanmax", "nanargmin", "nanargmax", "nanvar", "nanstd",
            "nancount",
            # numpy.prod, count_nonzero, any, all and ptp (tally.proto, OP_PROD...).
            "prod", "count_nonzero", "any", "all", "ptp",
            # (min, max) in one answer (tally.proto, OP_MINMAX).
            "minmax")
# Ops with no answer for no elements (an empty array, row or segment): the
# server refuses them, as numpy raises (tally.proto, ArraySpec.offsets).
NO_EMPTY_ANSWER = ("min", "max", "argmin", "argmax", "ptp", "minmax", "nanmin", "nanmax", "nanargmin",
                   "nanargmax")
# Ops that answer an index (numpy's argmin family: one axis or the
# flattened array, never a tuple of axes).
INDEX_OPS = ("argmin", "argmax", "nanargmin", "nanargmax")
# Ops that take a ddof.
_DDOF_OPS = ("variance", "stddev", "nanvar", "nanstd")
_KNOWN = ("sum, min, max, mean, count, sum_squares|sumsq, variance|var[:DDOF], "
          "stddev|std[:DDOF], argmin, argmax, histogram|hist:BINS:LO:HI, nansum, nanmean, nanmin, "
          "nanmax, nanargmin, nanargmax, nanvar[:DDOF], nanstd[:DDOF], nancount, prod|product, "
          "count_nonzero|nnz, any, all, ptp, minmax")
MAX_HISTOGRAM_BINS = 65536


@dataclass(frozen=True)
class Op:
    """One aggregation.

    ``kind`` is a canonical name (``"sum"``, ``"variance"``, ``"histogram"``,
    ``"nansum"``, ...); ``ddof`` applies to variance, stddev, nanvar and nanstd;
    ``bins``, ``lo`` and ``hi`` are
    required for histograms and refused otherwise. Equal ops compare equal,
    whatever spelling they were parsed from.
    """

    kind: str
    ddof: float = 0.0
    bins: int | None = None
    lo: float | None = None
    hi: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in OP_NAMES:
            raise ValueError(f"unknown op {self.kind!r}; expected one of {', '.join(OP_NAMES)}")
        if self.kind in _DDOF_OPS:
            if not (math.isfinite(self.ddof) and self.ddof >= 0):
                raise ValueError(f"{self.kind}: ddof must be a finite number >= 0, got {self.ddof}")
            object.__setattr__(self, "ddof", float(self.ddof))
        elif self.ddof != 0.0:
            raise ValueError(f"{self.kind} takes no ddof")
        if self.kind == "histogram":
            if self.bins is None or self.lo is None or self.hi is None:
                raise ValueError("histogram needs bins, lo and hi")
            if isinstance(self.bins, bool) or int(self.bins) != self.bins or not 1 <= self.bins <= MAX_HISTOGRAM_BINS:
                raise ValueError(f"histogram: bins must be an integer from 1 to {MAX_HISTOGRAM_BINS}, got {self.bins}")
            lo, hi = float(self.lo), float(self.hi)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError(f"histogram: lo and hi must be finite, got [{lo}, {hi}]")
            if not lo < hi:
                raise ValueError(f"histogram: lo must be less than hi, got [{lo}, {hi}]")
            object.__setattr__(self, "bins", int(self.bins))
            object.__setattr__(self, "lo", lo)
            object.__setattr__(self, "hi", hi)
        elif (self.bins, self.lo, self.hi) != (None, None, None):
            raise ValueError(f"{self.kind} takes no histogram spec")

    @classmethod
    def parse(cls, text: str) -> "Op":
        """An op from one token of the CLI's ``--ops``, e.g. ``"std:1"`` or
        ``"hist:256:-1:1"``. Raises ValueError naming the token."""
        if not isinstance(text, str):
            raise TypeError(f"an op is a string or a tally.Op, not {type(text).__name__}")
        token = text.strip()
        parts = token.split(":")
        kind = _ALIASES.get(parts[0].lower())
        if kind is None:
            raise ValueError(f"bad aggregation {text!r}: unknown op; expected one of {_KNOWN}")
        args = parts[1:]
        try:
            if kind in _DDOF_OPS:
                if len(args) > 1:
                    raise ValueError("expected at most one argument, the ddof (e.g. var:1)")
                return cls(kind, ddof=_number(args[0]) if args else 0.0)
            if kind == "histogram":
                if len(args) != 3:
                    raise ValueError("expected histogram:BINS:LO:HI (e.g. hist:256:-1:1)")
                try:
                    bins = int(args[0])
                except ValueError:
                    raise ValueError(f"BINS must be an integer from 1 to {MAX_HISTOGRAM_BINS}") from None
                return cls(kind, bins=bins, lo=_number(args[1]), hi=_number(args[2]))
            if args:
                raise ValueError(f"{kind} takes no arguments")
            return cls(kind)
        except ValueError as e:
            raise ValueError(f"bad aggregation {text!r}: {e}") from None

    def __str__(self) -> str:
        """The canonical spelling, which :meth:`parse` reads back."""
        if self.kind in _DDOF_OPS:
            return f"{self.kind}:{self.ddof!r}" if self.ddof else self.kind
        if self.kind == "histogram":
            return f"histogram:{self.bins}:{self.lo!r}:{self.hi!r}"
        return self.kind


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


OpLike = Union[str, Op]


def spelled_ops(ops: Union[OpLike, Iterable[OpLike]]) -> list[tuple[str, Op]]:
    """Each op of ``ops`` with the spelling the caller gave it: the token as
    written (``"std:1"``) for strings, the canonical spelling for
    :class:`Op` objects. ``ops`` is a comma-separated string, one op, or a
    sequence of strings (each may hold several, comma-separated) and
    :class:`Op` objects. Raises ValueError for a bad op and for none at all."""
    items = [ops] if isinstance(ops, (str, Op)) else list(ops)
    parsed: list[tuple[str, Op]] = []
    for item in items:
        if isinstance(item, Op):
            parsed.append((str(item), item))
            continue
        if not isinstance(item, str):
            raise TypeError(f"an op is a string or a tally.Op, not {type(item).__name__}")
        tokens = item.split(",")
        if any(not t.strip() for t in tokens):
            raise ValueError(f"empty aggregation in {item!r}; expected e.g. sum,max,var:1")
        parsed.extend((t.strip(), Op.parse(t)) for t in tokens)
    if not parsed:
        raise ValueError("at least one aggregation is required")
    return parsed


def parse_ops(ops: Union[OpLike, Iterable[OpLike]]) -> list[Op]:
    """The :class:`Op` objects of ``ops``, taken as :func:`spelled_ops` takes them."""
    return [op for _, op in spelled_ops(ops)]
