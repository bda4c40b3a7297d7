"""tally.partial's merges and finishes held to tally/rules/partial.h's,
bitwise: for every op whose partial state is PartialState's scalar fields
(every op with a partial state but histogram and the functions that keep
their own, as tally._ops lists them) and every dtype, random states (empty
ones, NaN, infinities, signed zeros, integers that wrap, ptp's extremes of
the dtype, float sums with and without their exact sum) merged and finished by the Python package and by the rules
themselves through the package's native module (tally._states:
merge_state, finish_state). Needs no server.

usage: partial_rules_test.py
(the package, built with its stubs and tally._states, on PYTHONPATH)
"""
import importlib.util
import os
import unittest
import zlib

import numpy as np

from tally import _arrays, _exact, _ops
from tally import partial as tp
from tally._groupby import take_states
from tally.v1 import tally_pb2 as pb

SEED = int(os.environ.get("TALLY_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
HAVE_NATIVE = importlib.util.find_spec("tally._states") is not None
ROWS = 120
# Every op with a partial state of scalar fields, from the package's own lists.
SCALAR_OPS = [k for k in _ops.OP_NAMES if k not in _ops.STATE_OPS and k not in ("histogram", "minmax")]
DDOF_OPS = ("variance", "stddev", "nanvar", "nanstd")
NAN_OPS = ("nansum", "nanmean", "nanmin", "nanmax", "nanargmin", "nanargmax", "nanvar", "nanstd", "nancount")
PLAIN = {"nansum": "sum", "nanmean": "mean", "nanmin": "min", "nanmax": "max", "nanargmin": "argmin",
         "nanargmax": "argmax", "nanvar": "variance", "nanstd": "stddev", "nancount": "count"}
FLOAT_FIELDS = ("float_sum", "sum_squares", "mean", "m2", "float_extreme", "float_product", "float_max")
I64_MIN, I64_MAX, U64_MAX = -2**63, 2**63 - 1, 2**64 - 1


def acc_prefix(dtype):
    """Where a dtype's sums, extremes and products lie: float_, int_ or uint_."""
    return "float_" if _arrays.is_float(dtype) else ("int_" if dtype.kind == "i" else "uint_")


def fields_of(p, r):
    """Row r of a Partial as tally.v1.PartialState's scalar fields (the
    inverse of Partial.from_proto)."""
    prefix = acc_prefix(p.dtype)
    value_field = prefix + ("sum" if PLAIN.get(p.op.kind, p.op.kind) == "sum" else "extreme")
    out = {name: 0 for name in ("count", "int_sum", "uint_sum", "int_extreme", "uint_extreme", "elements",
                                "int_product", "uint_product", "nonzero", "int_max", "uint_max")}
    out.update({name: 0.0 for name in FLOAT_FIELDS})
    out.update(count=int(p.count[r]), sum_squares=float(p.sum_squares[r]), mean=float(p.mean[r]),
               m2=float(p.m2[r]), index=int(p.index[r]), elements=int(p.elements[r]), nonzero=int(p.nonzero[r]))
    convert = float if prefix == "float_" else int
    out[value_field] = convert(p.value[r])
    out["exact_sum"] = bytes(p.exact_sum[r])
    out["exact_sum_squares"] = bytes(p.exact_sum_squares[r])
    out[prefix + "product"] = convert(p.product[r])
    out[prefix + "max"] = convert(p.max[r])
    return out


def partial_of(op, dtype, rows):
    """A Partial of rows of fields, through the wire (Partial.from_proto)."""
    states = [pb.PartialState(**{k: v for k, v in row.items()}) for row in rows]
    result = pb.AggregationResult(partials=pb.PartialStates(version=tp.STATE_VERSION,
                                                            dtype=_arrays.wire_dtype(dtype), states=states))
    return tp.Partial.from_proto(op, result, True)


def bits(x):
    """A float's bits; every NaN alike (finishing sends one canonical NaN,
    and which NaN a product of NaNs keeps is the hardware's choice)."""
    return "nan" if x != x else int(np.float64(x).view(np.uint64))


class StateMaker:
    """Random states of one op over one dtype: the fields the op uses, by
    the dtype's accumulator, the others 0 (as servers send them)."""

    def __init__(self, rng, op, dtype):
        self.rng, self.op, self.dtype = rng, op, dtype
        self.kind = PLAIN.get(op.kind, op.kind)
        self.prefix = acc_prefix(dtype)

    def floats(self, n, in_dtype):
        """float64 values: special ones, values of every magnitude, and
        (``in_dtype``) values the dtype holds, as element extremes are."""
        rng = self.rng
        finfo = np.finfo(np.float32 if self.dtype.name == "bfloat16" else
                         self.dtype if self.dtype.kind == "f" else np.float64)
        special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, float(finfo.max), -float(finfo.max),
                            float(finfo.tiny), 5e-324, 1.7976931348623157e308, 3.0, 0.5, -2.5])
        wide = rng.normal(size=n) * 10.0 ** rng.uniform(-300, 300, size=n)
        small = rng.integers(-5, 6, size=n).astype(np.float64)
        scaled = rng.normal(size=n) * 10.0 ** rng.uniform(-10, 10, size=n)
        pick = rng.integers(0, 4, size=n)
        out = np.where(pick == 0, special[rng.integers(0, len(special), size=n)],
                       np.where(pick == 1, wide, np.where(pick == 2, small, scaled)))
        if in_dtype and _arrays.is_float(self.dtype) and self.dtype != np.float64:
            with np.errstate(all="ignore"):
                held = out.astype(self.dtype).astype(np.float64)
            # Mostly values of the dtype; now and then any float64 (the rules round them).
            out = np.where(rng.random(n) < 0.85, held, out)
        return out

    def ints(self, n, in_dtype, signed):
        """int64 or uint64 values (as Python ints): the ends of the range,
        values that wrap when added or multiplied, and (``in_dtype``) values
        of the dtype's width."""
        rng = self.rng
        if in_dtype:
            info = np.iinfo(np.uint8 if self.dtype == np.bool_ else self.dtype)
            lo, hi = int(info.min), int(info.max)
            if self.dtype == np.bool_:
                lo, hi = 0, 1
        else:
            lo, hi = (I64_MIN, I64_MAX) if signed else (0, U64_MAX)
        special = [lo, hi, 0, 1, hi - 1, lo + 1, (lo + hi) // 2, 2**31 - 1, -2**31, 2**32 + 1, 3, -3, 2**62 + 7]
        special = [v for v in special if lo <= v <= hi]
        out = []
        for _ in range(n):
            c = rng.integers(0, 4)
            if c == 0:
                out.append(special[rng.integers(0, len(special))])
            elif c == 1:
                out.append(int(rng.integers(-5, 6)) % (hi + 1) if lo == 0 else int(rng.integers(-5, 6)))
            elif c == 2 and in_dtype and rng.random() < 0.15:
                # Beyond the width now and then: the rules cast to it, so must Python.
                out.append(int(rng.integers(I64_MIN, I64_MAX, dtype=np.int64, endpoint=True)) if signed
                           else int(rng.integers(0, U64_MAX, dtype=np.uint64, endpoint=True)))
            else:
                out.append(int(rng.integers(lo, hi, endpoint=True, dtype=np.int64 if signed else np.uint64)))
        return out

    def values(self, n, in_dtype):
        if self.prefix == "float_":
            return [float(v) for v in self.floats(n, in_dtype)]
        return self.ints(n, in_dtype, self.prefix == "int_")

    def exact_of(self, values, count):
        """An exact sum of ``values`` that says it covers ``count`` elements."""
        exact = _exact.ExactSum()
        for v in values:
            exact = _exact.merged(exact, _exact.of_double(float(v)))
        exact.count = count
        return exact

    def rows(self, n, like=None):
        """n states, one per row; ``like`` (another side's rows): many of
        these then tie with its values, for argmin's and argmax's rules."""
        rng, kind, prefix = self.rng, self.kind, self.prefix
        counts = np.where(rng.random(n) < 0.2, 0,
                          np.where(rng.random(n) < 0.5, rng.integers(1, 12, size=n),
                                   rng.integers(1, 2**50, size=n)))
        rows = [{"count": int(c), "index": -1} for c in counts]  # index -1 but for argmin's, as servers send
        if self.op.kind in NAN_OPS:  # every element, NaN or not
            for row in rows:
                row["elements"] = row["count"] + int(rng.choice([0, 0, 1, 7, 2**40]))

        def put(name, values):
            for row, v in zip(rows, values):
                row[name] = v

        if kind == "sum":
            put(prefix + "sum", self.values(n, False))
            if prefix == "float_":  # half the rows keep their exact sum, as the cpu backend's do
                for row in rows:
                    if row["count"] and rng.random() < 0.5:
                        exact = _exact.ExactSum()
                        for v in self.floats(int(rng.integers(1, 5)), False):
                            exact = _exact.merged(exact, _exact.of_double(float(v)))
                        exact.count = row["count"]
                        row["exact_sum"], row["float_sum"] = _exact.to_bytes(exact), _exact.rounded(exact)
        elif kind == "sum_squares":
            put("sum_squares", [abs(v) if v == v else v for v in self.floats(n, False)])
            if prefix == "float_":  # half the rows keep their exact sum of squares, as the cpu backend's do
                for row in rows:
                    if row["count"] and rng.random() < 0.5:
                        squares = self.exact_of(np.abs(self.floats(int(rng.integers(1, 5)), False)), row["count"])
                        row["exact_sum_squares"], row["sum_squares"] = _exact.to_bytes(squares), _exact.rounded(squares)
        elif kind in ("mean", "variance", "stddev"):
            put("mean", [float(v) for v in self.floats(n, False)])
            if kind == "mean" and prefix == "float_":  # most rows keep their exact sum, as the cpu backend's do
                for row in rows:
                    if row["count"] and rng.random() < 0.8:
                        exact = _exact.ExactSum()
                        for v in self.floats(int(rng.integers(1, 5)), False):
                            exact = _exact.merged(exact, _exact.of_double(float(v)))
                        exact.count = row["count"]
                        row["exact_sum"] = _exact.to_bytes(exact)
                        row["mean"] = _exact.rounded(exact) / row["count"]
            if kind != "mean":
                m2 = np.abs(self.floats(n, False))
                put("m2", [float(v) for v in np.where(rng.random(n) < 0.1, 0.0, m2)])
                if prefix == "float_":  # most rows keep both exact sums, as the cpu backend's do
                    for row in rows:
                        if row["count"] and rng.random() < 0.8:
                            # Any two exact sums are a state; where n Q < S^2 (not from
                            # real elements) m2 is 0, a rule of its own.
                            total = self.exact_of(self.floats(int(rng.integers(1, 5)), False), row["count"])
                            squares = self.exact_of(np.abs(self.floats(int(rng.integers(1, 5)), False)),
                                                    row["count"])
                            row["exact_sum"], row["exact_sum_squares"] = _exact.to_bytes(total), _exact.to_bytes(squares)
                            row["mean"] = _exact.rounded(total) / row["count"]
                            row["m2"] = _exact.second_moment(total, squares, row["count"])
        elif kind in ("min", "max", "argmin", "argmax", "ptp"):
            put(prefix + "extreme", self.values(n, True))
            if kind in ("argmin", "argmax"):
                put("index", [int(v) for v in rng.integers(0, 2**40, size=n)])
            if kind == "ptp":
                highs = self.values(n, True)
                # Mostly max >= min, as states of elements are; the ends of the dtype's range often.
                for row, h in zip(rows, highs):
                    lo = row[prefix + "extreme"]
                    row[prefix + "max"] = h if rng.random() < 0.2 or not (h == h and lo == lo) else \
                        (lo if h < lo else h)
            if like is not None:  # ties with the other side
                for row, other in zip(rows, like):
                    if rng.random() < 0.3 and other["count"] > 0:
                        row[prefix + "extreme"] = other[prefix + "extreme"]
                        if kind == "ptp":
                            row[prefix + "max"] = other[prefix + "max"]
        elif kind == "prod":
            put(prefix + "product", self.values(n, False))
        elif kind in ("count_nonzero", "any", "all"):
            put("nonzero", [int(rng.choice([0, c, rng.integers(0, c + 1)])) for c in counts])
        for row in rows:
            if row["count"] == 0:
                row["index"] = -1  # an empty state's index, as servers send it
        return rows


@unittest.skipUnless(HAVE_NATIVE, "tally._states was not built (pybind11 missing)")
class PartialRules(unittest.TestCase):
    def setUp(self):
        from tally import _states
        self.native = _states
        self.rng = np.random.default_rng([SEED, zlib.crc32(self.id().encode())])

    def test_a_pages_partial_states_are_handed_on_as_they_arrived(self):
        """A GroupBy page's results' PartialStates found in the page's bytes
        (tally._groupby._Page): the bytes protobuf would serialize, None
        for a result of values, read by the native module as protobuf reads
        them."""
        from tally._groupby import _Page
        states = [pb.PartialState(count=r + 1, float_sum=0.5 * r, index=-r, exact_sum=bytes([r % 7]) * (r % 3))
                  for r in range(100)]
        partials = pb.PartialStates(version=tp.STATE_VERSION, dtype=pb.DTYPE_FLOAT64, states=states)
        page = pb.GroupByResponse(groups=100, results=[
            pb.AggregationResult(partials=partials),
            pb.AggregationResult(doubles=pb.DoubleValues(values=[1.0, 2.0])),
            pb.AggregationResult(aggregation=pb.Aggregation(op=pb.OP_SUM), partials=partials)])
        got = _Page(page.SerializeToString())
        self.assertEqual(got.groups, 100)
        self.assertEqual(got.partial_states(0), partials.SerializeToString())
        self.assertIsNone(got.partial_states(1))
        self.assertEqual(got.partial_states(2), partials.SerializeToString())
        self.assertIsNone(got.partial_states(3))
        columns = self.native.partial_columns(got.partial_states(2))
        np.testing.assert_array_equal(columns["count"], [s.count for s in states])
        np.testing.assert_array_equal(columns["index"], [s.index for s in states])
        np.testing.assert_array_equal(columns["float_sum"], [s.float_sum for s in states])
        self.assertEqual(columns["exact_sum"], [s.exact_sum for s in states])
        with_histogram = pb.PartialStates(states=[pb.PartialState(histogram=pb.Histogram(counts=[1]))])
        self.assertIsNone(self.native.partial_columns(with_histogram.SerializeToString()))
        with self.assertRaises(ValueError):
            self.native.partial_columns(partials.SerializeToString()[:-3])

    def test_the_package_lists_the_rules_ops(self):
        """The ops this test checks are those the rules give states of scalar fields."""
        self.assertEqual(sorted(SCALAR_OPS), sorted(self.native.scalar_state_ops()))
        self.assertIn("ptp", SCALAR_OPS)

    def op(self, kind):
        ddof = float(self.rng.choice([0.0, 1.0, 2.5, 11.0])) if kind in DDOF_OPS else 0.0
        return _ops.Op(kind, ddof=ddof)

    def check_fields(self, got, want, label):
        for name, w in want.items():
            g = got[name]
            if name in FLOAT_FIELDS:
                self.assertEqual(bits(g), bits(w), f"{label}: {name} {g!r}, the rules' {w!r}")
            else:
                self.assertEqual(g, w, f"{label}: {name}")

    def check_finish(self, p, rows, op, label):
        """Python's finish_raw of every row against the rules' finish."""
        number, dtype_number = getattr(pb, "OP_" + op.kind.upper()), _arrays.wire_dtype(p.dtype)
        wants = [self.native.finish_state(number, op.ddof, dtype_number, row) for row in rows]
        has = np.array([w is not None for w in wants])
        for r in np.flatnonzero(~has)[:20]:
            with self.assertRaises(ValueError, msg=f"{label}: row {r} has no value"):
                tp.finish_raw(take_states(p, np.array([r])))
        at = np.flatnonzero(has)
        if not len(at):
            return
        got = tp.finish_raw(take_states(p, at))
        field = {np.dtype(np.float64): "doubles", np.dtype(np.int64): "int64s", np.dtype(np.uint64): "uint64s"}
        for g, r in zip(got, at):
            kind, w = wants[r]
            self.assertEqual(field[got.dtype], kind, f"{label}: the result field")
            if kind == "doubles":
                self.assertEqual(bits(float(g)), bits(w), f"{label}: row {r} finished {g!r}, the rules' {w!r} "
                                                          f"from {rows[r]}")
            else:
                self.assertEqual(int(g), w, f"{label}: row {r} from {rows[r]}")

    def test_merge_and_finish_match_the_rules(self):
        # States read and exact sums merged by the native module's one call
        # over the rows (from tally.partial's _NATIVE_STATE_ROWS and
        # _NATIVE_EXACT_ROWS rows on), and by the package's Python steps:
        # both held to the rules.
        for native_from in (1, 10**9):
            with self.subTest(native=native_from == 1):
                for name in ("_NATIVE_STATE_ROWS", "_NATIVE_EXACT_ROWS"):
                    self.addCleanup(setattr, tp, name, getattr(tp, name))
                    setattr(tp, name, native_from)
                self.merge_and_finish_match_the_rules()

    def merge_and_finish_match_the_rules(self):
        for kind in SCALAR_OPS:
            for dtype in _arrays.SUPPORTED:
                op = self.op(kind)
                label = f"{op} over {dtype.name}, seed {SEED}"
                maker = StateMaker(self.rng, op, dtype)
                number, dtype_number = getattr(pb, "OP_" + op.kind.upper()), _arrays.wire_dtype(dtype)
                a_rows = maker.rows(ROWS)
                merged_rows, merged = a_rows, partial_of(op, dtype, a_rows)
                for r, row in enumerate(a_rows):  # from_proto reads every field
                    self.check_fields(fields_of(merged, r), {**fields_of(merged, r), **row}, label + " (read)")
                self.check_finish(merged, merged_rows, op, label + " (one part)")
                for step in range(2):  # ((a + b) + c): merged states merge on
                    b_rows = maker.rows(ROWS, like=merged_rows)
                    b = partial_of(op, dtype, b_rows)
                    want = [self.native.merge_state(number, op.ddof, dtype_number, x, y)
                            for x, y in zip(merged_rows, b_rows)]
                    merged = tp.merge(merged, b)
                    for r in range(ROWS):
                        self.check_fields(fields_of(merged, r), want[r], f"{label}, merge {step}, row {r} of "
                                          f"{merged_rows[r]} and {b_rows[r]}")
                    merged_rows = want
                    self.check_finish(merged, merged_rows, op, f"{label}, merge {step}")

    def test_ptp_is_taken_in_the_dtype(self):
        """ptp's finish against numpy.ptp of arrays whose min and max the
        state holds, and the cases the rules name."""
        for dtype in _arrays.SUPPORTED:
            if dtype == np.bool_:
                continue  # numpy.ptp refuses bool (boolean subtract); so does the server
            op = _ops.Op("ptp")
            for _ in range(50):
                if _arrays.is_float(dtype):
                    big = float(np.finfo(np.float32 if dtype.name == "bfloat16" else dtype).max)
                    x = (self.rng.normal(size=5) * 10.0 ** self.rng.uniform(-3, 3)).astype(dtype)
                    if self.rng.random() < 0.3:
                        x[:2] = np.array([-big, big]).astype(dtype)  # overflows to inf in the dtype
                    lo, hi = float(x.astype(np.float64).min()), float(x.astype(np.float64).max())
                else:
                    info = np.iinfo(np.uint8 if dtype == np.bool_ else dtype)
                    x = self.rng.integers(info.min, info.max, size=5, endpoint=True, dtype=dtype)
                    if self.rng.random() < 0.3:
                        x[:2] = [info.min, info.max]
                    lo, hi = int(x.min()), int(x.max())
                p = partial_of(op, dtype, [{"count": 5, acc_prefix(dtype) + "extreme": lo,
                                            acc_prefix(dtype) + "max": hi}])
                with np.errstate(over="ignore"):
                    want = np.ptp(x)
                got = tp.finish(p)
                self.assertEqual(got.dtype, dtype)
                self.assertEqual(got.tobytes(), np.asarray(want, dtype=dtype).tobytes(), f"ptp of {x!r}")
        int32 = partial_of(_ops.Op("ptp"), np.dtype(np.int32),
                           [{"count": 2, "int_extreme": -2**31, "int_max": 2**31 - 1}])
        self.assertEqual(tp.finish(int32), np.int32(-1))
        f32 = partial_of(_ops.Op("ptp"), np.dtype(np.float32),
                         [{"count": 2, "float_extreme": -3e38, "float_max": 3e38}])
        self.assertEqual(tp.finish(f32), np.float32(np.inf))
        with self.assertRaises(ValueError):
            tp.finish(tp.empty(_ops.Op("ptp"), np.int32))

    def test_float_ptp_rounds_as_the_rules(self):
        """ptp's difference in each float dtype from any float64 extremes,
        bfloat16 too (through the wire number: no ml_dtypes needed), with
        values a float64 -> float32 -> bfloat16 double rounding gets wrong
        (1 + 2^-8 + 2^-30 rounds to 1 + 2^-7 once, to 1 through float32)."""
        n = 4000
        maker = StateMaker(self.rng, _ops.Op("ptp"), np.dtype(np.float64))
        scale = 2.0 ** self.rng.integers(-140, 128, size=n).astype(np.float64)
        sign = self.rng.choice([-1.0, 1.0], size=n)
        ties = sign * scale * (1 + 2.0**-8 + self.rng.integers(-3, 4, size=n) * 2.0**-30)
        for name in ("float64", "float32", "float16", "bfloat16"):
            number = getattr(pb, "DTYPE_" + name.upper())
            lo = np.where(self.rng.random(n) < 0.3, ties, maker.floats(n, False))
            hi = np.where(self.rng.random(n) < 0.3, -ties, maker.floats(n, False))
            got = tp.float_ptp(name, lo, hi)
            for r in range(n):
                field, want = self.native.finish_state(pb.OP_PTP, 0.0, number,
                                                       {"count": 1, "float_extreme": lo[r], "float_max": hi[r]})
                self.assertEqual(bits(got[r]), bits(want), f"{name} ptp of min {lo[r]!r}, max {hi[r]!r}: {got[r]!r}, "
                                                           f"the rules' {want!r} (seed {SEED})")

    def test_empty_states_finish_as_numpy(self):
        """The identities numpy answers for no elements."""
        for dtype in _arrays.SUPPORTED:
            self.assertEqual(tp.finish(tp.empty(_ops.Op("prod"), dtype)), 1)
            self.assertIs(tp.finish(tp.empty(_ops.Op("any"), dtype)), np.False_)
            self.assertIs(tp.finish(tp.empty(_ops.Op("all"), dtype)), np.True_)
            self.assertEqual(tp.finish(tp.empty(_ops.Op("count_nonzero"), dtype)), 0)


if __name__ == "__main__":
    print(f"TALLY_TEST_SEED={SEED}", flush=True)
    unittest.main()
