#!/usr/bin/env python3
"""Writes exact_moments.txt: cases for tests/unit/exact_sum_test.cc's
second moment (tally/rules/exact_moments.h), each a list of doubles and
M2 = sum((x - mean)^2), with mean the exact sum over the count, rounded
once to float64, computed here with Python's fractions. The lists of
exact_sums.txt whose values are finite and whose squares the rules hold
exactly (every |x| zero or within [2^-480, 2^510]), and cases of their
own: large offsets, cancellation, values that nearly agree. Deterministic.

One line per case: name, the expected M2, then the inputs, as float.hex().

usage: tests/unit/data/make_exact_moments.py > tests/unit/data/exact_moments.txt
"""
import math
import random
from fractions import Fraction

from make_exact_sums import cases, round_to


def exact_square(x):
    return x == 0 or math.ldexp(1, -480) < abs(x) < math.ldexp(1, 510)


def second_moment(values):
    n = len(values)
    mean = sum((Fraction(v) for v in values), Fraction(0)) / n
    return round_to(sum(((Fraction(v) - mean) ** 2 for v in values), Fraction(0)), 53, -1022, 1023)


def main():
    rng = random.Random(20261128)
    own = [
        ("offset_1e8", [1e8 + rng.random() for _ in range(100)]),
        ("offset_1e15", [1e15 + rng.randint(0, 7) * 0.125 for _ in range(100)]),
        ("nearly_equal", [1.0 + i * math.ldexp(1, -52) for i in range(50)]),
        ("one_value", [3.25]),
        ("all_equal", [0.1] * 33),
        ("two_scales", [1e10, 1e-10, -1e10, 3.0, 1e-5]),
        ("wide", [math.ldexp(rng.random(), rng.randint(-400, 400)) for _ in range(60)]),
        ("float32_offset", [float.fromhex((1e6 + rng.random()).hex()) for _ in range(100)]),
        ("integers", [float(rng.randint(-1000, 1000)) for _ in range(300)]),
    ]
    for name, values in cases() + own:
        if not values or not all(math.isfinite(v) and exact_square(v) for v in values):
            continue
        print(" ".join([name, second_moment(values).hex()] + [v.hex() for v in values]))


if __name__ == "__main__":
    main()
