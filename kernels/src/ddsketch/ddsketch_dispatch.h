// The launcher of DDSketch's counting kernel, one instantiation per dtype
// (ddsketch.cu); the host planning in ddsketch_api.cc calls it. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tally::kernels::ddsketch {

template <typename T>
struct DdSketchPasses {
  // Bucket counts into counts[2 * span + 3] (zeroed by the caller): see
  // DdSketchCountKernel.
  [[nodiscard]] static cudaError_t Count(const T* data, std::uint64_t n, double multiplier, std::int32_t min_index,
                                         std::int32_t span, unsigned long long* counts, cudaStream_t stream);
};

}  // namespace tally::kernels::ddsketch
