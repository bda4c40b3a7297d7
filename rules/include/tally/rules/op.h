// The aggregations tally computes, and the limits on their parameters.
#pragma once

#include <cstdint>
#include <string_view>

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
};
inline constexpr int kNumOpKinds = 11;

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
  }
  return "unknown";
}

// Ops that have no value on an empty input (numpy raises).
constexpr bool NeedsNonEmpty(OpKind k) {
  return k == OpKind::kMin || k == OpKind::kMax || k == OpKind::kArgmin || k == OpKind::kArgmax;
}

inline constexpr std::uint32_t kMaxHistogramBins = 65536;

struct HistogramSpec {
  std::uint32_t bins = 0;
  double lo = 0.0;
  double hi = 0.0;
};

struct OpSpec {
  OpKind kind = OpKind::kSum;
  double ddof = 0.0;          // kVariance, kStddev
  HistogramSpec histogram{};  // kHistogram
  // Answer with the op's partial state (tally/rules/partial.h) instead of
  // its value; argmin/argmax indices in it are offset by base_index.
  bool partial = false;
  std::uint64_t base_index = 0;
};

// An op that has no value on an empty input, unless it asks for its
// partial state (an empty state is a valid one: merging leaves the other).
constexpr bool NeedsNonEmpty(const OpSpec& op) { return !op.partial && NeedsNonEmpty(op.kind); }

// A set of op kinds as a bit mask, so a fused kernel can pick its work with
// uniform branches at run time instead of one instantiation per subset.
using OpMask = std::uint32_t;
constexpr OpMask Bit(OpKind k) { return OpMask{1} << static_cast<int>(k); }
constexpr bool Has(OpMask m, OpKind k) { return (m & Bit(k)) != 0; }

}  // namespace tally::rules
