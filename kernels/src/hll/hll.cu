// HyperLogLog's launchers for every dtype the passes take (hll_dispatch.h).
#include <cuda_runtime.h>

#include "hll/hll_dispatch.h"
#include "hll/hll_kernels.cuh"
#include "select/scratch.h"
#include "shared_memory.cuh"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::hll {
namespace {

bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Blocks of `kernel` (`threads` each) resident at once on the current device.
template <typename Kernel>
cudaError_t Resident(Kernel kernel, int threads, std::size_t shared, int* blocks) {
  int device = 0, sms = 0, per_sm = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&device));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared));
  *blocks = sms * (per_sm > 0 ? per_sm : 1);
  return cudaSuccess;
}

}  // namespace

template <typename T>
cudaError_t HllPasses<T>::Registers(const T* data, std::uint64_t n, std::uint32_t precision,
                                    std::uint32_t* registers, cudaStream_t stream) {
  const auto launch = [&](auto kind, std::size_t shared) -> cudaError_t {
    auto* kernel = HllRegistersKernel<T, decltype(kind)::value>;
    constexpr int kThreads = kRegisterThreads<decltype(kind)::value>;
    int blocks = 0;
    TALLY_CUDA_TRY(detail::AllowMostSharedMemory(kernel));
    TALLY_CUDA_TRY(Resident(kernel, kThreads, shared, &blocks));
    kernel<<<blocks, kThreads, shared, stream>>>(data, n, Aligned16(data), precision, registers);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  };
  const std::size_t m = std::size_t{1} << precision;
  if (precision <= H::kMaxWordPrecision) {
    return launch(std::integral_constant<RegisterHome, RegisterHome::kSharedWords>{}, m * sizeof(std::uint32_t));
  }
  if (precision <= H::kMaxBytePrecision) {
    return launch(std::integral_constant<RegisterHome, RegisterHome::kSharedBytes>{}, m);
  }
  return launch(std::integral_constant<RegisterHome, RegisterHome::kGlobal>{}, 0);
}

template <typename T>
cudaError_t HllPasses<T>::Exact(const T* data, std::uint64_t n, std::uint64_t* set, std::uint32_t slots,
                                std::uint32_t limit, std::uint32_t* counters, cudaStream_t stream) {
  int blocks = 0;
  TALLY_CUDA_TRY(Resident(HllExactKernel<T>, H::kThreads, 0, &blocks));
  HllExactKernel<T><<<blocks, H::kThreads, 0, stream>>>(data, n, Aligned16(data), set, slots, limit, counters);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

cudaError_t PackRegisters(const std::uint32_t* registers, std::uint8_t* out, std::uint32_t m, cudaStream_t stream) {
  PackRegistersKernel<<<(m + 255) / 256, 256, 0, stream>>>(registers, out, m);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

TALLY_INSTANTIATE_FOR_SELECTABLE(HllPasses);

}  // namespace tally::kernels::hll
