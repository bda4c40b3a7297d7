// numpy 2's rule for histogram ranges in validation: a range whose edges, in
// the edge dtype, are not strictly increasing is refused, naming the field;
// every other range is accepted. Checked against numpy's edges written out
// on their own (numpy_edges.h), around the narrowest ranges numpy 2 accepts
// and on random ranges near the limit.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "server/core/validate.h"
#include "tests/unit/numpy_edges.h"
#include "tests/unit/test_seed.h"

namespace tally::testing {
namespace {

AggregationPlan HistogramPlan(DType dtype, std::uint32_t bins, double lo, double hi) {
  return {ArraySpec{dtype, 100, 0}, {OpSpec{.kind = OpKind::kHistogram, .histogram = {bins, lo, hi}}}};
}

template <typename T>
bool NumpyAccepts(std::uint32_t bins, double lo, double hi) {
  return Numpy2Accepts(NumpyEdges<T>(bins, lo, hi));
}

TEST(HistogramRange, RangesNarrowerThanTheFloatSpacingAreRefusedNamingTheField) {
  struct Case {
    DType dtype;
    std::uint32_t bins;
    double lo, hi;
    const char* edge_type;
  };
  const Case cases[] = {
      {DType::kFloat64, 10, 1.0, 1.0 + 2e-16, "float64"},     // every edge is 1.0
      {DType::kInt32, 10, 1.0, 1.0 + 2e-16, "float64"},
      {DType::kFloat32, 4, 1.0, 1.0 + 1e-12, "float32"},      // (1, 1) in float32
      {DType::kFloat32, 65536, 0.0, 1e-300, "float32"},       // bins / (hi - lo) overflows
      {DType::kFloat64, 65536, 0.0, 5e-324, "float64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.edge_type << " " << c.bins << " bins over [" << c.lo << ", " << c.hi << "]");
    const absl::Status s = ValidatePlan(HistogramPlan(c.dtype, c.bins, c.lo, c.hi), RequestLimits{});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    const std::string m(s.message());
    EXPECT_NE(m.find("aggregations[0] (histogram): too many histogram.bins"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("in ") + c.edge_type), std::string::npos) << m;
    EXPECT_NE(m.find("cannot create " + std::to_string(c.bins) + " finite-sized bins"), std::string::npos) << m;
  }
  // The shortest digits that read back: the range shows as what it is.
  const absl::Status s = ValidatePlan(HistogramPlan(DType::kFloat64, 10, 1.0, 1.0 + 2e-16), RequestLimits{});
  EXPECT_NE(s.message().find("[1, 1.0000000000000002]"), std::string_view::npos) << s.message();
  // The edge dtype decides: 65536 bins over [0, 1e-300] are fine in float64.
  EXPECT_TRUE(ValidatePlan(HistogramPlan(DType::kFloat64, 65536, 0.0, 1e-300), RequestLimits{}).ok());
  EXPECT_TRUE(ValidatePlan(HistogramPlan(DType::kUInt8, 65536, 0.0, 1e-300), RequestLimits{}).ok());
}

template <typename T>
void CheckAroundTheNarrowest(DType dtype) {
  for (std::uint32_t bins : {1u, 256u, 65536u}) {
    for (double lo : {0.0, 1.0, -3.7, 1e30, -1e-300}) {
      const double narrowest = NarrowestAcceptedHi<T>(bins, lo);
      for (int k = -8; k <= 8; ++k) {
        const double hi = DoubleAt(DoubleOrder(narrowest) + k);
        if (!(hi > lo)) continue;
        SCOPED_TRACE(::testing::Message() << rules::Name(dtype) << " " << bins << " bins over [" << lo << ", "
                                          << std::hexfloat << hi << "]");
        const bool accepted = NumpyAccepts<T>(bins, lo, hi);
        if (k == 0) {
          EXPECT_TRUE(accepted);
        }
        if (k == -1) {
          EXPECT_FALSE(accepted);
        }
        EXPECT_EQ(ValidatePlan(HistogramPlan(dtype, bins, lo, hi), RequestLimits{}).ok(), accepted);
      }
    }
  }
}

TEST(HistogramRange, AgreesWithNumpyAroundTheNarrowestRangesItAccepts) {
  CheckAroundTheNarrowest<float>(DType::kFloat32);
  CheckAroundTheNarrowest<double>(DType::kFloat64);
}

// Ranges a few spacings wide per bin, anywhere on the number line: where the
// validator decides without computing the edges, it must agree with them.
template <typename T>
void CheckRandomRanges(DType dtype, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> exponent(std::numeric_limits<T>::min_exponent - 30,
                                              std::numeric_limits<T>::max_exponent - 20);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int accepted = 0, refused = 0;
  for (int n = 0; n < 1500; ++n) {
    const double lo = std::ldexp(unit(rng) * 2 - 1, exponent(rng));
    const auto bins = static_cast<std::uint32_t>(std::exp2(unit(rng) * 16));
    const T lo_t = static_cast<T>(lo);
    const double spacing = static_cast<double>(std::nextafter(lo_t, std::numeric_limits<T>::infinity())) -
                           static_cast<double>(lo_t);
    const double hi = lo + spacing * bins * std::exp2(unit(rng) * 11 - 1);  // 1/2 to 1024 spacings a bin
    if (!(hi > lo) || !std::isfinite(hi)) continue;
    const bool numpy = NumpyAccepts<T>(bins, lo, hi);
    EXPECT_EQ(HistogramEdgesIncrease({bins, lo, hi}, dtype), numpy)
        << rules::Name(dtype) << " " << bins << " bins over [" << std::hexfloat << lo << ", " << hi << "]";
    (numpy ? accepted : refused)++;
  }
  // Both answers were exercised (each over a hundred times on most seeds;
  // the bound leaves room for an unlucky one).
  EXPECT_GT(accepted, 50);
  EXPECT_GT(refused, 50);
}

TEST(HistogramRange, AgreesWithNumpyOnRandomRangesNearTheLimit) {
  TALLY_SEEDED_RNG(rng);
  CheckRandomRanges<float>(DType::kFloat32, rng);
  CheckRandomRanges<double>(DType::kFloat64, rng);
}

}  // namespace
}  // namespace tally::testing
