// The one way tally's kernels are allowed dynamic shared memory past the
// default 48 KB.
#pragma once

#include <cuda_runtime.h>

#include "tally/kernels/cuda_error.h"

namespace tally::kernels::detail {

// Lets `kernel` launch with as much dynamic shared memory as a block may
// opt in to on the current device. Always that one value, whatever the
// launch needs: the attribute belongs to the kernel, not to a launch, so a
// value per request races with another thread's launch of the same kernel,
// and a launch asking more than the attribute fails (cudaErrorInvalidValue;
// 64 clients grouping by keys of different ranges saw it). The attribute is
// only a bound: a launch's occupancy follows the shared memory it asks.
template <typename Kernel>
cudaError_t AllowMostSharedMemory(Kernel kernel) {
  int device = 0, most = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&device));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  TALLY_CUDA_TRY(cudaFuncGetAttributes(&attributes, kernel));
  TALLY_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      most - static_cast<int>(attributes.sharedSizeBytes)));
  return cudaSuccess;
}

}  // namespace tally::kernels::detail
