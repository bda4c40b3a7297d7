// tally/rules/partial.h on hand-made states: the merge rules tally.proto
// writes down (empty states, numpy's NaN and first-occurrence rules, integer
// wraparound, Chan's moments) and the finish of each op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tally/rules/partial.h"

namespace tally::rules {
namespace {

OpSpec Spec(OpKind kind, double ddof = 0.0) { return OpSpec{.kind = kind, .ddof = ddof}; }

PartialState Arg(double value, std::int64_t index) {
  PartialState s;
  s.count = 3;
  s.float_extreme = value;
  s.index = index;
  return s;
}

TEST(PartialRules, ArgminKeepsTheFirstOccurrenceWhicheverSideComesFirst) {
  const OpSpec op = Spec(OpKind::kArgmin);
  const PartialState early = Arg(-1.0, 4), late = Arg(-1.0, 9), worse = Arg(2.0, 1);
  EXPECT_EQ(Merge(op, DType::kFloat64, early, late).index, 4);
  EXPECT_EQ(Merge(op, DType::kFloat64, late, early).index, 4);
  EXPECT_EQ(Merge(op, DType::kFloat64, worse, late).index, 9);
  EXPECT_EQ(Merge(op, DType::kFloat64, late, worse).count, 6u);
}

TEST(PartialRules, ANanWinsAndTheFirstNanAmongNans) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const OpSpec argmax = Spec(OpKind::kArgmax);
  EXPECT_EQ(Merge(argmax, DType::kFloat32, Arg(5.0, 0), Arg(nan, 7)).index, 7);
  EXPECT_EQ(Merge(argmax, DType::kFloat32, Arg(nan, 8), Arg(nan, 7)).index, 7);
  const OpSpec max = Spec(OpKind::kMax);
  EXPECT_TRUE(std::isnan(Merge(max, DType::kFloat64, Arg(nan, -1), Arg(9.0, -1)).float_extreme));
  EXPECT_TRUE(std::isnan(Merge(max, DType::kFloat64, Arg(9.0, -1), Arg(nan, -1)).float_extreme));
}

TEST(PartialRules, AnEmptyStateIsTheIdentity) {
  PartialState a;
  a.count = 2;
  a.int_extreme = -7;
  a.index = 5;
  for (OpKind kind : {OpKind::kMin, OpKind::kArgmin, OpKind::kSum, OpKind::kVariance}) {
    EXPECT_EQ(Merge(Spec(kind), DType::kInt32, a, PartialState{}), a);
    EXPECT_EQ(Merge(Spec(kind), DType::kInt32, PartialState{}, a), a);
  }
}

// A NaN-skipping op's state: its count is the non-NaN elements, its
// elements every one, added even when one side has no non-NaN element. An
// all-NaN row's nanmin is NaN, an empty row's has no value; nanargmin of
// either has none; on integers the ops are plain.
TEST(PartialRules, NanSkippingStatesCountEveryElementAndTellAllNanFromEmpty) {
  PartialState some = Arg(-2.0, 4);
  some.elements = 5;
  PartialState all_nan;
  all_nan.elements = 3;
  const OpSpec nanmin = Spec(OpKind::kNanMin);
  const PartialState merged = Merge(nanmin, DType::kFloat32, all_nan, some);
  EXPECT_EQ(merged.count, 3u);
  EXPECT_EQ(merged.elements, 8u);
  EXPECT_EQ(merged.float_extreme, -2.0);
  EXPECT_EQ(Merge(nanmin, DType::kFloat32, some, all_nan).elements, 8u);
  const PartialState nans_only = Merge(nanmin, DType::kFloat32, all_nan, all_nan);
  EXPECT_EQ(nans_only.count, 0u);
  EXPECT_EQ(nans_only.elements, 6u);
  EXPECT_TRUE(HasValue(OpKind::kNanMin, DType::kFloat32, nans_only));
  EXPECT_TRUE(std::isnan(FinishDouble(nanmin, DType::kFloat64, nans_only)));
  EXPECT_FALSE(HasValue(OpKind::kNanMin, DType::kFloat32, PartialState{}));
  EXPECT_FALSE(HasValue(OpKind::kNanArgmin, DType::kFloat32, nans_only));
  EXPECT_TRUE(HasValue(OpKind::kNanSum, DType::kFloat32, nans_only));
  EXPECT_FALSE(HasValue(OpKind::kMin, DType::kFloat32, PartialState{}));
  EXPECT_FALSE(HasValue(OpKind::kNanMin, DType::kInt32, PartialState{}));
  EXPECT_TRUE(HasValue(OpKind::kMin, DType::kInt32, some));
}

TEST(PartialRules, IntegerSumsWrapModulo2To64AndUnsignedExtremesCompareUnsigned) {
  PartialState a, b;
  a.count = b.count = 1;
  a.int_sum = std::numeric_limits<std::int64_t>::max();
  b.int_sum = 2;
  EXPECT_EQ(Merge(Spec(OpKind::kSum), DType::kInt64, a, b).int_sum, std::numeric_limits<std::int64_t>::min() + 1);
  a.uint_extreme = std::numeric_limits<std::uint64_t>::max();
  b.uint_extreme = 1;
  EXPECT_EQ(Merge(Spec(OpKind::kMax), DType::kUInt32, a, b).uint_extreme, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(Merge(Spec(OpKind::kMin), DType::kUInt32, a, b).uint_extreme, 1u);
}

TEST(PartialRules, MomentsMergeByChansRuleAndFinishLikeNumpy) {
  // {1, 2} and {3, 4, 5}: mean 3, M2 10, exactly in float64.
  PartialState a, b;
  a.count = 2, a.mean = 1.5, a.m2 = 0.5;
  b.count = 3, b.mean = 4.0, b.m2 = 2.0;
  const PartialState m = Merge(Spec(OpKind::kVariance), DType::kFloat64, a, b);
  EXPECT_EQ(m.count, 5u);
  EXPECT_EQ(m.mean, 3.0);
  EXPECT_EQ(m.m2, 10.0);
  EXPECT_EQ(FinishDouble(Spec(OpKind::kVariance, 1.0), DType::kFloat64, m), 2.5);
  EXPECT_EQ(FinishDouble(Spec(OpKind::kStddev), DType::kFloat64, m), std::sqrt(2.0));
  EXPECT_EQ(FinishDouble(Spec(OpKind::kVariance, 5.0), DType::kFloat64, m), std::numeric_limits<double>::infinity());
  // A mean state carries no M2, merged or not.
  EXPECT_EQ(Merge(Spec(OpKind::kMean), DType::kFloat64, a, b).m2, 0.0);
  EXPECT_EQ(FinishDouble(Spec(OpKind::kMean), DType::kFloat64, m), 3.0);
  EXPECT_TRUE(std::isnan(FinishDouble(Spec(OpKind::kMean), DType::kFloat64, PartialState{})));
  EXPECT_TRUE(std::isnan(FinishDouble(Spec(OpKind::kVariance), DType::kFloat64, PartialState{})));
}

TEST(PartialRules, HistogramsAddEveryCount) {
  PartialState a, b;
  a.count = 4, b.count = 5;
  a.histogram = {{1, 0, 2}, 1, 0, 0};
  b.histogram = {{0, 3, 1}, 0, 0, 1};
  OpSpec op = Spec(OpKind::kHistogram);
  op.histogram = {3, 0.0, 1.0};
  const PartialState m = Merge(op, DType::kUInt8, a, b);
  EXPECT_EQ(m.histogram, (HistogramCounts{{1, 3, 3}, 1, 0, 1}));
  EXPECT_EQ(m.count, 9u);
  EXPECT_EQ(FinishUInt64(Spec(OpKind::kCount), DType::kFloat64, m), 9u);
}


TEST(PartialRules, ProductsMultiplyAndIntegersWrapModulo2To64) {
  PartialState a, b;
  a.count = 2, b.count = 3;
  a.int_product = std::int64_t{1} << 40, b.int_product = -(std::int64_t{1} << 30);
  a.float_product = 1.5, b.float_product = -4.0;
  const PartialState m = Merge(Spec(OpKind::kProduct), DType::kInt64, a, b);
  EXPECT_EQ(m.count, 5u);
  EXPECT_EQ(m.int_product, 0);  // -2^70 wraps to 0, as numpy's int64 product
  EXPECT_EQ(FinishInt64(Spec(OpKind::kProduct), DType::kInt64, m), 0);
  EXPECT_EQ(FinishDouble(Spec(OpKind::kProduct), DType::kFloat64, Merge(Spec(OpKind::kProduct), DType::kFloat64, a, b)),
            -6.0);
  // The empty product is 1, whatever the fields hold.
  EXPECT_EQ(FinishInt64(Spec(OpKind::kProduct), DType::kInt32, PartialState{}), 1);
  EXPECT_EQ(FinishDouble(Spec(OpKind::kProduct), DType::kFloat32, PartialState{}), 1.0);
}

TEST(PartialRules, NonzeroCountsAddAndAnyAllReadThem) {
  PartialState a, b;
  a.count = 4, a.nonzero = 4;
  b.count = 3, b.nonzero = 0;
  for (const OpKind k : {OpKind::kCountNonzero, OpKind::kAny, OpKind::kAll}) {
    const PartialState m = Merge(Spec(k), DType::kFloat32, a, b);
    EXPECT_EQ(m.nonzero, 4u);
    EXPECT_EQ(m.count, 7u);
  }
  const PartialState m = Merge(Spec(OpKind::kAll), DType::kFloat32, a, b);
  EXPECT_EQ(FinishUInt64(Spec(OpKind::kCountNonzero), DType::kFloat32, m), 4u);
  EXPECT_EQ(FinishUInt64(Spec(OpKind::kAny), DType::kFloat32, m), 1u);
  EXPECT_EQ(FinishUInt64(Spec(OpKind::kAll), DType::kFloat32, m), 0u);
  EXPECT_EQ(FinishUInt64(Spec(OpKind::kAll), DType::kFloat32, a), 1u);
  EXPECT_EQ(FinishUInt64(Spec(OpKind::kAny), DType::kFloat32, b), 0u);
  EXPECT_EQ(FinishUInt64(Spec(OpKind::kAll), DType::kFloat32, PartialState{}), 1u);  // numpy.all([]) is True
}

PartialState MinMax(double min, double max) {
  PartialState s;
  s.count = 2;
  s.float_extreme = min, s.float_max = max;
  s.int_extreme = static_cast<std::int64_t>(min), s.int_max = static_cast<std::int64_t>(max);
  return s;
}

TEST(PartialRules, PtpMergesItsMinAndMaxAndSubtractsInTheDtype) {
  const OpSpec ptp = Spec(OpKind::kPtp);
  // int32: the difference wraps at 32 bits, as numpy.ptp of int32 does.
  const PartialState m = Merge(ptp, DType::kInt32, MinMax(-2147483648.0, 0.0), MinMax(5.0, 2147483647.0));
  EXPECT_EQ(m.int_extreme, -2147483648);
  EXPECT_EQ(m.int_max, 2147483647);
  EXPECT_EQ(FinishInt64(ptp, DType::kInt32, m), -1);
  EXPECT_EQ(FinishInt64(ptp, DType::kInt64, m), 4294967295);
  // float32 subtracts in float32: 3e38 - -3e38 overflows to inf.
  const PartialState f = Merge(ptp, DType::kFloat32, MinMax(-3e38, 1.0), MinMax(0.0, 3e38));
  EXPECT_EQ(FinishDouble(ptp, DType::kFloat32, f), std::numeric_limits<double>::infinity());
  EXPECT_EQ(FinishDouble(ptp, DType::kFloat64, f), 6e38);
  // float32: 1 - 2^-30 rounds to 1 in float32, where float64 keeps it.
  const PartialState g = MinMax(-std::ldexp(1.0, -30), 1.0);
  EXPECT_EQ(FinishDouble(ptp, DType::kFloat32, g), 1.0);
  EXPECT_EQ(FinishDouble(ptp, DType::kFloat64, g), 1.0 + std::ldexp(1.0, -30));
  // A NaN on either side wins, as numpy's min and max.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(FinishDouble(ptp, DType::kFloat32, Merge(ptp, DType::kFloat32, MinMax(0, 1), MinMax(nan, nan)))));
}

}  // namespace
}  // namespace tally::rules
