// The launcher of DDSketch's counting kernel, one instantiation per dtype
// (ddsketch.cu); the host planning in ddsketch_api.cc calls it. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tally::kernels::ddsketch {

// counts[2 * span + kTailSlots]: the negative magnitudes' span of index
// counters, the positive ones', then these: zero, -inf, +inf, and each
// sign's lowest and highest counted index, as max(span - i) and max(i + 1)
// (0: none), so that the zeroed counters start them and the host copies
// back only the counters between them.
inline constexpr std::int32_t kZeroSlot = 0, kNegativeInfSlot = 1, kPositiveInfSlot = 2;
inline constexpr std::int32_t kFirstEdgeSlot = 3;  // sign s: lowest at 3 + 2 s, highest at 4 + 2 s
inline constexpr std::int32_t kEdgeSlots = 4;
inline constexpr std::int32_t kTailSlots = kFirstEdgeSlot + kEdgeSlots;

template <typename T>
struct DdSketchPasses {
  // Bucket counts into counts (zeroed by the caller): see
  // DdSketchCountKernel.
  [[nodiscard]] static cudaError_t Count(const T* data, std::uint64_t n, double multiplier, std::int32_t min_index,
                                         std::int32_t span, unsigned long long* counts, cudaStream_t stream);
};

// Each sign's lowest and highest counted index into the edge slots, after
// Count.
[[nodiscard]] cudaError_t CountEdges(std::int32_t span, unsigned long long* counts, cudaStream_t stream);

}  // namespace tally::kernels::ddsketch
