// The host reference behind `tally bench --verify` follows numpy's rules:
// checked here on small arrays whose answers numpy gives.
#include "tally/client/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tally/client/aggregations.h"
#include "tally/client/random_data.h"

namespace tally::client {
namespace {

template <typename T>
ArrayRef Ref(const std::vector<T>& v, rules::DType dtype, std::uint64_t row_length = 0) {
  return ArrayRef{dtype, reinterpret_cast<const std::byte*>(v.data()), v.size(), row_length};
}

v1::AggregateResponse Compute(const ArrayRef& a, const char* ops) {
  absl::StatusOr<v1::AggregateResponse> r = ComputeReference(a, *ParseAggregations(ops));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : v1::AggregateResponse();
}

// Functions that keep their own state answer through their steps, per row
// and under masks (numpy: median([3, 1, 4, 1, 5]) = 3; the rows' modes 1
// and 9; the two largest 5 and 4 at 4 and 2).
TEST(Reference, FunctionsWithStatesAnswerPerRow) {
  const std::vector<double> x = {3, 1, 4, 1, 5, 9, 2, 6, 9, 3};
  const v1::AggregateResponse whole = Compute(Ref(std::vector<double>(x.begin(), x.begin() + 5), rules::DType::kFloat64),
                                              "median,topk:2,count_distinct");
  EXPECT_EQ(whole.results(0).doubles().values(0), 3.0);
  ASSERT_EQ(whole.results(1).doubles().values_size(), 2);
  EXPECT_EQ(whole.results(1).doubles().values(0), 5.0);
  EXPECT_EQ(whole.results(1).doubles().values(1), 4.0);
  EXPECT_EQ(whole.results(2).uint64s().values(0), 4u);
  const v1::AggregateResponse rows = Compute(Ref(x, rules::DType::kFloat64, 5), "mode");
  ASSERT_EQ(rows.results(0).doubles().values_size(), 2);
  EXPECT_EQ(rows.results(0).doubles().values(0), 1.0);
  EXPECT_EQ(rows.results(0).doubles().values(1), 9.0);
  // Masked: only 4, 5 and 2 valid (bits 2, 4, 6) -> median 4.
  const std::vector<std::uint8_t> mask = {0b01010100, 0};
  ArrayRef masked = Ref(x, rules::DType::kFloat64);
  masked.validity = mask;
  EXPECT_EQ(Compute(masked, "median").results(0).doubles().values(0), 4.0);
}

TEST(Reference, Float64Basics) {
  const std::vector<double> x = {3, 1, 4, 1, 5};
  const v1::AggregateResponse r =
      Compute(Ref(x, rules::DType::kFloat64), "sum,min,max,mean,count,sumsq,var,var:1,std:1,argmin,argmax");
  EXPECT_EQ(r.results(0).doubles().values(0), 14.0);
  EXPECT_EQ(r.results(1).doubles().values(0), 1.0);
  EXPECT_EQ(r.results(2).doubles().values(0), 5.0);
  EXPECT_DOUBLE_EQ(r.results(3).doubles().values(0), 2.8);
  EXPECT_EQ(r.results(4).uint64s().values(0), 5u);
  EXPECT_EQ(r.results(5).doubles().values(0), 52.0);
  EXPECT_DOUBLE_EQ(r.results(6).doubles().values(0), 2.56);
  EXPECT_DOUBLE_EQ(r.results(7).doubles().values(0), 3.2);
  EXPECT_DOUBLE_EQ(r.results(8).doubles().values(0), std::sqrt(3.2));
  EXPECT_EQ(r.results(9).int64s().values(0), 1);   // first of the tied minima
  EXPECT_EQ(r.results(10).int64s().values(0), 4);
  EXPECT_EQ(r.execution().elements(), 5u);
  EXPECT_EQ(r.execution().rows(), 1u);
}

TEST(Reference, NanWinsMinMaxAndArgs) {
  const std::vector<float> x = {1, 2, std::nanf(""), -3, std::nanf("")};
  const v1::AggregateResponse r = Compute(Ref(x, rules::DType::kFloat32), "sum,min,max,argmin,argmax,mean");
  for (int i : {0, 1, 2, 5}) EXPECT_TRUE(std::isnan(r.results(i).doubles().values(0))) << i;
  EXPECT_EQ(r.results(3).int64s().values(0), 2);  // the first NaN
  EXPECT_EQ(r.results(4).int64s().values(0), 2);
}

template <typename Repeated>
auto Values(const Repeated& r) {
  return std::vector<typename Repeated::value_type>(r.begin(), r.end());
}

TEST(Reference, SegmentedIntegers) {
  const std::vector<std::int32_t> x = {1, -2, 3, 4, 5, -6};
  const v1::AggregateResponse r = Compute(Ref(x, rules::DType::kInt32, 3), "sum,min,argmax,count,mean");
  EXPECT_EQ(Values(r.results(0).int64s().values()), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(Values(r.results(1).int64s().values()), (std::vector<std::int64_t>{-2, -6}));
  EXPECT_EQ(Values(r.results(2).int64s().values()), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(Values(r.results(3).uint64s().values()), (std::vector<std::uint64_t>{3, 3}));
  EXPECT_EQ(Values(r.results(4).doubles().values()), (std::vector<double>{2.0 / 3.0, 1.0}));
  EXPECT_EQ(r.execution().rows(), 2u);
}

TEST(Reference, IntegerAccumulatorsAndWrapping) {
  const std::vector<std::uint8_t> u8 = {255, 255, 1};
  const v1::AggregateResponse a = Compute(Ref(u8, rules::DType::kUInt8), "sum,max");
  EXPECT_EQ(a.results(0).uint64s().values(0), 511u);  // uint64 accumulator, no uint8 overflow
  EXPECT_EQ(a.results(1).uint64s().values(0), 255u);
  const std::vector<std::int64_t> i64 = {std::numeric_limits<std::int64_t>::max(), 1};
  const v1::AggregateResponse b = Compute(Ref(i64, rules::DType::kInt64), "sum");
  EXPECT_EQ(b.results(0).int64s().values(0), std::numeric_limits<std::int64_t>::min());
}

TEST(Reference, HistogramLikeNumpy) {
  // numpy.histogram([0, .5, 1, 1.5, -1, nan], bins=2, range=(0, 1)) -> [1, 2]:
  // the last bin is closed, so 1 is in it.
  const std::vector<double> x = {0, 0.5, 1, 1.5, -1, std::nan("")};
  const v1::AggregateResponse r = Compute(Ref(x, rules::DType::kFloat64), "hist:2:0:1");
  const v1::Histogram& h = r.results(0).histograms().histograms(0);
  EXPECT_EQ(Values(h.counts()), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(h.below(), 1u);
  EXPECT_EQ(h.above(), 1u);
  EXPECT_EQ(h.nan(), 1u);
}

TEST(Reference, VarianceWithTooFewDegreesOfFreedom) {
  const std::vector<double> spread = {1, 2}, flat = {1, 1};
  EXPECT_TRUE(std::isinf(Compute(Ref(spread, rules::DType::kFloat64), "var:2").results(0).doubles().values(0)));
  EXPECT_TRUE(std::isnan(Compute(Ref(flat, rules::DType::kFloat64), "var:2").results(0).doubles().values(0)));
}

TEST(Reference, EmptyInputs) {
  const std::vector<float> none;
  const v1::AggregateResponse r = Compute(Ref(none, rules::DType::kFloat32), "sum,count,mean");
  EXPECT_EQ(r.results(0).doubles().values(0), 0.0);
  EXPECT_EQ(r.results(1).uint64s().values(0), 0u);
  EXPECT_TRUE(std::isnan(r.results(2).doubles().values(0)));
  const absl::StatusOr<v1::AggregateResponse> min =
      ComputeReference(Ref(none, rules::DType::kFloat32), *ParseAggregations("min"));
  EXPECT_EQ(min.status().code(), absl::StatusCode::kInvalidArgument);
  // An empty batch of rows: zero values, but the value kind is still set.
  const v1::AggregateResponse batch = Compute(Ref(none, rules::DType::kFloat32, 4), "sum,argmin");
  EXPECT_EQ(batch.results(0).values_case(), v1::AggregationResult::kDoubles);
  EXPECT_EQ(batch.results(0).doubles().values_size(), 0);
  EXPECT_EQ(batch.results(1).values_case(), v1::AggregationResult::kInt64S);
  EXPECT_EQ(batch.execution().rows(), 0u);
}

TEST(Reference, RejectsRowLengthThatDoesNotDivide) {
  const std::vector<float> x(10, 1.0f);
  const absl::StatusOr<v1::AggregateResponse> r =
      ComputeReference(Ref(x, rules::DType::kFloat32, 3), *ParseAggregations("sum"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// Offsets as numpy.add.reduceat would cut them (with empty segments kept
// empty): [1, -2 | | 3, 4, 5 | -6].
TEST(Reference, VariableLengthSegments) {
  const std::vector<std::int32_t> x = {1, -2, 3, 4, 5, -6};
  const std::vector<std::int64_t> offsets = {0, 2, 2, 5, 6};
  ArrayRef a = Ref(x, rules::DType::kInt32);
  a.offsets = offsets;
  const v1::AggregateResponse r = Compute(a, "sum,count,mean");
  EXPECT_EQ(Values(r.results(0).int64s().values()), (std::vector<std::int64_t>{-1, 0, 12, -6}));
  EXPECT_EQ(Values(r.results(1).uint64s().values()), (std::vector<std::uint64_t>{2, 0, 3, 1}));
  EXPECT_TRUE(std::isnan(r.results(2).doubles().values(1)));  // an empty segment's mean
  EXPECT_EQ(r.execution().rows(), 4u);
  // argmax answers the position inside the segment; min of the empty one
  // is refused naming it.
  const std::vector<std::int64_t> no_empty = {0, 2, 5, 6};
  ArrayRef b = a;
  b.offsets = no_empty;
  EXPECT_EQ(Values(Compute(b, "argmax").results(0).int64s().values()), (std::vector<std::int64_t>{0, 2, 0}));
  const absl::StatusOr<v1::AggregateResponse> min = ComputeReference(a, *ParseAggregations("min"));
  EXPECT_EQ(min.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(min.status().message().find("segment 1"), std::string::npos) << min.status();
  const std::vector<std::int64_t> falling = {0, 4, 3, 6};
  a.offsets = falling;
  EXPECT_EQ(ComputeReference(a, *ParseAggregations("sum")).status().code(), absl::StatusCode::kInvalidArgument);
}

// numpy.ma on [3, 9, -1, 7, 2, 8] with elements 1 and 3 masked out (bits
// 0b110101): sum 12, min -1, argmax 5 (the masked 9 is skipped, positions
// kept), count 4; by rows of 3, the second row's argmin is its element 1.
TEST(Reference, MasksSkipTheInvalidElements) {
  const std::vector<double> x = {3, 9, -1, 7, 2, 8};
  const std::vector<std::uint8_t> valid = {0b110101};
  ArrayRef a = Ref(x, rules::DType::kFloat64);
  a.validity = valid;
  const v1::AggregateResponse r = Compute(a, "sum,min,argmax,count,mean,nanargmin");
  EXPECT_EQ(r.results(0).doubles().values(0), 12.0);
  EXPECT_EQ(r.results(1).doubles().values(0), -1.0);
  EXPECT_EQ(r.results(2).int64s().values(0), 5);
  EXPECT_EQ(r.results(3).uint64s().values(0), 4u);
  EXPECT_EQ(r.results(4).doubles().values(0), 3.0);
  EXPECT_EQ(r.results(5).int64s().values(0), 2);
  a.row_length = 3;
  const v1::AggregateResponse rows = Compute(a, "argmin,count");
  EXPECT_EQ(Values(rows.results(0).int64s().values()), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(Values(rows.results(1).uint64s().values()), (std::vector<std::uint64_t>{2, 2}));
  // A row with no valid element has no min; a mask of the wrong size is refused.
  const std::vector<std::uint8_t> first_row_out = {0b111000};
  a.validity = first_row_out;
  EXPECT_EQ(ComputeReference(a, *ParseAggregations("min")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Compute(a, "sum").results(0).doubles().values(0), 0.0);
  const std::vector<std::uint8_t> too_long = {0xff, 0xff};
  a.validity = too_long;
  EXPECT_EQ(ComputeReference(a, *ParseAggregations("sum")).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CompareResults, ToleranceExactnessAndMessages) {
  std::vector<float> x(1000);
  FillRandom(rules::DType::kFloat32, 7, reinterpret_cast<std::byte*>(x.data()), x.size());
  const ArrayRef a = Ref(x, rules::DType::kFloat32, 100);
  const v1::AggregateResponse expected = Compute(a, "sum,max,hist:8:-1:1,count");
  EXPECT_TRUE(CompareResults(expected, expected).ok());

  v1::AggregateResponse close = expected;  // a different summation order
  close.mutable_results(0)->mutable_doubles()->set_values(3, expected.results(0).doubles().values(3) * (1 + 1e-9));
  EXPECT_TRUE(CompareResults(expected, close).ok());

  v1::AggregateResponse off = expected;
  off.mutable_results(0)->mutable_doubles()->set_values(3, expected.results(0).doubles().values(3) + 0.5);
  const absl::Status s = CompareResults(expected, off);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sum: row 3"), absl::string_view::npos) << s;

  v1::AggregateResponse max_off = expected;  // max picks an element: no tolerance
  max_off.mutable_results(1)->mutable_doubles()->set_values(0, std::nextafter(expected.results(1).doubles().values(0), 2.0));
  EXPECT_FALSE(CompareResults(expected, max_off).ok());

  v1::AggregateResponse hist_off = expected;
  hist_off.mutable_results(2)->mutable_histograms()->mutable_histograms(9)->set_nan(1);
  EXPECT_NE(CompareResults(expected, hist_off).message().find("row 9"), absl::string_view::npos);

  v1::AggregateResponse missing = expected;
  missing.mutable_results()->RemoveLast();
  EXPECT_FALSE(CompareResults(expected, missing).ok());
}

TEST(RandomData, DeterministicSpreadAndInRange) {
  std::vector<double> a(4096), b(4096);
  FillRandom(rules::DType::kFloat64, 42, reinterpret_cast<std::byte*>(a.data()), a.size());
  FillRandom(rules::DType::kFloat64, 42, reinterpret_cast<std::byte*>(b.data()), b.size());
  EXPECT_EQ(a, b);
  double lo = 1, hi = -1;
  for (double v : a) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_LT(lo, -0.99);  // spread over the whole range
  EXPECT_GT(hi, 0.99);
  FillRandom(rules::DType::kFloat64, 43, reinterpret_cast<std::byte*>(b.data()), b.size());
  EXPECT_NE(a, b);

  std::vector<std::uint8_t> u(4096);
  FillRandom(rules::DType::kUInt8, 1, reinterpret_cast<std::byte*>(u.data()), u.size());
  EXPECT_EQ(*std::max_element(u.begin(), u.end()), 255);
  EXPECT_EQ(*std::min_element(u.begin(), u.end()), 0);
  std::vector<std::int64_t> i(4096);
  FillRandom(rules::DType::kInt64, 1, reinterpret_cast<std::byte*>(i.data()), i.size());
  EXPECT_LT(*std::min_element(i.begin(), i.end()), -(std::int64_t{1} << 31));  // beyond int32
  EXPECT_GE(*std::min_element(i.begin(), i.end()), -(std::int64_t{1} << 32));
}

}  // namespace
}  // namespace tally::client
