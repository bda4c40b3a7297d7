// tally's GPU reduction of an array in variable-length segments given by CSR
// offsets: sum, min, max and the float64 sum behind mean, per segment, in one
// pass over the data, whatever the mix of segment lengths (empty, one
// element, 2^24 and more). Plain C++ (no nvcc needed to include it).
//
// Usage:
//
//   kernels::SegmentedPlan plan;
//   plan.dtype = rules::DType::kFloat32;
//   plan.ops = rules::Bit(rules::OpKind::kSum) | rules::Bit(rules::OpKind::kMax);
//   plan.length = total_elements;
//   plan.segments = segment_count;        // d_offsets holds segments + 1 int64
//   if (kernels::Validate(plan) != cudaSuccess) ...   // INVALID_ARGUMENT
//   const kernels::SegmentedLayout layout = kernels::LayoutOf(plan);
//   size_t scratch = 0;
//   (void)kernels::SegmentedScratchBytes(plan, &scratch);
//   // caller-owned device memory: d_result (layout.bytes), d_scratch (scratch)
//   kernels::AggregateSegments(plan, d_data, d_offsets, d_result, d_scratch, scratch, stream);
//   // d_result + layout.sum holds Scalar[segments], + layout.max Scalar[segments]
//
// Rules:
// - The offsets are the caller's to check, on the host, before the call:
//   offsets[0] == 0, non-decreasing, offsets[segments] == length. The
//   kernels assume it; offsets that break it read out of bounds.
// - Segment s holds elements [offsets[s], offsets[s + 1]); any of them may be
//   empty, and empty segments may pile up at one offset.
// - Per segment, as numpy reduces: sum in rules::Traits<D>::sum (float64 for
//   every float dtype, int64/uint64 wrapping modulo 2^64 for integers, bool
//   counts True); min and max in rules::Traits<D>::extreme with numpy's NaN
//   rule (a NaN anywhere in the segment gives NaN).
// - kCount stores nothing: count is offsets[s + 1] - offsets[s]. kMean
//   stores dsum, the segment's sum of its elements converted to float64
//   (numpy.mean's accumulator; for float dtypes the same value as sum), and
//   mean = dsum / count.
// - An empty segment gets sum 0 and dsum 0, and min/max stay the identity of
//   the reduction, in the extreme type: for float dtypes min +inf and max
//   -inf, for integer dtypes min the element type's largest and max its
//   smallest value (bool, held as uint8: 255 and 0). numpy has no min/max
//   of an empty segment: the caller refuses those itself.
// - Same input on the same device: bitwise the same results (no
//   floating-point atomics; partial sums combine in an order fixed by the
//   input's shape alone).
// - Nothing here allocates; scratch may be reused by the next call on the
//   same stream. The call is asynchronous on `stream`.
// - Errors come back as cudaError_t (cudaErrorInvalidValue for a bad plan or
//   argument); tally::cuda::LastErrorWhere() says where a CUDA call failed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tally/kernels/aggregate.h"
#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::kernels {

struct SegmentedPlan {
  rules::DType dtype = rules::DType::kFloat32;
  // Any non-empty subset of kSum, kMin, kMax, kMean, kCount.
  rules::OpMask ops = 0;
  std::uint64_t length = 0;    // elements
  std::uint64_t segments = 0;  // offsets has segments + 1 entries
};

// cudaSuccess, or cudaErrorInvalidValue for a dtype outside v1, ops outside
// the subset above, segments == 0 with length != 0, or a size past the
// kernels' limits (length + segments up to 2^40).
[[nodiscard]] cudaError_t Validate(const SegmentedPlan& plan);

// The result's layout in device memory: structure of arrays, one array per
// stored field, each `segments` long, at the byte offsets below (kAbsent
// when the plan does not need the field), each 256-byte aligned.
//   sum        Scalar[segments]   (kSum; Scalar's member for the dtype)
//   min, max   Scalar[segments]   (kMin, kMax; the extreme in Scalar)
//   dsum       double[segments]   (kMean; the float64 sum)
struct SegmentedLayout {
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  std::uint64_t segments = 0;
  std::size_t sum = kAbsent, min = kAbsent, max = kAbsent, dsum = kAbsent;
  std::size_t bytes = 0;
};

SegmentedLayout LayoutOf(const SegmentedPlan& plan);

// Device scratch one AggregateSegments of this plan needs (it depends on
// length and segments only, not on the device).
[[nodiscard]] cudaError_t SegmentedScratchBytes(const SegmentedPlan& plan, std::size_t* bytes);

// Writes the per-segment results into d_result (device, LayoutOf(plan).bytes).
// d_data: `length` elements on the device, aligned to the element size;
// d_offsets: segments + 1 int64 on the device, checked by the caller (above).
[[nodiscard]] cudaError_t AggregateSegments(const SegmentedPlan& plan, const void* d_data,
                                            const std::int64_t* d_offsets, void* d_result,
                                            void* d_scratch, std::size_t scratch_bytes,
                                            cudaStream_t stream);

}  // namespace tally::kernels
