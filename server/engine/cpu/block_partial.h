// What the CPU backend keeps of a block, a chunk or a row (Partial), how
// two of them fold in element order, which fields a plan's ops need
// (Needs), and the tables that pick the block loops of block_kernels.h for
// those needs. One Partial holds every op's fields so that a block is read
// once whatever the plan asks; a plan's Needs decide which loops fill them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "server/core/request.h"
#include "server/engine/cpu/block_kernels.h"
#include "server/engine/cpu/exact_block.h"
#include "server/engine/finish.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/combine.h"
#include "tally/rules/op.h"

namespace tally::cpu {

// Everything any op needs from a block, a chunk or a row.
template <typename V>
struct Partial {
  std::uint64_t count = 0;
  std::uint64_t isum = 0;  // integers' OP_SUM, modulo 2^64
  V min = MinIdentity<V>();
  V max = MaxIdentity<V>();
  rules::ArgCandidate<V> argmin{V{}, -1};
  rules::ArgCandidate<V> argmax{V{}, -1};
  // The same over the non-NaN elements, for the NaN-skipping ops.
  std::uint64_t nan_count = 0;  // non-NaN elements
  V nan_min = MinIdentity<V>();
  V nan_max = MaxIdentity<V>();
  rules::ArgCandidate<V> nan_argmin{V{}, -1};
  rules::ArgCandidate<V> nan_argmax{V{}, -1};
  // numpy.prod in its accumulator type (ProductLane), and the elements that
  // are not zero (count_nonzero, any, all).
  ProductLane<V> product = 1;
  std::uint64_t nonzero = 0;
  // The exact sums behind float dtypes' OP_SUM and OP_NANSUM and every
  // dtype's means (exact_block.h, exact_integers.h): the same value however
  // blocks, chunks and rows were cut.
  rules::ExactAccumulator exact_sum;
  rules::ExactAccumulator nan_exact_sum;
  // Their squares' exact sums (AddExactSquares, IntegerBlockSums): every
  // dtype's OP_SUM_SQUARES, and with the sums their variances.
  rules::ExactAccumulator exact_squares;
  rules::ExactAccumulator nan_exact_squares;
};

// acc := acc followed by b. Every field is cheap, so all are folded. An
// empty acc takes b as it is (one rule for every path, so still bitwise
// deterministic): cheaper for short rows, and a lone -0.0 stays -0.0.
template <typename V>
void Fold(Partial<V>& acc, const Partial<V>& b) {
  if (b.count == 0) return;  // a block whose elements are all masked out
  if (acc.count == 0) {
    acc = b;
    return;
  }
  acc.count += b.count;
  acc.isum += b.isum;
  acc.min = rules::MinNan(acc.min, b.min);
  acc.max = rules::MaxNan(acc.max, b.max);
  acc.argmin = rules::PickArg<false>(acc.argmin, b.argmin);
  acc.argmax = rules::PickArg<true>(acc.argmax, b.argmax);
  acc.nan_count += b.nan_count;
  acc.nan_min = b.nan_min < acc.nan_min ? b.nan_min : acc.nan_min;  // neither is NaN
  acc.nan_max = b.nan_max > acc.nan_max ? b.nan_max : acc.nan_max;
  acc.nan_argmin = rules::PickArg<false>(acc.nan_argmin, b.nan_argmin);
  acc.nan_argmax = rules::PickArg<true>(acc.nan_argmax, b.nan_argmax);
  acc.product *= b.product;  // integers wrap modulo 2^64
  acc.nonzero += b.nonzero;
  acc.exact_sum.Merge(b.exact_sum);
  acc.nan_exact_sum.Merge(b.nan_exact_sum);
  acc.exact_squares.Merge(b.exact_squares);
  acc.nan_exact_squares.Merge(b.nan_exact_squares);
}

// What the plan's ops need computed per block.
struct Needs {
  bool native_sum = false;
  bool exact_sum = false;      // float dtypes' OP_SUM; OP_MEAN, OP_VARIANCE and OP_STDDEV
  bool nan_exact_sum = false;  // OP_NANSUM, OP_NANMEAN, OP_NANVAR and OP_NANSTD
  bool exact_squares = false;  // OP_SUM_SQUARES, OP_VARIANCE and OP_STDDEV
  bool nan_exact_squares = false;  // OP_NANVAR and OP_NANSTD
  bool min = false;
  bool max = false;
  bool argmin = false;
  bool argmax = false;
  // NaN-skipping (float dtypes only).
  bool nan_sum = false;  // the non-NaN count and float64 sum
  bool nan_min = false;
  bool nan_max = false;
  bool nan_argmin = false;
  bool nan_argmax = false;
  bool any_nan() const { return nan_sum || nan_min || nan_max; }
  bool product = false;
  bool nonzero = false;
};

// `ops` as `dtype` computes them (EffectiveOps: no NaN-skipping op on an
// integer dtype). Which exact sums each op needs is the registry's word
// (rules::agg::ExactFor, exact_squares): a float dtype's sum, every dtype's
// means and moments.
inline Needs NeedsOf(const std::vector<OpSpec>& ops, DType dtype) {
  Needs n;
  for (const OpSpec& op : ops) {
    const rules::agg::Function& f = rules::agg::Of(op.kind);
    if (rules::agg::ExactFor(f, dtype)) {
      if (!f.exact_squares_only) (f.skips_nan ? n.nan_exact_sum : n.exact_sum) = true;
      if (f.exact_squares) (f.skips_nan ? n.nan_exact_squares : n.exact_squares) = true;
    }
    switch (op.kind) {
      case OpKind::kSum: n.native_sum = true; break;
      case OpKind::kMin: n.min = true; break;
      case OpKind::kMax: n.max = true; break;
      case OpKind::kMean:
      case OpKind::kCount:
      case OpKind::kSumSquares:
      case OpKind::kVariance:
      case OpKind::kStddev: break;
      case OpKind::kArgmin: n.argmin = n.min = true; break;
      case OpKind::kArgmax: n.argmax = n.max = true; break;
      case OpKind::kHistogram: break;
      case OpKind::kNanSum:
      case OpKind::kNanCount:
      case OpKind::kNanMean:
      case OpKind::kNanVariance:
      case OpKind::kNanStddev: n.nan_sum = true; break;
      case OpKind::kNanMin: n.nan_sum = n.nan_min = true; break;
      case OpKind::kNanMax: n.nan_sum = n.nan_max = true; break;
      case OpKind::kNanArgmin: n.nan_sum = n.nan_argmin = n.nan_min = true; break;
      case OpKind::kNanArgmax: n.nan_sum = n.nan_argmax = n.nan_max = true; break;
      case OpKind::kProduct: n.product = true; break;
      case OpKind::kCountNonzero:
      case OpKind::kAny:
      case OpKind::kAll: n.nonzero = true; break;
      case OpKind::kPtp:
      case OpKind::kMinMax: n.min = n.max = true; break;  // a plan holds no kMinMax (ValidatePlan)
      // Functions with states of their own (functions/state_reduction.cc).
      case OpKind::kQuantile:
      case OpKind::kNanQuantile:
      case OpKind::kMedian:
      case OpKind::kNanMedian:
      case OpKind::kTopK:
      case OpKind::kBottomK:
      case OpKind::kHll:
      case OpKind::kDdSketch:
      case OpKind::kCountDistinct:
      case OpKind::kMode: break;
    }
  }
  return n;
}

// The ops as a dtype computes them (rules::AsComputedFor).
inline std::vector<OpSpec> EffectiveOps(std::vector<OpSpec> ops, DType dtype) {
  for (OpSpec& op : ops) op = AsComputedFor(op, dtype);
  return ops;
}

template <typename V>
using FusedFn = void (*)(const V*, std::size_t, LaneTotals<V>*);

template <typename V, std::size_t... kMasks>
constexpr std::array<FusedFn<V>, kLaneMasks> FusedTable(std::index_sequence<kMasks...>) {
  return {&FusedLanes<V, static_cast<unsigned>(kMasks)>...};
}

template <typename V>
using NanFn = void (*)(const V*, std::size_t, NanLaneTotals<V>*);

template <typename V>
using MoreFn = void (*)(const V*, std::size_t, MoreLaneTotals<V>*);

template <typename V, std::size_t... kMasks>
constexpr std::array<MoreFn<V>, kMoreLaneMasks> MoreTable(std::index_sequence<kMasks...>) {
  return {&MoreLanes<V, static_cast<unsigned>(kMasks)>...};
}

template <typename V, std::size_t... kMasks>
constexpr std::array<NanFn<V>, kNanLaneMasks> NanTable(std::index_sequence<kMasks...>) {
  return {&NanLanes<V, static_cast<unsigned>(kMasks)>...};
}

}  // namespace tally::cpu
