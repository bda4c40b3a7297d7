// Rank selection over a few million keys or fewer: the keys at given ranks
// of an unsorted array, exactly, without sorting it. Where only a few ranks
// of a small array are wanted (the sample's window keys, the gathered keys'
// ranks, top-k's threshold and its k-th entry), a CUB sort pays for every
// key's place: each of its onesweep passes costs 9-21 us whatever the
// array's size (Nsight Compute, H200, 65,536 to 2M keys), four passes for
// 32-bit keys. Here each level reads the keys once and counts one digit of
// 8 bits per group of ranks in shared memory, and the last block of the
// level finds each rank's digit: one launch a level, 4 for 32-bit keys.
#pragma once

#include <algorithm>
#include <cstdint>

#include "select/select_dispatch.h"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::select {

inline constexpr int kRankSelectThreads = 256;
inline constexpr int kRankSelectBatch = 8;  // keys a thread loads before counting them
// Blocks of a level at most (2M keys give each thread one batch): each
// block zeroes and adds its counters, so more cost more than they read.
inline constexpr std::uint64_t kRankSelectMaxBlocks = 1024;

// The keys of a plain array.
template <typename K>
struct KeysAt {
  const K* keys;
  __device__ __forceinline__ K operator()(std::uint32_t i) const { return keys[i]; }
};

// Top-k's entries as one word each, key above index complemented: the
// larger word is the larger key, then the smaller index, so the k largest
// words are top-k's answer in its order, and no two are equal.
struct TopEntryAt {
  const std::uint32_t* keys;
  const std::uint32_t* index;
  __device__ __forceinline__ std::uint64_t operator()(std::uint32_t i) const {
    return (std::uint64_t{keys[i]} << 32) | static_cast<std::uint32_t>(~index[i]);
  }
};

// One level: every block counts the digit at `level` (8 bits from the top)
// of each key whose higher digits are some group's, then the last block to
// finish reads the level's counts and, for each rank, the digit holding it
// and the rank among the keys with that digit; then regroups the ranks by
// their digits so far. Ranks (and so keys) ascending keep each group's
// ranks together and the groups' prefixes ascending.
template <typename K, typename Source>
__global__ void __launch_bounds__(kRankSelectThreads)
    RankSelectLevelKernel(Source source, std::uint32_t n, int level, RankArgs args, RankSelect<K>* state) {
  constexpr int kBits = 8 * sizeof(K);
  __shared__ std::uint32_t counts[kMaxRankSelect * kRankDigits];
  __shared__ K prefix[kMaxRankSelect];
  __shared__ bool last;
  const bool given = level == 0 && args.count > 0;
  const std::uint32_t ranks = given ? args.count : state->count;
  if (ranks == 0) return;
  const std::uint32_t groups = level == 0 ? 1 : state->groups;
  for (std::uint32_t j = threadIdx.x; j < groups * kRankDigits; j += blockDim.x) counts[j] = 0;
  for (std::uint32_t j = threadIdx.x; j < groups; j += blockDim.x) prefix[j] = level == 0 ? K{0} : state->prefix[j];
  __syncthreads();
  const int shift = kBits - 8 * (level + 1);
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t base = blockIdx.x * blockDim.x + threadIdx.x; base < n; base += stride * kRankSelectBatch) {
    K key[kRankSelectBatch];
#pragma unroll
    for (int j = 0; j < kRankSelectBatch; ++j) {
      const std::uint64_t i = base + j * stride;
      key[j] = i < n ? source(static_cast<std::uint32_t>(i)) : K{0};
    }
#pragma unroll
    for (int j = 0; j < kRankSelectBatch; ++j) {
      if (base + j * stride >= n) break;
      std::uint32_t g = 0;
      if (level > 0) {
        // The group whose prefix is this key's higher digits, if any.
        const K top = key[j] >> (shift + 8);
        std::uint32_t lo = 0, hi = groups;
        while (lo < hi) {
          const std::uint32_t mid = (lo + hi) / 2;
          if (prefix[mid] <= top) {
            lo = mid + 1;
          } else {
            hi = mid;
          }
        }
        if (lo == 0 || prefix[lo - 1] != top) continue;
        g = lo - 1;
      }
      atomicAdd(&counts[g * kRankDigits + static_cast<std::uint32_t>((key[j] >> shift) & 0xff)], 1u);
    }
  }
  __syncthreads();
  std::uint32_t* const level_counts = &state->counts[level][0][0];
  for (std::uint32_t j = threadIdx.x; j < groups * kRankDigits; j += blockDim.x) {
    if (counts[j] != 0) atomicAdd(&level_counts[j], counts[j]);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&state->finished[level], 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();

  // The last block: a warp per rank, each lane over 8 of the 256 digits.
  const int lane = static_cast<int>(threadIdx.x % 32);
  const auto warps = static_cast<std::uint32_t>(blockDim.x / 32);
  for (std::uint32_t r = threadIdx.x / 32; r < ranks; r += warps) {
    const std::uint32_t g = level == 0 ? 0 : state->group[r];
    const std::uint64_t left = given ? args.rank[r] : state->rank[r];
    const std::uint32_t* c = &state->counts[level][g][lane * 8];
    std::uint32_t mine[8];
    std::uint64_t sum = 0;
#pragma unroll
    for (int d = 0; d < 8; ++d) {
      mine[d] = __ldcg(c + d);
      sum += mine[d];
    }
    std::uint64_t upto = sum;  // inclusive scan over the lanes
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const std::uint64_t v = __shfl_up_sync(0xffffffffu, upto, o);
      if (lane >= o) upto += v;
    }
    const std::uint64_t before = upto - sum;
    const bool holds = left >= before && left < upto;
    if (__ballot_sync(0xffffffffu, holds) == 0) {
      if (lane == 0) state->lost = 1;
      continue;
    }
    if (holds) {
      std::uint64_t at = before;
      int d = 0;
      while (left >= at + mine[d]) at += mine[d++];
      state->rank[r] = left - at;
      const K digits = level == 0 ? K{0} : state->key[r];
      state->key[r] = static_cast<K>((digits << 8) | static_cast<K>(lane * 8 + d));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t g = 0;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      const K k = state->key[r];
      if (r == 0 || k != state->prefix[g - 1]) state->prefix[g++] = k;
      state->group[r] = g - 1;
    }
    state->groups = g;
    if (given) state->count = ranks;
  }
}

// The levels of a selection over source(0 .. n): state zeroed first (and
// its ranks written by then unless args carry them), ranks below n. The
// keys land in state->key on the stream; state->lost says a rank was not
// found, which only a rank at or past n or a source that changes between
// levels can cause.
template <typename K, typename Source>
cudaError_t LaunchRankSelect(Source source, std::uint32_t n, const RankArgs& args, RankSelect<K>* state,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const std::uint32_t per_block = kRankSelectThreads * kRankSelectBatch;
  const auto blocks = static_cast<int>(
      std::min<std::uint64_t>((std::uint64_t{n} + per_block - 1) / per_block, kRankSelectMaxBlocks));
  for (int level = 0; level < RankSelect<K>::kLevels; ++level) {
    RankSelectLevelKernel<K, Source><<<blocks, kRankSelectThreads, 0, stream>>>(source, n, level, args, state);
    TALLY_CUDA_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

}  // namespace tally::kernels::select
