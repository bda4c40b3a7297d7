// DDSketch's launcher for every dtype the passes take (ddsketch_dispatch.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "ddsketch/ddsketch_dispatch.h"
#include "ddsketch/ddsketch_kernels.cuh"
#include "select/scratch.h"
#include "shared_memory.cuh"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::ddsketch {

template <typename T>
cudaError_t DdSketchPasses<T>::Count(const T* data, std::uint64_t n, double multiplier, std::int32_t min_index,
                                     std::int32_t span, unsigned long long* counts, cudaStream_t stream) {
  auto* kernel = DdSketchCountKernel<T>;
  int device = 0, sms = 0, per_sm = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&device));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // The window: D::kBinades binades of indices per sign (multiplier
  // indices a binade), at least D::kWindow, at most what one block's
  // shared memory holds.
  int shared_max = 0;
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&shared_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // (Less 1 KB: the kernel's static shared memory comes out of the same.)
  const auto fits =
      static_cast<std::int32_t>(((static_cast<std::size_t>(shared_max) - 1024) / sizeof(std::uint32_t) - 4) / 2);
  const auto wanted = static_cast<std::int32_t>(std::min(1e9, std::ceil(D::kBinades * multiplier)));
  const std::int32_t w = std::min(fits, std::max(D::kWindow, wanted));
  const std::size_t shared = (2 * static_cast<std::size_t>(w) + 4) * sizeof(std::uint32_t);  // and the trash slot
  TALLY_CUDA_TRY(detail::AllowMostSharedMemory(kernel));
  TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, D::kThreads, shared));
  const int blocks = sms * (per_sm > 0 ? per_sm : 1);
  const bool aligned = reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
  kernel<<<blocks, D::kThreads, shared, stream>>>(data, n, aligned, multiplier, min_index, span, w, counts);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

TALLY_INSTANTIATE_FOR_SELECTABLE(DdSketchPasses);

cudaError_t CountEdges(std::int32_t span, unsigned long long* counts, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // At least 16 counters a thread, at most 64 blocks: 1%'s 2 x 100,200
  // counters are read in microseconds.
  const auto total = 2 * static_cast<std::uint64_t>(span);
  const int blocks = static_cast<int>(std::min<std::uint64_t>(64, (total + kThreads * 16 - 1) / (kThreads * 16)));
  DdSketchEdgesKernel<kThreads><<<std::max(blocks, 1), kThreads, 0, stream>>>(span, counts);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace tally::kernels::ddsketch
