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
};
inline constexpr int kNumOpKinds = 35;
// The ops before kNanSum: the v1 ops, the ones with partial states. The GPU
// kernels compute them and the NaN-skipping ones (RunsOnKernels); the CUDA
// backend hands plans with any other op to the CPU backend.
inline constexpr int kNumKernelOpKinds = 11;

constexpr const char* Name(OpKind k) {
  switch (k) {
    case OpKind::kSum: return "sum";
    case OpKind::kMin: return "min";
    case OpKind::kMax: return "max";
    case OpKind::kMean: return "mean";
    case OpKind::kCount: return "count";
    case OpKind::kSumSquares: return "sum_squares";
    case OpKind::kVariance: return "variance";
    case OpKind::kStddev: return "stddev";
    case OpKind::kArgmin: return "argmin";
    case OpKind::kArgmax: return "argmax";
    case OpKind::kHistogram: return "histogram";
    case OpKind::kNanSum: return "nansum";
    case OpKind::kNanMean: return "nanmean";
    case OpKind::kNanMin: return "nanmin";
    case OpKind::kNanMax: return "nanmax";
    case OpKind::kNanArgmin: return "nanargmin";
    case OpKind::kNanArgmax: return "nanargmax";
    case OpKind::kNanVariance: return "nanvar";
    case OpKind::kNanStddev: return "nanstd";
    case OpKind::kNanCount: return "nancount";
    case OpKind::kProduct: return "prod";
    case OpKind::kCountNonzero: return "count_nonzero";
    case OpKind::kAny: return "any";
    case OpKind::kAll: return "all";
    case OpKind::kPtp: return "ptp";
    case OpKind::kMinMax: return "minmax";
    case OpKind::kQuantile: return "quantile";
    case OpKind::kNanQuantile: return "nanquantile";
    case OpKind::kMedian: return "median";
    case OpKind::kNanMedian: return "nanmedian";
    case OpKind::kTopK: return "topk";
    case OpKind::kBottomK: return "bottomk";
    case OpKind::kHll: return "hll";
    case OpKind::kDdSketch: return "ddsketch";
    case OpKind::kCountDistinct: return "count_distinct";
  }
  return "unknown";
}

// The NaN-skipping ops (numpy.nansum, ...).
constexpr bool IsNanSkipping(OpKind k) { return k >= OpKind::kNanSum && k <= OpKind::kNanCount; }

// Whether the GPU kernels compute the op: the kinds before kNanSum, and the
// NaN-skipping ones.
constexpr bool RunsOnKernels(OpKind k) { return static_cast<int>(k) < kNumKernelOpKinds || IsNanSkipping(k); }

// Ops whose partial states the wire and the clients carry: the kinds before
// kNanSum, and the NaN-skipping ones (their plain op's state over the
// non-NaN elements, with every element counted: PartialState::elements).
// prod, count_nonzero, any, all and ptp have none yet; a request for one's
// partial state is refused.
constexpr bool HasPartialState(OpKind k) { return static_cast<int>(k) < kNumKernelOpKinds || IsNanSkipping(k); }

// Values an op answers per row: two for kMinMax (min, then max), else one.
constexpr int ValuesPerRow(OpKind k) { return k == OpKind::kMinMax ? 2 : 1; }

// The NaN-propagating op a NaN-skipping one is on an input without NaNs.
// On integer dtypes numpy's nan-functions are exactly these (nanvar calls
// var: a ddof >= n gives inf there, not the NaN nanvar gives on floats).
constexpr OpKind PlainOf(OpKind k) {
  switch (k) {
    case OpKind::kNanSum: return OpKind::kSum;
    case OpKind::kNanMean: return OpKind::kMean;
    case OpKind::kNanMin: return OpKind::kMin;
    case OpKind::kNanMax: return OpKind::kMax;
    case OpKind::kNanArgmin: return OpKind::kArgmin;
    case OpKind::kNanArgmax: return OpKind::kArgmax;
    case OpKind::kNanVariance: return OpKind::kVariance;
    case OpKind::kNanStddev: return OpKind::kStddev;
    case OpKind::kNanCount: return OpKind::kCount;
    default: return k;
  }
}

// Ops that have no value on an empty input (numpy raises; numpy.nanmin of
// an empty array raises too, unlike that of an all-NaN one, numpy.ptp
// raises as numpy.max does, and numpy.quantile as numpy.take does).
constexpr bool NeedsNonEmpty(OpKind k) {
  const OpKind p = PlainOf(k);
  return p == OpKind::kMin || p == OpKind::kMax || p == OpKind::kArgmin || p == OpKind::kArgmax ||
         p == OpKind::kPtp || p == OpKind::kMinMax || p == OpKind::kQuantile;
}

// Ops with no value on a row whose elements are all NaN: numpy.nanargmin
// and nanargmax raise "All-NaN slice encountered". (nanmin and nanmax warn
// and return NaN, as tally does.)
constexpr bool NeedsNonNan(OpKind k) { return k == OpKind::kNanArgmin || k == OpKind::kNanArgmax; }

// Ops whose ddof applies.
constexpr bool TakesDdof(OpKind k) {
  const OpKind p = PlainOf(k);
  return p == OpKind::kVariance || p == OpKind::kStddev;
}

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

// An op that has no value on an empty input, unless it asks for its
// partial state (an empty state is a valid one: merging leaves the other).
constexpr bool NeedsNonEmpty(const OpSpec& op) { return !op.partial && NeedsNonEmpty(op.kind); }
// nanargmin and nanargmax have no value on an all-NaN row, unless they ask
// for the partial state: an all-NaN part's is the empty one (count 0, its
// elements counted), merged with the other parts' before any answer.
constexpr bool NeedsNonNan(const OpSpec& op) { return !op.partial && NeedsNonNan(op.kind); }
// argmin, argmax, nanargmin and nanargmax: their answer and partial state
// are an index (offset by OpSpec::base_index).
constexpr bool AnswersIndex(OpKind k) { return PlainOf(k) == OpKind::kArgmin || PlainOf(k) == OpKind::kArgmax; }

// A set of op kinds as a bit mask, so a fused kernel can pick its work with
// uniform branches at run time instead of one instantiation per subset.
using OpMask = std::uint32_t;
constexpr OpMask Bit(OpKind k) { return OpMask{1} << static_cast<int>(k); }
constexpr bool Has(OpMask m, OpKind k) { return (m & Bit(k)) != 0; }

}  // namespace tally::rules
