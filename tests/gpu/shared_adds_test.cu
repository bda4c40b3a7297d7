// AddWideShared (kernels/src/group/dense_slots.cuh): 64-bit words of shared
// memory added by two 32-bit atomics, each add carrying its own wrap of the
// low half, hold the sum modulo 2^64, as a 64-bit atomicAdd would. Every
// thread of a block adds its values into few words (so that lanes collide
// on one address), values chosen to carry: low halves of all ones, two's
// complement negatives, high halves only, zeros, and the slots' own kind
// (a 32-bit low word plus a count of one at bit 48).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <vector>

#include "group/dense_slots.cuh"
#include "tally/kernels/cuda_error.h"
#include "tests/gpu/gpu_test_util.h"

namespace tally::kernels::dense {
namespace {

constexpr int kThreads = 512;

// Block b adds values[b][t][i] into word i % words of its own, in shared
// memory, then writes its words to out[b][...].
__global__ void AddIntoShared(const unsigned long long* values, int per_thread, int words, unsigned long long* out) {
  extern __shared__ unsigned long long word[];
  for (int w = threadIdx.x; w < words; w += blockDim.x) word[w] = 0;
  __syncthreads();
  const unsigned long long* mine = values + (std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) * per_thread;
  for (int i = 0; i < per_thread; ++i) AddWideShared(&word[(threadIdx.x + i) % words], mine[i]);
  __syncthreads();
  for (int w = threadIdx.x; w < words; w += blockDim.x) out[std::uint64_t{blockIdx.x} * words + w] = word[w];
}

// A value that makes the adds carry, by kind.
unsigned long long Carrying(std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0: return 0xFFFFFFFFull;                                        // the low half full
    case 1: return ~(rng() % (1ull << 40));                              // a negative of small magnitude
    case 2: return (rng() % (1ull << 32)) << 32;                         // the high half only
    case 3: return 0;
    case 4: return (rng() % (1ull << 32)) + (1ull << Packed::kCountShift);  // a slot's low word and count
    default: return rng();                                               // any bits
  }
}

TEST(SharedAddsGpu, TwoHalvesHoldTheSumModulo2To64) {
  TALLY_REQUIRE_GPU("AddWideShared");
  auto& rng = tally::testing::Rng();
  for (const int words : {1, 3, 32, 1024}) {
    SCOPED_TRACE(words);
    const int blocks = 4, per_thread = 64;
    const std::size_t n = static_cast<std::size_t>(blocks) * kThreads * per_thread;
    std::vector<unsigned long long> values(n);
    for (unsigned long long& v : values) v = Carrying(rng);
    const auto at = [](int i) { return static_cast<std::size_t>(i); };
    std::vector<unsigned long long> want(at(blocks) * at(words), 0);
    for (int b = 0; b < blocks; ++b) {
      for (int t = 0; t < kThreads; ++t) {
        for (int i = 0; i < per_thread; ++i) {
          want[at(b) * at(words) + at((t + i) % words)] += values[(at(b) * kThreads + at(t)) * at(per_thread) + at(i)];
        }
      }
    }
    unsigned long long *d_values = nullptr, *d_out = nullptr;
    CUDA_OK(cudaMalloc(&d_values, n * sizeof(unsigned long long)));
    CUDA_OK(cudaMalloc(&d_out, want.size() * sizeof(unsigned long long)));
    CUDA_OK(cudaMemcpy(d_values, values.data(), n * sizeof(unsigned long long), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_out, 0xA5, want.size() * sizeof(unsigned long long)));  // poisoned
    AddIntoShared<<<blocks, kThreads, words * sizeof(unsigned long long)>>>(d_values, per_thread, words, d_out);
    CUDA_OK(cudaGetLastError());
    std::vector<unsigned long long> got(want.size());
    CUDA_OK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(d_values));
    CUDA_OK(cudaFree(d_out));
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace tally::kernels::dense
