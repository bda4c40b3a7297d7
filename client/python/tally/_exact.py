"""Exact float sums as partial states carry them (tally.proto,
PartialState.exact_sum, version 1): the sum of the elements as an integer
number of 2^-1074 units, with the counts of NaNs and infinities and whether
an element other than -0.0 was seen; merged by adding, rounded once. The
same rules as tally/rules/exact_sum.h, byte for byte (tests/python/
partial_rules_test.py holds them to it through tally._states).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

_VERSION = 1
_HEADER = struct.Struct("<BQQQQBHH")
_DIGITS = 68
_UNIT = 1 << 1074  # units of 2^-1074 per 1.0


@dataclass
class ExactSum:
    count: int = 0
    nan: int = 0
    positive_inf: int = 0
    negative_inf: int = 0
    other_than_negative_zero: bool = False
    units: int = 0  # the finite elements' exact sum, in units of 2^-1074


def parse(data: bytes) -> ExactSum:
    """The state in ``data``; ValueError for bytes that are not one."""
    if len(data) < _HEADER.size:
        raise ValueError("exact_sum: too short")
    version, count, nan, pinf, ninf, flags, first, digits = _HEADER.unpack_from(data)
    if version != _VERSION:
        raise ValueError(f"exact_sum: version {version} is not one this package knows ({_VERSION})")
    if flags & ~3 or first + digits > _DIGITS or (digits == 0 and (first != 0 or flags & 2)):
        raise ValueError("exact_sum: malformed header")
    if len(data) != _HEADER.size + 4 * digits:
        raise ValueError("exact_sum: wrong length")
    words = struct.unpack_from(f"<{digits}I", data, _HEADER.size)
    if digits and (words[0] == 0 or words[-1] == 0):
        raise ValueError("exact_sum: not canonical")
    magnitude = sum(w << (32 * (first + k)) for k, w in enumerate(words))
    return ExactSum(count, nan, pinf, ninf, bool(flags & 1), -magnitude if flags & 2 else magnitude)


def to_bytes(s: ExactSum) -> bytes:
    """The canonical bytes: the same state gives the same bytes."""
    magnitude = abs(s.units)
    words = []
    while magnitude:
        words.append(magnitude & 0xFFFFFFFF)
        magnitude >>= 32
    first = next((k for k, w in enumerate(words) if w), 0)
    words = words[first:]
    flags = (1 if s.other_than_negative_zero else 0) | (2 if s.units < 0 else 0)
    return (_HEADER.pack(_VERSION, s.count, s.nan, s.positive_inf, s.negative_inf, flags, first if words else 0,
                         len(words)) + struct.pack(f"<{len(words)}I", *words))


def of_double(x: float) -> ExactSum:
    """A state that keeps no exact sum counted as its float_sum, one element."""
    s = ExactSum(count=1)
    if x != x:
        s.nan, s.other_than_negative_zero = 1, True
    elif math.isinf(x):
        s.positive_inf, s.negative_inf = (1, 0) if x > 0 else (0, 1)
        s.other_than_negative_zero = True
    elif x == 0:
        s.other_than_negative_zero = math.copysign(1.0, x) > 0
    else:
        p, q = x.as_integer_ratio()  # q is a power of two, at most 2^1074
        s.units = p * (_UNIT // q)
        s.other_than_negative_zero = True
    return s


def merged(a: ExactSum, b: ExactSum) -> ExactSum:
    return ExactSum(a.count + b.count, a.nan + b.nan, a.positive_inf + b.positive_inf,
                    a.negative_inf + b.negative_inf, a.other_than_negative_zero or b.other_than_negative_zero,
                    a.units + b.units)


def rounded(s: ExactSum) -> float:
    """The sum rounded once to float64, ties to even (Python's division of
    integers rounds so), with IEEE's infinities and NaN and numpy's -0.0."""
    if s.nan or (s.positive_inf and s.negative_inf):
        return math.nan
    if s.positive_inf:
        return math.inf
    if s.negative_inf:
        return -math.inf
    if s.units == 0:
        return -0.0 if s.count and not s.other_than_negative_zero else 0.0
    try:
        return s.units / _UNIT
    except OverflowError:
        return math.inf if s.units > 0 else -math.inf


def merge_bytes(a: bytes, a_sum: float, b: bytes, b_sum: float) -> tuple[bytes, float]:
    """Two rows' sums merged (rules::Merge for OP_SUM, and OP_SUM_SQUARES's
    sums of squares): either side without exact bytes counts as its value."""
    x = parse(a) if a else of_double(a_sum)
    y = parse(b) if b else of_double(b_sum)
    m = merged(x, y)
    return to_bytes(m), rounded(m)


def second_moment(s: ExactSum, q: ExactSum, n: int) -> float:
    """rules::ExactSecondMoment: M2 = (n Q - S^2) / n rounded once to
    float64, from the exact sum S and exact sum of squares Q of n elements;
    NaN where either saw a NaN or an infinity; 0 where n Q - S^2 <= 0 (only
    when squares underflowed). Python's division of integers rounds once,
    to nearest with ties to even, subnormals included."""
    if n == 0 or s.nan or s.positive_inf or s.negative_inf or q.nan or q.positive_inf or q.negative_inf:
        return math.nan
    numerator = n * q.units * _UNIT - s.units * s.units  # units of 2^-2148
    if q.units < 0 or numerator <= 0:
        return 0.0
    try:
        return numerator / (n * _UNIT * _UNIT)
    except OverflowError:
        return math.inf


def moments_bytes(a_sum: bytes, a_squares: bytes, b_sum: bytes, b_squares: bytes,
                  count: int) -> tuple[bytes, bytes, float, float]:
    """Two rows' variance states merged (rules::Merge for OP_VARIANCE where
    both keep their exact sums): the merged sums' bytes, then mean and m2."""
    s = merged(parse(a_sum), parse(b_sum))
    q = merged(parse(a_squares), parse(b_squares))
    return to_bytes(s), to_bytes(q), rounded(s) / float(count), second_moment(s, q, count)
