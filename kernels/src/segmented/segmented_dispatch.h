// The per-dtype entry point of tally/kernels/segmented.h that the host API
// dispatches to (through rules::VisitDType in segmented_api.cc), defined in
// segmented_kernels.cuh and instantiated once per dtype in
// segmented_<dtype>.cu; and the scratch layout both sides agree on. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tally/kernels/segmented.h"

namespace tally::kernels::detail {

// Which kernel variant a plan takes and where its scratch arrays lie.
// Fields, in this order: sum, dsum, min, max (8 bytes each).
struct SegmentedScratch {
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  enum Field { kSum, kDsum, kMin, kMax, kFields };
  // Merge-path tiles of the plan (SegmentedPolicy::TileWeight each).
  std::int64_t tiles = 0;
  // The full variant (min and max, and the float64 sum of integer dtypes)
  // or the lean one (the sum alone, which for float dtypes is also dsum).
  bool full = false;
  // Byte offsets: the tiles' merge-path starts (int64[tiles + 1][2]: ends
  // and elements before each tile), and per field the tiles' carries and
  // heads (8 bytes x tiles each).
  std::size_t splits = kAbsent;
  std::size_t carry[kFields] = {kAbsent, kAbsent, kAbsent, kAbsent};
  std::size_t head[kFields] = {kAbsent, kAbsent, kAbsent, kAbsent};
  std::size_t bytes = 0;
};

// For a plan that passed Validate.
SegmentedScratch ScratchLayoutOf(const SegmentedPlan& plan);

template <rules::DType D>
cudaError_t LaunchSegments(const SegmentedPlan& plan, const SegmentedLayout& layout,
                           const SegmentedScratch& scratch_layout, const void* data,
                           const std::int64_t* offsets, void* result, void* scratch, int sms,
                           cudaStream_t stream);

}  // namespace tally::kernels::detail
