// The group-by slots' arithmetic in shared memory (kernels/src/group/
// dense_slots.cuh).
// AddWideShared: 64-bit words of shared memory added by two 32-bit
// atomics, each add carrying its own wrap of the low half, hold the sum
// modulo 2^64, as a 64-bit atomicAdd would. Every thread of a block adds
// its values into few words (so that lanes collide on one address), values
// chosen to carry: low halves of all ones, two's complement negatives, high
// halves only, zeros, and the slots' own kind (a 32-bit low word plus a
// count of one at bit 48).
// Extremes<float>: a float32 column's extremes kept as 32-bit words order
// as the floats do and widen to the words OrderedDouble gives the same
// values as doubles (the global slots' and the host's), sentinels kept.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "group/dense_slots.cuh"
#include "tally/kernels/cuda_error.h"
#include "tally/rules/keyed_sums.h"
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
    case 4: return (rng() % (1ull << 32)) + (1ull << PackedRows::kCountShift);  // a slot's low word and count
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

// out[i] = Extremes<float>'s word of values[i], widened, and words[i] the
// word itself.
__global__ void WidenedFloatExtremes(const float* values, int n, unsigned long long* out, unsigned* words) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    words[i] = Extremes<float>::Of(values[i]);
    out[i] = Extremes<float>::Widened(words[i]);
  }
}
__global__ void WidenedSentinels(unsigned long long* out) {
  out[0] = Extremes<float>::Widened(~0u);
  out[1] = Extremes<float>::Widened(0u);
}

TEST(SharedAddsGpu, FloatExtremesOrderAsTheFloatsAndWidenToTheDoublesWords) {
  TALLY_REQUIRE_GPU("Extremes<float>");
  auto& rng = tally::testing::Rng();
  using L = std::numeric_limits<float>;
  std::vector<float> values = {-L::infinity(), -L::max(), -1.5f, -L::min(), -L::denorm_min(), -0.0f, 0.0f,
                               L::denorm_min(), L::min(), 1e-38f, 1.0f, 3.5e38f, L::max(), L::infinity()};
  std::uniform_int_distribution<std::uint32_t> bits;
  while (values.size() < 100000) {
    const std::uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, sizeof f);
    if (!std::isnan(f)) values.push_back(f);
  }
  const int n = static_cast<int>(values.size());
  float* d_values = nullptr;
  unsigned long long* d_out = nullptr;
  unsigned* d_words = nullptr;
  CUDA_OK(cudaMalloc(&d_values, values.size() * sizeof(float)));
  CUDA_OK(cudaMalloc(&d_out, (values.size() + 2) * sizeof(unsigned long long)));
  CUDA_OK(cudaMalloc(&d_words, values.size() * sizeof(unsigned)));
  CUDA_OK(cudaMemcpy(d_values, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_out, 0xA5, (values.size() + 2) * sizeof(unsigned long long)));  // poisoned
  WidenedFloatExtremes<<<(n + 255) / 256, 256>>>(d_values, n, d_out, d_words);
  WidenedSentinels<<<1, 1>>>(d_out + n);
  CUDA_OK(cudaGetLastError());
  std::vector<unsigned long long> widened(values.size() + 2);
  std::vector<unsigned> words(values.size());
  CUDA_OK(cudaMemcpy(widened.data(), d_out, widened.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(words.data(), d_words, words.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_values));
  CUDA_OK(cudaFree(d_out));
  CUDA_OK(cudaFree(d_words));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(widened[i], rules::keyed::OrderedDouble(static_cast<double>(values[i]))) << "value " << values[i];
    ASSERT_NE(words[i], ~0u) << "value " << values[i] << " takes the least's sentinel";
    ASSERT_NE(words[i], 0u) << "value " << values[i] << " takes the greatest's sentinel";
  }
  EXPECT_EQ(widened[n], rules::keyed::kNoLow);
  EXPECT_EQ(widened[n + 1], rules::keyed::kNoHigh);
  // The words order as the floats do, the two zeros one word.
  std::vector<int> order(values.size());
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return values[a] < values[b]; });
  for (int i = 1; i < n; ++i) {
    const float a = values[order[i - 1]], b = values[order[i]];
    if (a == b) {
      ASSERT_EQ(words[order[i - 1]], words[order[i]]) << a << " and " << b;
    } else {
      ASSERT_LT(words[order[i - 1]], words[order[i]]) << a << " and " << b;
    }
  }
}

}  // namespace
}  // namespace tally::kernels::dense
