#include "server/engine/cuda/pass_results.h"

#include <utility>

#include "server/engine/cuda/cuda_reduction.h"
#include "server/engine/finish.h"
#include "tally/kernels/aggregate.h"

namespace tally::cuda {
namespace {

// An exact plan's sums (ResultLayout::exact_sum): the state's exact bytes
// beside its rounded fields, as the cpu backend puts them (its
// PutExactSum, PutExactMean, PutExactMoments), so merges stay exact and
// both backends give the same states.
void PutExact(const OpSpec& op, const kernels::ResultView& v, std::uint64_t r, bool nan, rules::PartialState& s) {
  const rules::ExactSum sum = v.ExactState(nan, r);
  switch (op.kind) {
    case OpKind::kSum:
    case OpKind::kNanSum: s.float_sum = sum.ToDouble(); break;
    case OpKind::kMean:
    case OpKind::kNanMean: s.mean = sum.ToDouble() / static_cast<double>(s.count); break;
    case OpKind::kSumSquares: {
      const rules::ExactSum squares = v.ExactSquaresState(false, r);
      s.sum_squares = squares.ToDouble();
      if (op.partial) s.exact_sum_squares = squares.Bytes();
      return;
    }
    default: {  // the variances and standard deviations
      const rules::ExactSum squares = v.ExactSquaresState(nan, r);
      rules::PutExactMoments(sum, squares, s);
      if (op.partial) s.exact_sum_squares = squares.Bytes();
      break;
    }
  }
  if (op.partial) s.exact_sum = sum.Bytes();
}

// The op's state of row `r` from a finished pass's result. A
// NaN-skipping op's state covers the elements that are not NaN.
rules::PartialState StateOf(const OpSpec& op, DType dt, const kernels::ResultView& v, std::uint64_t r) {
  rules::PartialState s;
  // `op` is as `dt` computes it (AsComputedFor): on integer dtypes no
  // NaN-skipping kind reaches here.
  const bool nan_op = rules::IsNanSkipping(op.kind);
  s.count = nan_op ? v.NanCount(r) : v.Count(r);
  if (nan_op) s.elements = v.Count(r);  // every element, NaN or not
  if (op.kind == OpKind::kHistogram) {
    const std::uint64_t* h = v.Histogram(r);
    s.histogram.counts.assign(h, h + op.histogram.bins);
    s.histogram.below = v.HistogramBelow(r);
    s.histogram.above = v.HistogramAbove(r);
    s.histogram.nan = v.HistogramNan(r);
    return s;
  }
  if (s.count == 0) return s;  // the empty state: sums 0, no extreme, index -1
  if (v.IsExact(op.kind)) {
    PutExact(op, v, r, nan_op, s);
    return s;
  }
  switch (op.kind) {
    case OpKind::kSum: PutScalar(dt, v.Sum(r), s.float_sum, s.int_sum, s.uint_sum); break;
    case OpKind::kMin: PutScalar(dt, v.Min(r), s.float_extreme, s.int_extreme, s.uint_extreme); break;
    case OpKind::kMax: PutScalar(dt, v.Max(r), s.float_extreme, s.int_extreme, s.uint_extreme); break;
    case OpKind::kMean: s.mean = v.Moments(r).mean; break;
    case OpKind::kSumSquares: s.sum_squares = v.SumSquares(r); break;
    case OpKind::kVariance:
    case OpKind::kStddev:
      s.mean = v.Moments(r).mean;
      s.m2 = v.Moments(r).m2;
      break;
    case OpKind::kArgmin:
      PutScalar(dt, v.ArgminValue(r), s.float_extreme, s.int_extreme, s.uint_extreme);
      s.index = v.Argmin(r) + static_cast<std::int64_t>(op.base_index);
      break;
    case OpKind::kArgmax:
      PutScalar(dt, v.ArgmaxValue(r), s.float_extreme, s.int_extreme, s.uint_extreme);
      s.index = v.Argmax(r) + static_cast<std::int64_t>(op.base_index);
      break;
    case OpKind::kNanSum: s.float_sum = v.NanSum(r); break;
    case OpKind::kNanMin: s.float_extreme = v.NanMin(r).f64; break;
    case OpKind::kNanMax: s.float_extreme = v.NanMax(r).f64; break;
    case OpKind::kNanMean: s.mean = v.NanMoments(r).mean; break;
    case OpKind::kNanVariance:
    case OpKind::kNanStddev:
      s.mean = v.NanMoments(r).mean;
      s.m2 = v.NanMoments(r).m2;
      break;
    case OpKind::kNanArgmin:
      s.float_extreme = v.NanArgminValue(r).f64;
      s.index = v.NanArgmin(r) + static_cast<std::int64_t>(op.base_index);
      break;
    case OpKind::kNanArgmax:
      s.float_extreme = v.NanArgmaxValue(r).f64;
      s.index = v.NanArgmax(r) + static_cast<std::int64_t>(op.base_index);
      break;
    case OpKind::kProduct: PutScalar(dt, v.Product(r), s.float_product, s.int_product, s.uint_product); break;
    case OpKind::kCountNonzero:
    case OpKind::kAny:
    case OpKind::kAll: s.nonzero = v.Nonzero(r); break;
    case OpKind::kPtp:  // the difference is the finish's (rules::PtpOf)
      PutScalar(dt, v.Min(r), s.float_extreme, s.int_extreme, s.uint_extreme);
      PutScalar(dt, v.Max(r), s.float_max, s.int_max, s.uint_max);
      break;
    case OpKind::kCount:
    case OpKind::kNanCount:
    case OpKind::kHistogram: break;
    default: break;  // ops past the kernels' (RunsOnKernels) never reach them (CudaBackend::Start)
  }
  return s;
}

}  // namespace

absl::Status CheckRowsHaveValues(const AggregationPlan& plan, const PassPlan& passes, const std::byte* results) {
  const ArraySpec& a = plan.array;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const OpSpec& op = plan.ops[i];
    const bool empty_refused = a.masked() && rules::NeedsNonEmpty(op);
    const bool all_nan_refused = rules::NeedsNonNan(op) && rules::IsFloat(a.dtype);
    if (passes.op_pass[i] < 0 || !(empty_refused || all_nan_refused)) continue;
    const Pass& pass = passes.passes[static_cast<std::size_t>(passes.op_pass[i])];
    const kernels::ResultView v(pass.plan, results + pass.state_offset);
    for (std::uint64_t r = 0; r < a.rows(); ++r) {
      if (empty_refused && v.Count(r) == 0) return NoValidElements(plan.NameOf(i), a, r);
      if (all_nan_refused && v.NanCount(r) == 0 && v.Count(r) > 0) return AllNan(rules::Name(op.kind), a, r);
    }
  }
  return absl::OkStatus();
}

AggregationResult CollectResults(const AggregationPlan& plan, const PassPlan& passes, const std::byte* results) {
  const ArraySpec& a = plan.array;
  const std::uint64_t rows = a.rows();
  const std::uint64_t count = a.segmented() ? a.row_length : a.length;
  AggregationResult result;
  result.values.reserve(plan.ops.size());
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const OpSpec op = AsComputedFor(plan.ops[i], a.dtype);
    OpValues values = EmptyValues(op, a.dtype, rows);
    if (passes.op_pass[i] < 0) {  // count without a mask
      for (std::uint64_t r = 0; r < rows; ++r) {
        rules::PartialState state;
        state.count = count;
        StoreRow(op, a.dtype, r, std::move(state), values);
      }
    } else {
      const Pass& pass = passes.passes[static_cast<std::size_t>(passes.op_pass[i])];
      const kernels::ResultView v(pass.plan, results + pass.state_offset);
      for (std::uint64_t r = 0; r < rows; ++r) StoreRow(op, a.dtype, r, StateOf(op, a.dtype, v, r), values);
    }
    result.values.push_back(std::move(values));
  }
  return result;
}

}  // namespace tally::cuda
