// The aggregations tally computes, and the limits on their parameters.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tally::rules {

enum class OpKind : std::uint8_t {
  kSum,
  kMin,
  kMax,
  kMean,
  kCount,
  kSumSquares,
  kVariance,
  kStddev,
  kArgmin,
  kArgmax,
  kHistogram,
  // numpy's nan-functions: NaN elements are skipped. Appended, so the
  // values above (and metrics labels by value) keep their meaning.
  kNanSum,
  kNanMean,
  kNanMin,
  kNanMax,
  kNanArgmin,
  kNanArgmax,
  kNanVariance,
  kNanStddev,
  kNanCount,
  // numpy.prod, numpy.count_nonzero, numpy.any, numpy.all and numpy.ptp.
  // Appended for the same reason.
  kProduct,
  kCountNonzero,
  kAny,
  kAll,
  kPtp,
  // numpy's (min, max) in one answer, Arrow's min_max: two values per row.
  // A plan never holds it: the server's front end asks the engine for kMin
  // and kMax (one fused pass) and pairs their answers (FinishPlan and
  // ResultToProto in server/frontend/convert.cc).
  kMinMax,
  // Functions whose state the registry's own code keeps (rules/agg/state.h):
  // exact quantiles, the k largest and smallest, and mergeable sketches.
  // No kernel mask names them (OpMask holds the kinds before kNanSum and
  // the NaN-skipping ones).
  kQuantile,
  kNanQuantile,
  kMedian,
  kNanMedian,
  kTopK,
  kBottomK,
  kHll,
  kDdSketch,
  kCountDistinct,
  kMode,
};
inline constexpr int kNumOpKinds = 36;
// The ops before kNanSum: the v1 ops. The GPU kernels compute them, the
// NaN-skipping ones and kProduct .. kPtp (the registry's
// Function::on_kernels); the router sends host plans with any other op to
// the cpu backend (server/engine/routing/router.h).
inline constexpr int kNumKernelOpKinds = 11;

// What each kind is (its name, plain form, flags) is the registry's
// (tally/rules/agg/registry.h), which host code asks; the kernels see only
// the kinds and their masks.

inline constexpr std::uint32_t kMaxHistogramBins = 65536;

struct HistogramSpec {
  std::uint32_t bins = 0;
  double lo = 0.0;
  double hi = 0.0;
};

// numpy.quantile's methods, in the order tally.proto numbers them
// (QuantileMethod - 1): the nine of Hyndman and Fan, then numpy's four
// discontinuous ones of old.
enum class QuantileMethod : std::uint8_t {
  kLinear,  // numpy's default (Hyndman-Fan 7)
  kInvertedCdf,
  kAveragedInvertedCdf,
  kClosestObservation,
  kInterpolatedInvertedCdf,
  kHazen,
  kWeibull,
  kMedianUnbiased,
  kNormalUnbiased,
  kLower,
  kHigher,
  kMidpoint,
  kNearest,
};
inline constexpr int kNumQuantileMethods = 13;

inline constexpr std::uint32_t kMaxQuantiles = 1024;   // q values per aggregation
inline constexpr std::uint32_t kMaxTopK = 65536;       // topk and bottomk's k
inline constexpr std::uint32_t kMinHllPrecision = 4;   // 2^p registers
inline constexpr std::uint32_t kMaxHllPrecision = 18;
inline constexpr double kMinDdSketchAccuracy = 1e-3;   // relative accuracy
inline constexpr double kMaxDdSketchAccuracy = 0.5;

struct OpSpec {
  OpKind kind = OpKind::kSum;
  double ddof = 0.0;          // kVariance, kStddev, kNanVariance, kNanStddev
  HistogramSpec histogram{};  // kHistogram
  // kQuantile, kNanQuantile, kDdSketch: the probabilities, in [0, 1], in
  // the order the answers take; kMedian and kNanMedian have none.
  std::vector<double> q{};
  QuantileMethod method = QuantileMethod::kLinear;  // kQuantile, kNanQuantile
  std::uint32_t k = 0;                              // kTopK, kBottomK
  std::uint32_t precision = 0;                      // kHll: 2^precision registers
  double relative_accuracy = 0.0;                   // kDdSketch
  // Answer with the op's partial state (tally/rules/partial.h) instead of
  // its value; argmin/argmax indices in it are offset by base_index.
  bool partial = false;
  std::uint64_t base_index = 0;
};

// A set of op kinds as a bit mask, so a fused kernel can pick its work with
// uniform branches at run time instead of one instantiation per subset.
using OpMask = std::uint32_t;
constexpr OpMask Bit(OpKind k) { return OpMask{1} << static_cast<int>(k); }
constexpr bool Has(OpMask m, OpKind k) { return (m & Bit(k)) != 0; }

}  // namespace tally::rules
