#!/usr/bin/env python3
"""Writes exact_sums.txt: cases for tests/unit/exact_sum_test.cc, each a list
of doubles and its exact sum rounded once to float64, float32, float16 and
bfloat16, computed here with Python's fractions (and math.fsum, which must
agree for float64). Deterministic: run it again and the file is the same.

One line per case: name, the four expected values, then the inputs, all as
float.hex(). A zero sum is -0.0 when every element is -0.0 (IEEE's and
numpy's rule; math.fsum answers 0.0 there).

usage: tests/unit/data/make_exact_sums.py > tests/unit/data/exact_sums.txt
"""
import math
import random
import struct
from fractions import Fraction

FORMATS = [(53, -1022, 1023), (24, -126, 127), (11, -14, 15), (8, -126, 127)]
INF = float("inf")


def round_to(value, precision, min_exponent, max_exponent):
    """value (a Fraction) rounded to nearest, ties to even, in the format."""
    if value == 0:
        return 0.0
    negative = value < 0
    a = -value if negative else value
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    ulp = max(e, min_exponent) - (precision - 1)
    scaled = a / Fraction(2) ** ulp
    n = scaled.numerator // scaled.denominator
    rest = scaled - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    if n != 0 and n.bit_length() - 1 + ulp > max_exponent:
        return -INF if negative else INF
    v = math.ldexp(n, ulp)
    return -v if negative else v


def expected(values):
    nan = any(math.isnan(v) for v in values)
    pos = any(v == INF for v in values)
    neg = any(v == -INF for v in values)
    if nan or (pos and neg):
        return [float("nan")] * 4
    if pos or neg:
        return [INF if pos else -INF] * 4
    total = sum((Fraction(v) for v in values), Fraction(0))
    if total == 0:
        zero = -0.0 if values and all(v == 0 and math.copysign(1, v) < 0 for v in values) else 0.0
        return [zero] * 4
    out = [round_to(total, *f) for f in FORMATS]
    try:
        assert math.fsum(values) == out[0], (values, out[0])
    except OverflowError:  # fsum refuses an intermediate overflow; the exact sum is above
        pass
    return out


def as_float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def cases():
    """Every case, (name, values), in the file's order."""
    rng = random.Random(20261127)
    tiny = math.ldexp(1, -1074)
    big = 1.7976931348623157e308
    cases = [
        ("empty", []),
        ("negative_zero", [-0.0]),
        ("negative_zeros", [-0.0, -0.0, -0.0]),
        ("mixed_zeros", [-0.0, 0.0, -0.0]),
        ("cancel_to_zero", [1.0, -1.0]),
        ("cancel_1e16", [1e16, 1.0, -1e16]),
        ("cancel_1e100", [1e100, 1.0, -1e100, 1e-100]),
        ("subnormals", [tiny] * 5),
        ("subnormal_cancel", [math.ldexp(1, -1022), -tiny, tiny * 3]),
        ("tie_even_down", [1.0, math.ldexp(1, -53)]),
        ("tie_broken_up", [1.0, math.ldexp(1, -53), tiny]),
        ("tie_even_up", [1.0 + math.ldexp(1, -52), math.ldexp(1, -53)]),
        ("overflow", [big, big]),
        ("overflow_tie", [big, math.ldexp(1, 970)]),
        ("below_overflow_tie", [big, math.ldexp(1, 970), -tiny]),
        ("intermediate_overflow", [1e308, 1e308, -1e308]),
        ("negative_overflow", [-big, -big, 1.0]),
        ("inf", [1.0, INF, 2.0]),
        ("minus_inf", [-INF, 1.0, -INF]),
        ("both_inf", [INF, -INF]),
        ("nan", [1.0, float("nan"), 3.0]),
        ("float32_max_tie", [3.4028234663852886e38, math.ldexp(1, 103)]),
        ("float16_max", [65504.0, 16.0]),
        ("float16_subnormal", [math.ldexp(1, -24), math.ldexp(1, -26)]),
        ("alternating", [(-1) ** i * (1 + i * math.ldexp(1, -40)) for i in range(200)]),
        ("range_of_float64", [math.ldexp(rng.choice([-1, 1]) * rng.random(), rng.randint(-1074, 1000))
                              for _ in range(150)]),
    ]
    for n in (1, 2, 3, 17, 200):
        cases.append((f"uniform_{n}", [rng.random() for _ in range(n)]))
    cases.append(("uniform_float32", [as_float32(rng.random()) for _ in range(200)]))
    cases.append(("normal", [rng.gauss(0, 1) for _ in range(200)]))
    cases.append(("normal_float32", [as_float32(rng.gauss(0, 1)) for _ in range(200)]))
    cases.append(("lognormal_wide", [rng.lognormvariate(0, 30) * rng.choice([-1, 1]) for _ in range(200)]))
    pairs = [rng.lognormvariate(0, 20) for _ in range(100)]
    cancel = pairs + [-p for p in pairs] + [rng.random() * 1e-30 for _ in range(10)]
    rng.shuffle(cancel)
    cases.append(("cancelling_pairs", cancel))
    half = [math.ldexp(rng.randint(-2047, 2047), rng.randint(-35, 5)) for _ in range(200)]
    cases.append(("float16_values", half))
    bf16 = [math.ldexp(rng.randint(-255, 255), rng.randint(-140, 120)) for _ in range(200)]
    cases.append(("bfloat16_values", bf16))
    cases.append(("ill_conditioned", [1e16] + [0.5] * 64 + [-1e16] + [math.ldexp(1, -60)] * 3))
    return cases


def main():
    for name, values in cases():
        print(" ".join([name] + [v.hex() for v in expected(values)] + [v.hex() for v in values]))


if __name__ == "__main__":
    main()
