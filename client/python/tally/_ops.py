"""Aggregations: parsed from the command line's mini-language ("sum",
"std:1", "hist:256:-1:1", "quantile:0.5,0.99:hazen") or built as
:class:`Op` objects."""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Iterable, Union

from .v1 import tally_pb2 as pb


def _op_facts() -> dict:
    """Each op's name and its facts (tally.proto's OpFacts on each Op value:
    spellings, parameters, flags), in tally.proto's order. The server's
    registry of aggregate functions declares the same facts, held equal by
    a test, so this package keeps no table of ops of its own."""
    out = {}
    for value in pb.Op.DESCRIPTOR.values:
        if value.number == 0:
            continue
        out[value.name[len("OP_"):].lower()] = value.GetOptions().Extensions[pb.op_facts]
    return out


_FACTS = _op_facts()
OP_NAMES = tuple(_FACTS)
# Canonical op names and their other spellings, as the CLI accepts them.
_ALIASES = {**{name: name for name in OP_NAMES},
            **{alias: name for name, f in _FACTS.items() for alias in f.spellings}}
# Ops with no answer for no elements (an empty array, row or segment): the
# server refuses them, as numpy raises (tally.proto, ArraySpec.offsets).
# quantile raises there as numpy.quantile does; nanquantile, median and
# nanmedian answer NaN, topk and bottomk no values.
NO_EMPTY_ANSWER = tuple(name for name, f in _FACTS.items() if f.refuses_empty)
# Ops whose state the server's function registry keeps (tally.proto,
# PartialState.function_state): their partial states are opaque bytes,
# merged and finished by tally's own rules (tally._states).
STATE_OPS = tuple(name for name, f in _FACTS.items() if f.function_state)
# Ops that answer one value per q (a scalar q: one value).
Q_OPS = tuple(name for name, f in _FACTS.items() if "q" in f.params)
# Ops that answer up to k values per row and their indices.
TOPK_OPS = tuple(name for name, f in _FACTS.items() if "k" in f.params)
# Ops that answer an index (numpy's argmin family: one axis or the
# flattened array, never a tuple of axes).
INDEX_OPS = tuple(name for name, f in _FACTS.items() if f.answers_index and name not in TOPK_OPS)


def numpy_dtype_rule(kind: str) -> str:
    """The op's answer dtype as numpy gives it, as tally.proto's OpFacts
    names it ("input", "sum", "mean", "float64", "bool", "quantile"; ""
    for int64)."""
    return _FACTS[kind].numpy_dtype


# Ops that take a ddof.
_DDOF_OPS = tuple(name for name, f in _FACTS.items() if "ddof" in f.params)
# How each parameter is written after an op's name on the command line.
_PARAM_TEXT = {"ddof": "[:DDOF]", "histogram.bins": ":BINS", "histogram.lo": ":LO", "histogram.hi": ":HI",
               "q": ":Q[,Q...]", "method": "[:METHOD]", "k": ":K", "precision": ":PRECISION",
               "relative_accuracy": ":ACCURACY"}


def _spelled(name: str, f) -> str:
    params = "".join(_PARAM_TEXT[p] for p in f.params)
    if name == "ddsketch":  # its q is optional
        params = params.replace(":Q[,Q...]", "[:Q,...]")
    return "|".join([name, *f.spellings]) + params


_KNOWN = ", ".join(_spelled(name, f) for name, f in _FACTS.items())
MAX_HISTOGRAM_BINS = 65536
# tally.proto's limits on the functions' parameters (Aggregation.q, k,
# precision, relative_accuracy).
MAX_QUANTILES = 1024
MAX_TOPK = 65536
HLL_PRECISIONS = (4, 18)
DDSKETCH_ACCURACY = (0.001, 0.5)
# numpy.quantile's methods, in tally.proto's QuantileMethod order.
QUANTILE_METHODS = ("linear", "inverted_cdf", "averaged_inverted_cdf", "closest_observation",
                    "interpolated_inverted_cdf", "hazen", "weibull", "median_unbiased", "normal_unbiased", "lower",
                    "higher", "midpoint", "nearest")
# The methods that answer an element (numpy answers them in the input's dtype).
PICKING_METHODS = ("inverted_cdf", "closest_observation", "lower", "higher", "nearest")
# Where a list parameter (q) stands among an op's arguments: a comma after
# it and a number continues the list ("quantile:0.1,0.9,max" is two ops).
_LIST_AT = {"quantile": 0, "nanquantile": 0, "ddsketch": 1}


@dataclass(frozen=True)
class Op:
    """One aggregation.

    ``kind`` is a canonical name (``"sum"``, ``"variance"``, ``"histogram"``,
    ``"nansum"``, ``"quantile"``, ...). Each parameter belongs to some ops
    and is refused by the others (ValueError naming it):

    - ``ddof``: variance, stddev, nanvar and nanstd (finite, >= 0);
    - ``bins``, ``lo``, ``hi``: histogram, all three required (1 to 65536
      bins, lo < hi, both finite);
    - ``q``: quantile and nanquantile (required) and ddsketch (optional: the
      median without it), probabilities in [0, 1], 1 to 1024 of them. A
      scalar q answers one value, a sequence one per q, as numpy.quantile;
    - ``method``: quantile and nanquantile, one of numpy's 13 names
      (:data:`QUANTILE_METHODS`; "linear" by default);
    - ``k``: topk and bottomk, 1 to 65536;
    - ``precision``: hll, 4 to 18 (2^precision registers);
    - ``relative_accuracy``: ddsketch, 0.001 to 0.5.

    Equal ops compare equal, whatever spelling they were parsed from (a
    scalar q and a one-element list are the same op; only the shape of the
    answer differs).
    """

    kind: str
    ddof: float = 0.0
    bins: int | None = None
    lo: float | None = None
    hi: float | None = None
    q: Any = None
    method: str | None = None
    k: int | None = None
    precision: int | None = None
    relative_accuracy: float | None = None
    # Whether q was given as a scalar: the answer is then one value, not an
    # array of one (numpy.quantile's rule). Not part of the op's identity.
    scalar_q: bool | None = field(default=None, compare=False, repr=False)

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
        self._check_q()
        if self.kind in ("quantile", "nanquantile"):
            method = "linear" if self.method is None else self.method
            if not isinstance(method, str) or method.lower() not in QUANTILE_METHODS:
                raise ValueError(f"{self.kind}: method must be one of {', '.join(QUANTILE_METHODS)}, "
                                 f"got {method!r}")
            object.__setattr__(self, "method", method.lower())
        elif self.method is not None:
            raise ValueError(f"{self.kind} takes no method")
        self._check_integer("k", TOPK_OPS, 1, MAX_TOPK)
        self._check_integer("precision", ("hll",), *HLL_PRECISIONS)
        if self.kind == "ddsketch":
            lo, hi = DDSKETCH_ACCURACY
            a = self.relative_accuracy
            if a is None or isinstance(a, bool) or not isinstance(a, (int, float)) or not lo <= float(a) <= hi:
                raise ValueError(f"ddsketch: relative_accuracy must be a number from {lo} to {hi}, got {a!r}")
            object.__setattr__(self, "relative_accuracy", float(a))
        elif self.relative_accuracy is not None:
            raise ValueError(f"{self.kind} takes no relative_accuracy")

    def _check_q(self) -> None:
        if self.kind not in Q_OPS:
            if self.q is not None:
                raise ValueError(f"{self.kind} takes no q")
            return
        q = self.q
        if q is None:
            if self.kind != "ddsketch":
                raise ValueError(f"{self.kind} needs q, the probabilities (in [0, 1])")
            q = ()  # ddsketch's median
        scalar = self.scalar_q
        if isinstance(q, (str, bytes)):
            raise ValueError(f"{self.kind}: q must be a number or a sequence of numbers, not {q!r}")
        if isinstance(q, (int, float)) or (hasattr(q, "ndim") and getattr(q, "ndim") == 0):
            values, scalar = [q], True if scalar is None else scalar
        else:
            try:
                values = list(q)
            except TypeError:
                raise ValueError(f"{self.kind}: q must be a number or a sequence of numbers, not {q!r}") from None
            scalar = (self.kind == "ddsketch" and not values) if scalar is None else scalar
        least = 0 if self.kind == "ddsketch" else 1
        if not least <= len(values) <= MAX_QUANTILES:
            raise ValueError(f"{self.kind}: q must hold {least} to {MAX_QUANTILES} probabilities, got {len(values)}")
        out = []
        for i, v in enumerate(values):
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"{self.kind}: q[{i}] must be a number in [0, 1], got {v!r}") from None
            if isinstance(v, bool) or not 0.0 <= f <= 1.0:
                raise ValueError(f"{self.kind}: q[{i}] must be in [0, 1], got {v!r}")
            out.append(f)
        object.__setattr__(self, "q", tuple(out))
        object.__setattr__(self, "scalar_q", bool(scalar) and len(out) <= 1)

    def _check_integer(self, name: str, kinds: tuple, lo: int, hi: int) -> None:
        value = getattr(self, name)
        if self.kind not in kinds:
            if value is not None:
                raise ValueError(f"{self.kind} takes no {name}")
            return
        try:
            v = None if isinstance(value, (bool, float)) else operator.index(value)
        except TypeError:
            v = None
        if v is None or not lo <= v <= hi:
            raise ValueError(f"{self.kind}: {name} must be an integer from {lo} to {hi}, got {value!r}")
        object.__setattr__(self, name, int(v))

    @property
    def values_per_row(self) -> int:
        """How many values the op answers per row: one per q (one for a
        ddsketch without q), up to k for topk and bottomk, two for minmax,
        else one."""
        if self.kind in Q_OPS:
            return max(len(self.q), 1)
        if self.kind in TOPK_OPS:
            return self.k
        return 2 if self.kind == "minmax" else 1

    @classmethod
    def parse(cls, text: str) -> "Op":
        """An op from one token of the CLI's ``--ops``, e.g. ``"std:1"``,
        ``"hist:256:-1:1"`` or ``"quantile:0.5,0.99:hazen"``. Raises
        ValueError naming the token."""
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
            if kind in ("quantile", "nanquantile"):
                if not 1 <= len(args) <= 2:
                    raise ValueError(f"expected {kind}:Q[,Q...][:METHOD] (e.g. {kind}:0.5,0.99:hazen)")
                return cls(kind, q=_q_list(args[0]), method=args[1] if len(args) > 1 else None)
            if kind in TOPK_OPS:
                if len(args) != 1:
                    raise ValueError(f"expected {kind}:K (e.g. {kind}:10)")
                return cls(kind, k=_whole(args[0], "K"))
            if kind == "hll":
                if len(args) != 1:
                    raise ValueError("expected hll:PRECISION (e.g. hll:12)")
                return cls(kind, precision=_whole(args[0], "PRECISION"))
            if kind == "ddsketch":
                if not 1 <= len(args) <= 2:
                    raise ValueError("expected ddsketch:ACCURACY[:Q,...] (e.g. ddsketch:0.01:0.5,0.99)")
                return cls(kind, relative_accuracy=_number(args[0]), q=_q_list(args[1]) if len(args) > 1 else None)
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
        if self.kind in ("quantile", "nanquantile"):
            method = "" if self.method == "linear" else f":{self.method}"
            return f"{self.kind}:{_q_text(self.q)}{method}"
        if self.kind in TOPK_OPS:
            return f"{self.kind}:{self.k}"
        if self.kind == "hll":
            return f"hll:{self.precision}"
        if self.kind == "ddsketch":
            return f"ddsketch:{self.relative_accuracy!r}" + (f":{_q_text(self.q)}" if self.q else "")
        return self.kind


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _whole(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {text!r}") from None


def _q_list(text: str) -> Any:
    """q as written: one number (a scalar q) or several, comma-separated."""
    items = text.split(",")
    if any(not t.strip() for t in items):
        raise ValueError(f"Q must be numbers separated by commas, got {text!r}")
    values = []
    for t in items:
        try:
            values.append(float(t))
        except ValueError:
            raise ValueError(f"Q must be numbers in [0, 1], got {t.strip()!r}") from None
    return values[0] if len(values) == 1 else values


def _q_text(q: tuple) -> str:
    return ",".join(repr(v) for v in q)


def _continues_list(token: str, piece: str) -> bool:
    """Whether ``piece`` (the text after a comma) is more of ``token``'s q
    list: a number, maybe followed by the op's next argument
    ("quantile:0.1" then "0.9:hazen")."""
    parts = token.split(":")
    at = _LIST_AT.get(_ALIASES.get(parts[0].strip().lower(), ""))
    if at is None or len(parts) - 2 != at:
        return False
    try:
        float(piece.split(":")[0])
    except ValueError:
        return False
    return True


OpLike = Union[str, Op]


def spelled_ops(ops: Union[OpLike, Iterable[OpLike]]) -> list[tuple[str, Op]]:
    """Each op of ``ops`` with the spelling the caller gave it: the token as
    written (``"std:1"``) for strings, the canonical spelling for
    :class:`Op` objects. ``ops`` is a comma-separated string, one op, or a
    sequence of strings (each may hold several, comma-separated) and
    :class:`Op` objects. A comma inside a q list stays in its op:
    ``"quantile:0.1,0.9,max"`` is quantile of two q, then max. Raises
    ValueError for a bad op and for none at all."""
    items = [ops] if isinstance(ops, (str, Op)) else list(ops)
    parsed: list[tuple[str, Op]] = []
    for item in items:
        if isinstance(item, Op):
            parsed.append((str(item), item))
            continue
        if not isinstance(item, str):
            raise TypeError(f"an op is a string or a tally.Op, not {type(item).__name__}")
        tokens: list[str] = []
        for piece in item.split(","):
            if tokens and piece.strip() and _continues_list(tokens[-1], piece):
                tokens[-1] += "," + piece.strip()
            else:
                tokens.append(piece)
        if any(not t.strip() for t in tokens):
            raise ValueError(f"empty aggregation in {item!r}; expected e.g. sum,max,var:1")
        parsed.extend((t.strip(), Op.parse(t)) for t in tokens)
    if not parsed:
        raise ValueError("at least one aggregation is required")
    return parsed


def parse_ops(ops: Union[OpLike, Iterable[OpLike]]) -> list[Op]:
    """The :class:`Op` objects of ``ops``, taken as :func:`spelled_ops` takes them."""
    return [op for _, op in spelled_ops(ops)]
