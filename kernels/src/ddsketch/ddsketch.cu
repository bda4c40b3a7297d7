// DDSketch's launcher for every dtype the passes take (ddsketch_dispatch.h).
#include <cuda_runtime.h>

#include "ddsketch/ddsketch_dispatch.h"
#include "ddsketch/ddsketch_kernels.cuh"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::ddsketch {

template <typename T>
cudaError_t DdSketchPasses<T>::Count(const T* data, std::uint64_t n, double multiplier, std::int32_t min_index,
                                     std::int32_t span, unsigned long long* counts, cudaStream_t stream) {
  auto* kernel = DdSketchCountKernel<T>;
  int device = 0, sms = 0, per_sm = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&device));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  constexpr std::size_t kShared = (2 * D::kWindow + 3) * sizeof(std::uint32_t);
  TALLY_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared));
  TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, D::kThreads, kShared));
  const int blocks = sms * (per_sm > 0 ? per_sm : 1);
  const bool aligned = reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
  kernel<<<blocks, D::kThreads, kShared, stream>>>(data, n, aligned, multiplier, min_index, span, counts);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

template struct DdSketchPasses<float>;
template struct DdSketchPasses<double>;
template struct DdSketchPasses<std::int32_t>;
template struct DdSketchPasses<std::int64_t>;
template struct DdSketchPasses<std::uint32_t>;
template struct DdSketchPasses<std::uint64_t>;

}  // namespace tally::kernels::ddsketch
