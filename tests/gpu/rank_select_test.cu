// The rank selection (kernels/src/select/rank_select.cuh) against a sorted
// copy: 32- and 64-bit keys, arrays of 1 key to a few million, ranks at
// both ends, repeated and next to each other, up to kMaxRankSelect of them;
// keys spread over every bit, few distinct values, all equal, and packed
// into a narrow range across the top digit's boundary (so that one digit
// holds every key and the groups split late). Top-k's words (TopEntryAt)
// with tied keys, against the words sorted on the host. A rank past the
// array is reported lost, not answered.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "select/rank_select.cuh"
#include "tally/kernels/cuda_error.h"
#include "tests/gpu/gpu_test_util.h"

namespace tally::kernels::select {
namespace {

enum class Spread { kAnyBits, kFewDistinct, kAllEqual, kNarrow };

template <typename K>
std::vector<K> Keys(std::size_t n, Spread spread, std::mt19937_64& rng) {
  std::vector<K> keys(n);
  const K middle = static_cast<K>(K{1} << (8 * sizeof(K) - 1));
  for (K& k : keys) {
    switch (spread) {
      case Spread::kAnyBits: k = static_cast<K>(rng()); break;
      case Spread::kFewDistinct: k = static_cast<K>((rng() % 5) * (K{1} << (8 * sizeof(K) - 4))); break;
      case Spread::kAllEqual: k = static_cast<K>(0x5A5A5A5A5A5A5A5Aull); break;
      case Spread::kNarrow: k = static_cast<K>(middle - 300 + rng() % 600); break;
    }
  }
  return keys;
}

// Up to kMaxRankSelect ranks below n, ascending, with the ends, neighbours
// and repeats among them.
std::vector<std::uint64_t> Ranks(std::uint64_t n, std::mt19937_64& rng) {
  std::vector<std::uint64_t> r = {0, n - 1, n / 2, n / 2 > 0 ? n / 2 - 1 : 0, n / 2};
  while (r.size() < static_cast<std::size_t>(kMaxRankSelect)) r.push_back(rng() % n);
  std::sort(r.begin(), r.end());
  return r;
}

template <typename K, typename Source>
void Select(Source source, std::uint32_t n, const std::vector<std::uint64_t>& ranks, std::vector<K>* keys,
            std::uint32_t* lost) {
  RankSelect<K>* state = nullptr;
  CUDA_OK(cudaMalloc(&state, sizeof(RankSelect<K>)));
  CUDA_OK(cudaMemset(state, 0xA5, sizeof(RankSelect<K>)));  // poisoned, then zeroed as callers do
  CUDA_OK(cudaMemset(state, 0, sizeof(RankSelect<K>)));
  RankArgs args;
  args.count = static_cast<std::uint32_t>(ranks.size());
  std::copy(ranks.begin(), ranks.end(), args.rank);
  CUDA_OK(LaunchRankSelect<K>(source, n, args, state, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  keys->resize(ranks.size());
  CUDA_OK(cudaMemcpy(keys->data(), state->key, sizeof(K) * ranks.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lost, &state->lost, sizeof *lost, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(state));
}

template <typename K>
void CheckKeys() {
  auto& rng = testing::Rng();
  std::vector<std::size_t> sizes = {1, 2, 255, 4096, 65536 + 7, (1u << 20) + 3};
  if (!testing::Small()) sizes.push_back(std::size_t{5} << 20);
  for (const Spread spread : {Spread::kAnyBits, Spread::kFewDistinct, Spread::kAllEqual, Spread::kNarrow}) {
    for (const std::size_t n : sizes) {
      SCOPED_TRACE("n " + std::to_string(n) + ", spread " + std::to_string(static_cast<int>(spread)));
      const std::vector<K> keys = Keys<K>(n, spread, rng);
      std::vector<K> sorted = keys;
      std::sort(sorted.begin(), sorted.end());
      K* d_keys = nullptr;
      CUDA_OK(cudaMalloc(&d_keys, sizeof(K) * n));
      CUDA_OK(cudaMemcpy(d_keys, keys.data(), sizeof(K) * n, cudaMemcpyHostToDevice));
      for (int round = 0; round < 3; ++round) {
        const std::vector<std::uint64_t> ranks = round == 0 ? std::vector<std::uint64_t>{n / 2} : Ranks(n, rng);
        std::vector<K> got;
        std::uint32_t lost = 1;
        Select<K>(KeysAt<K>{d_keys}, static_cast<std::uint32_t>(n), ranks, &got, &lost);
        EXPECT_EQ(lost, 0u);
        for (std::size_t i = 0; i < ranks.size(); ++i) {
          ASSERT_EQ(got[i], sorted[ranks[i]]) << "rank " << ranks[i];
        }
      }
      CUDA_OK(cudaFree(d_keys));
    }
  }
}

TEST(RankSelectGpu, KeysOf32BitsMatchASortedCopy) {
  TALLY_REQUIRE_GPU("the rank selection");
  CheckKeys<std::uint32_t>();
}

TEST(RankSelectGpu, KeysOf64BitsMatchASortedCopy) {
  TALLY_REQUIRE_GPU("the rank selection");
  CheckKeys<std::uint64_t>();
}

TEST(RankSelectGpu, TopKWordsBreakTiesByTheSmallerIndex) {
  TALLY_REQUIRE_GPU("the rank selection");
  auto& rng = testing::Rng();
  for (const std::size_t n : {std::size_t{1}, std::size_t{3000}, std::size_t{200000}}) {
    SCOPED_TRACE(n);
    std::vector<std::uint32_t> keys(n), index(n);
    std::vector<std::uint64_t> words(n);
    for (std::size_t i = 0; i < n; ++i) {
      keys[i] = static_cast<std::uint32_t>(rng() % 7) << 28;  // seven keys, each tied many times
      index[i] = static_cast<std::uint32_t>(rng() % (1u << 28));
      words[i] = (std::uint64_t{keys[i]} << 32) | static_cast<std::uint32_t>(~index[i]);
    }
    std::vector<std::uint64_t> sorted = words;
    std::sort(sorted.begin(), sorted.end());
    std::uint32_t *d_keys = nullptr, *d_index = nullptr;
    CUDA_OK(cudaMalloc(&d_keys, sizeof(std::uint32_t) * n));
    CUDA_OK(cudaMalloc(&d_index, sizeof(std::uint32_t) * n));
    CUDA_OK(cudaMemcpy(d_keys, keys.data(), sizeof(std::uint32_t) * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_index, index.data(), sizeof(std::uint32_t) * n, cudaMemcpyHostToDevice));
    const std::vector<std::uint64_t> ranks = Ranks(n, rng);
    std::vector<std::uint64_t> got;
    std::uint32_t lost = 1;
    Select<std::uint64_t>(TopEntryAt{d_keys, d_index}, static_cast<std::uint32_t>(n), ranks, &got, &lost);
    EXPECT_EQ(lost, 0u);
    for (std::size_t i = 0; i < ranks.size(); ++i) ASSERT_EQ(got[i], sorted[ranks[i]]) << "rank " << ranks[i];
    CUDA_OK(cudaFree(d_keys));
    CUDA_OK(cudaFree(d_index));
  }
}

TEST(RankSelectGpu, ARankPastTheKeysIsLost) {
  TALLY_REQUIRE_GPU("the rank selection");
  auto& rng = testing::Rng();
  const std::vector<std::uint32_t> keys = Keys<std::uint32_t>(1000, Spread::kAnyBits, rng);
  std::uint32_t* d_keys = nullptr;
  CUDA_OK(cudaMalloc(&d_keys, sizeof(std::uint32_t) * keys.size()));
  CUDA_OK(cudaMemcpy(d_keys, keys.data(), sizeof(std::uint32_t) * keys.size(), cudaMemcpyHostToDevice));
  std::vector<std::uint32_t> got;
  std::uint32_t lost = 0;
  Select<std::uint32_t>(KeysAt<std::uint32_t>{d_keys}, 1000, {3, 1000}, &got, &lost);
  EXPECT_EQ(lost, 1u);
  CUDA_OK(cudaFree(d_keys));
}

}  // namespace
}  // namespace tally::kernels::select
