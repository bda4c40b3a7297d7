// The host API of tally/kernels/segmented.h: plan checks, the result and
// scratch layouts, and the one dispatch over dtype to the per-dtype launchers.
#include "policy.cuh"
#include "segmented/segmented_dispatch.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/segmented.h"

namespace tally::kernels {
namespace {

using rules::Has;
using rules::OpKind;

constexpr rules::OpMask kSegmentedOps = rules::Bit(OpKind::kSum) | rules::Bit(OpKind::kMin) |
                                        rules::Bit(OpKind::kMax) | rules::Bit(OpKind::kMean) |
                                        rules::Bit(OpKind::kCount);
// length + 8 x segments: the merge weight (at most), counted in int64, with
// room to spare.
constexpr std::uint64_t kMaxItems = std::uint64_t{1} << 40;

cudaError_t Invalid(const char* why) {
  return cuda::Record(cudaErrorInvalidValue, why, __FILE__, __LINE__);
}

bool IsV1DType(rules::DType d) {
  for (const rules::DType v : rules::kAllDTypes)
    if (v == d) return true;
  return false;
}

constexpr std::size_t Align256(std::size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

cudaError_t Validate(const SegmentedPlan& plan) {
  if (!IsV1DType(plan.dtype)) return Invalid("plan.dtype is not a v1 dtype");
  if (plan.ops == 0 || (plan.ops & ~kSegmentedOps) != 0)
    return Invalid("plan.ops must be a non-empty subset of sum, min, max, mean, count");
  if (plan.segments == 0 && plan.length != 0)
    return Invalid("plan.segments is 0 but plan.length is not");
  if (plan.length > kMaxItems || plan.segments > kMaxItems - plan.length)
    return Invalid("plan.length + plan.segments over 2^40");
  return cudaSuccess;
}

SegmentedLayout LayoutOf(const SegmentedPlan& plan) {
  SegmentedLayout l;
  l.segments = plan.segments;
  std::size_t at = 0;
  auto take = [&](bool want) {
    if (!want) return SegmentedLayout::kAbsent;
    const std::size_t off = at;
    at += Align256(static_cast<std::size_t>(plan.segments) * 8);
    return off;
  };
  l.sum = take(Has(plan.ops, OpKind::kSum));
  l.min = take(Has(plan.ops, OpKind::kMin));
  l.max = take(Has(plan.ops, OpKind::kMax));
  l.dsum = take(Has(plan.ops, OpKind::kMean));
  l.bytes = at;
  return l;
}

namespace detail {

SegmentedScratch ScratchLayoutOf(const SegmentedPlan& plan) {
  SegmentedScratch s;
  const auto elem = static_cast<int>(rules::SizeOf(plan.dtype));
  const std::uint64_t weight =
      plan.length + plan.segments * static_cast<std::uint64_t>(SegmentedPolicy::EndWeight(elem));
  const auto tile = static_cast<std::uint64_t>(SegmentedPolicy::TileWeight(elem));
  s.tiles = static_cast<std::int64_t>((weight + tile - 1) / tile);
  s.full = Has(plan.ops, OpKind::kMin) || Has(plan.ops, OpKind::kMax) ||
           (Has(plan.ops, OpKind::kMean) && !rules::IsFloat(plan.dtype));
  if (s.tiles == 0) return s;
  const std::size_t per_tile = Align256(static_cast<std::size_t>(s.tiles) * 8);
  std::size_t at = 0;
  s.splits = at;
  at += Align256(static_cast<std::size_t>(s.tiles + 1) * 16);
  for (int f = 0; f < SegmentedScratch::kFields; ++f) {
    const bool want = f == SegmentedScratch::kSum ||
                      (s.full && (f != SegmentedScratch::kDsum || !rules::IsFloat(plan.dtype)));
    if (!want) continue;
    s.carry[f] = at;
    at += per_tile;
    s.head[f] = at;
    at += per_tile;
  }
  s.bytes = at;
  return s;
}

}  // namespace detail

cudaError_t SegmentedScratchBytes(const SegmentedPlan& plan, std::size_t* bytes) {
  if (bytes == nullptr) return Invalid("bytes is null");
  TALLY_CUDA_TRY(Validate(plan));
  *bytes = detail::ScratchLayoutOf(plan).bytes;
  return cudaSuccess;
}

cudaError_t AggregateSegments(const SegmentedPlan& plan, const void* d_data,
                              const std::int64_t* d_offsets, void* d_result, void* d_scratch,
                              std::size_t scratch_bytes, cudaStream_t stream) {
  TALLY_CUDA_TRY(Validate(plan));
  const SegmentedLayout lay = LayoutOf(plan);
  // Nothing to write: no segments, or count alone (derived from the offsets).
  if (plan.segments == 0 || lay.bytes == 0) return cudaSuccess;
  if (d_offsets == nullptr || d_result == nullptr || (plan.length > 0 && d_data == nullptr))
    return Invalid("null pointer");
  const detail::SegmentedScratch sl = detail::ScratchLayoutOf(plan);
  if (d_scratch == nullptr || scratch_bytes < sl.bytes)
    return Invalid("scratch smaller than SegmentedScratchBytes");
  int dev = 0, sms = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&dev));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return rules::VisitDType(plan.dtype, [&](auto d) {
    return detail::LaunchSegments<decltype(d)::value>(plan, lay, sl, d_data, d_offsets, d_result,
                                                      d_scratch, sms, stream);
  });
}

}  // namespace tally::kernels
