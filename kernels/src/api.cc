// The host API of tally/kernels/aggregate.h: plan checks, the state layout,
// and the one dispatch over dtype to the per-dtype launchers.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "exact/exact_dispatch.h"
#include "fold/fold_dispatch.h"
#include "grid/dispatch.h"
#include "policy.cuh"
#include "tally/kernels/aggregate.h"
#include "tally/kernels/cuda_error.h"
#include "tally/rules/agg/registry.h"

namespace tally::kernels {
namespace {

using rules::Has;
using rules::OpKind;

// The ops of `mask` the registry computes from exact sums for `dtype`
// (rules::agg::ExactFor), and those of them that need the squares' too.
rules::OpMask ExactOfRegistry(rules::OpMask mask, rules::DType dtype, bool squares) {
  rules::OpMask out = 0;
  // A mask holds the kinds below its width (the fused and fold passes' ops).
  constexpr int kKinds = std::min<int>(rules::kNumOpKinds, sizeof(rules::OpMask) * 8);
  for (int k = 0; k < kKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    if (!Has(mask, kind)) continue;
    const rules::agg::Function& f = rules::agg::Of(kind);
    if (rules::agg::ExactFor(f, dtype) && (!squares || f.exact_squares)) out |= rules::Bit(kind);
  }
  return out;
}

// The ops before kNanSum, the NaN-skipping ones, and the fold pass's.
constexpr rules::OpMask kAllOps = ((rules::OpMask{1} << rules::kNumKernelOpKinds) - 1) | kNanOps | kFoldOps;

// The plan the fused kernels run: the ops but the fold pass's. With a
// validity mask the fused pass stores each row's valid elements, which
// all() reads, so a masked plan of fold ops alone keeps a fused pass of
// count only. Its ops are 0 when there is nothing for it to do.
AggregatePlan FusedPart(const AggregatePlan& plan) {
  AggregatePlan fused = plan;
  const rules::OpMask exact = ExactOps(plan);
  fused.ops = plan.ops & ~kFoldOps & ~exact;
  // The exact pass counts a masked array's valid elements itself.
  if (exact != 0 && plan.validity != nullptr) fused.ops &= ~rules::Bit(OpKind::kCount);
  if (fused.ops == 0 && plan.validity != nullptr && exact == 0) fused.ops = rules::Bit(OpKind::kCount);
  if (fused.ops == rules::Bit(OpKind::kCount) && plan.validity == nullptr && fused.ops != plan.ops) fused.ops = 0;
  return fused;
}

cudaError_t Invalid(const char* why) {
  return cuda::Record(cudaErrorInvalidValue, why, __FILE__, __LINE__);
}

cudaError_t CurrentDevice(detail::DeviceInfo* info) {
  int dev = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&dev));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&info->sms, cudaDevAttrMultiProcessorCount, dev));
  return cudaSuccess;
}

}  // namespace

cudaError_t Validate(const AggregatePlan& plan) {
  switch (plan.dtype) {
    case rules::DType::kFloat32: case rules::DType::kFloat64: case rules::DType::kInt32:
    case rules::DType::kInt64: case rules::DType::kUInt32: case rules::DType::kUInt8: case rules::DType::kInt8:
    case rules::DType::kInt16: case rules::DType::kUInt16: case rules::DType::kUInt64: case rules::DType::kBool:
    case rules::DType::kFloat16: case rules::DType::kBFloat16:
      break;
    default: return Invalid("plan.dtype is not a v1 dtype");
  }
  if (plan.ops == 0 || (plan.ops & ~kAllOps) != 0) return Invalid("plan.ops is empty or unknown");
  if ((plan.ops & kNanOps) != 0 && !rules::IsFloat(plan.dtype))
    return Invalid("NaN-skipping ops need a float dtype (on integers they are the plain ops)");
  if (reinterpret_cast<std::uintptr_t>(plan.validity) % 4 != 0)
    return Invalid("plan.validity is not 4-byte aligned");
  if (Has(plan.ops, OpKind::kHistogram)) {
    const rules::HistogramSpec& h = plan.histogram;
    if (h.bins < 1 || h.bins > rules::kMaxHistogramBins) return Invalid("histogram.bins not in 1..65536");
    if (!std::isfinite(h.lo) || !std::isfinite(h.hi) || !(h.lo < h.hi))
      return Invalid("histogram range must be finite with lo < hi");
  }
  if (plan.row_length != 0 && plan.length % plan.row_length != 0)
    return Invalid("row_length must divide length");
  return cudaSuccess;
}

rules::OpMask ExactOps(const AggregatePlan& plan) {
  if (!plan.exact_sums) return 0;
  // An integer sum is the native one, modulo 2^64 (numpy's); its means,
  // variances and sums of squares come from exact sums, as a float's do.
  return ExactOfRegistry(plan.ops, plan.dtype, false);
}

std::uint64_t RowsOf(const AggregatePlan& plan) {
  return plan.row_length == 0 ? 1 : plan.length / plan.row_length;
}

ResultLayout LayoutOf(const AggregatePlan& plan) {
  ResultLayout l;
  l.rows = RowsOf(plan);
  const std::size_t r = static_cast<std::size_t>(l.rows);
  std::size_t at = 0;
  auto take = [&](bool want, std::size_t bytes_per_row) {
    if (!want) return ResultLayout::kAbsent;
    const std::size_t off = at;
    at += (r * bytes_per_row + 255) / 256 * 256;  // each array 256-byte aligned
    return off;
  };
  // The fields the fused pass writes: its own ops' (the exact pass keeps
  // its own states below).
  const AggregatePlan fused = FusedPart(plan);
  const rules::OpMask m = fused.ops | (plan.ops & kFoldOps);
  l.sum = take(Has(m, OpKind::kSum), 8);
  l.min = take(Has(m, OpKind::kMin), 8);
  l.max = take(Has(m, OpKind::kMax), 8);
  l.moments = take(Has(m, OpKind::kMean) || Has(m, OpKind::kVariance) || Has(m, OpKind::kStddev),
                   sizeof(rules::Moments));
  l.sum_squares = take(Has(m, OpKind::kSumSquares), 8);
  l.argmin = take(Has(m, OpKind::kArgmin), 8);
  l.argmin_value = take(Has(m, OpKind::kArgmin), 8);
  l.argmax = take(Has(m, OpKind::kArgmax), 8);
  l.argmax_value = take(Has(m, OpKind::kArgmax), 8);
  if (Has(m, OpKind::kHistogram)) {
    l.histogram_stride = plan.histogram.bins + 3;
    l.histograms = take(true, std::size_t{8} * l.histogram_stride);
  }
  l.count = take(plan.validity != nullptr && fused.ops != 0, 8);
  l.nan_count = take((m & kNanOps) != 0, 8);
  l.nan_sum = take(Has(m, OpKind::kNanSum), 8);
  l.nan_min = take(Has(m, OpKind::kNanMin), 8);
  l.nan_max = take(Has(m, OpKind::kNanMax), 8);
  l.nan_moments = take(Has(m, OpKind::kNanMean) || Has(m, OpKind::kNanVariance) ||
                           Has(m, OpKind::kNanStddev),
                       sizeof(rules::Moments));
  l.nan_argmin = take(Has(m, OpKind::kNanArgmin), 8);
  l.nan_argmin_value = take(Has(m, OpKind::kNanArgmin), 8);
  l.nan_argmax = take(Has(m, OpKind::kNanArgmax), 8);
  l.nan_argmax_value = take(Has(m, OpKind::kNanArgmax), 8);
  l.product = take(Has(m, OpKind::kProduct), 8);
  l.nonzero = take(Has(m, OpKind::kCountNonzero), 8);
  const rules::OpMask exact = ExactOps(plan);
  l.exact_sum = take(exact != 0, detail::kExactStateBytes);
  l.exact_squares = take(ExactOfRegistry(exact, plan.dtype, true) != 0, detail::kExactStateBytes);
  l.bytes = at;
  return l;
}

cudaError_t ScratchBytes(const AggregatePlan& plan, std::uint64_t max_chunk_elements,
                         std::size_t* bytes) {
  if (bytes == nullptr) return Invalid("bytes is null");
  TALLY_CUDA_TRY(Validate(plan));
  *bytes = 0;
  if (max_chunk_elements == 0 && plan.row_length != 0) return cudaSuccess;
  detail::DeviceInfo dev{};
  TALLY_CUDA_TRY(CurrentDevice(&dev));
  // The passes run one after the other on the stream: the larger scratch.
  const AggregatePlan fused = FusedPart(plan);
  if (fused.ops != 0) {
    TALLY_CUDA_TRY(rules::VisitDType(plan.dtype, [&](auto d) {
      return detail::ScratchBytesFor<decltype(d)::value>(fused, max_chunk_elements, dev, bytes);
    }));
  }
  if ((plan.ops & kFoldOps) != 0) {
    const std::size_t fold = detail::FoldScratch(plan, max_chunk_elements);
    if (fold > *bytes) *bytes = fold;
  }
  return cudaSuccess;
}

cudaError_t Accumulate(const AggregatePlan& plan, const void* d_chunk, std::uint64_t elements,
                       std::uint64_t offset, void* d_state, void* d_scratch,
                       std::size_t scratch_bytes, cudaStream_t stream) {
  TALLY_CUDA_TRY(Validate(plan));
  if (offset > plan.length || elements > plan.length - offset)
    return Invalid("chunk [offset, offset + elements) outside the array");
  if (d_state == nullptr || (elements > 0 && d_chunk == nullptr)) return Invalid("null pointer");
  if (elements == 0 && !(plan.row_length == 0 && offset == 0)) return cudaSuccess;
  detail::DeviceInfo dev{};
  TALLY_CUDA_TRY(CurrentDevice(&dev));
  const ResultLayout lay = LayoutOf(plan);
  auto* state = static_cast<unsigned char*>(d_state);
  const bool exact = lay.exact_sum != ResultLayout::kAbsent;
  detail::ExactPass pass;
  if (exact) {
    pass.sum_state = state + lay.exact_sum;
    if (lay.exact_squares != ResultLayout::kAbsent) pass.squares_state = state + lay.exact_squares;
    pass.validity = plan.validity;
    TALLY_CUDA_TRY(detail::StartExact(plan, pass, offset, stream));
  }
  // The fused kernels write their fields at the whole plan's offsets (lay),
  // and take the exact pass inside where they can: a plan of exact sums
  // and other ops (sum, max and a histogram) then reads its data once.
  const AggregatePlan fused = FusedPart(plan);
  if (fused.ops != 0) {
    detail::ExactPass* inside = exact ? &pass : nullptr;  // LaunchAccumulate says where it takes it
    TALLY_CUDA_TRY(rules::VisitDType(plan.dtype, [&](auto d) {
      return detail::LaunchAccumulate<decltype(d)::value>(fused, lay, d_chunk, elements, offset, d_state,
                                                          d_scratch, scratch_bytes, dev, stream, inside);
    }));
  }
  if (Has(plan.ops, OpKind::kProduct)) {
    TALLY_CUDA_TRY(rules::VisitDType(plan.dtype, [&](auto d) {
      return detail::LaunchProduct<decltype(d)::value>(plan, d_chunk, elements, offset, state + lay.product,
                                                       d_scratch, scratch_bytes, dev, stream);
    }));
  }
  if (Has(plan.ops, OpKind::kCountNonzero)) {
    TALLY_CUDA_TRY(detail::LaunchNonzero(plan, d_chunk, elements, offset, state + lay.nonzero, d_scratch,
                                         scratch_bytes, dev, stream));
  }
  if (exact && !pass.fused) TALLY_CUDA_TRY(detail::RunExact(plan, pass, d_chunk, elements, offset, dev, stream));
  return cudaSuccess;
}

cudaError_t Finalize(const AggregatePlan& plan, const void* d_state, void* h_result,
                     cudaStream_t stream) {
  const ResultLayout lay = LayoutOf(plan);
  if (lay.bytes == 0) return cudaSuccess;
  if (d_state == nullptr || h_result == nullptr) return Invalid("null pointer");
  TALLY_CUDA_TRY(cudaMemcpyAsync(h_result, d_state, lay.bytes, cudaMemcpyDeviceToHost, stream));
  return cudaSuccess;
}

cudaError_t Aggregate(const AggregatePlan& plan, const void* d_data, void* d_state, void* d_scratch,
                      std::size_t scratch_bytes, void* h_result, cudaStream_t stream) {
  // The latency path: a small whole array is one block, which may write the
  // results straight into a pinned h_result (no copy afterwards; d_state is
  // then left as it was). Measured: 1K float32 sum to host, see
  // docs/performance.md.
  // Not for exact sums: their pass adds into its state with atomics, which
  // mapped host memory need not support.
  const bool small = plan.row_length == 0 && !Has(plan.ops, OpKind::kHistogram) && ExactOps(plan) == 0 &&
                     plan.length * rules::SizeOf(plan.dtype) <=
                         static_cast<std::uint64_t>(detail::Policy::kMinBytesPerBlock);
  if (small && h_result != nullptr) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, h_result) == cudaSuccess &&
        attr.type == cudaMemoryTypeHost && attr.devicePointer != nullptr) {
      return Accumulate(plan, d_data, plan.length, 0, attr.devicePointer, d_scratch, scratch_bytes,
                        stream);
    }
    (void)cudaGetLastError();  // not pinned: take the copy path
  }
  TALLY_CUDA_TRY(
      Accumulate(plan, d_data, plan.length, 0, d_state, d_scratch, scratch_bytes, stream));
  return Finalize(plan, d_state, h_result, stream);
}

}  // namespace tally::kernels
