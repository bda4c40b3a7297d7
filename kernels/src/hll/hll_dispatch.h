// The launchers of HyperLogLog's kernels, one instantiation per dtype
// (hll.cu); the host planning in hll_api.cc calls them. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tally::kernels::hll {

template <typename T>
struct HllPasses {
  // Ranks into registers[2^precision] (zeroed by the caller).
  [[nodiscard]] static cudaError_t Registers(const T* data, std::uint64_t n, std::uint32_t precision,
                                             std::uint32_t* registers, cudaStream_t stream);
  // The distinct hashes into set[slots] (zeroed), while at most `limit`.
  [[nodiscard]] static cudaError_t Exact(const T* data, std::uint64_t n, std::uint64_t* set, std::uint32_t slots,
                                         std::uint32_t limit, std::uint32_t* counters, cudaStream_t stream);
};

// out[i] = registers[i] as a byte.
[[nodiscard]] cudaError_t PackRegisters(const std::uint32_t* registers, std::uint8_t* out, std::uint32_t m,
                                        cudaStream_t stream);

}  // namespace tally::kernels::hll
