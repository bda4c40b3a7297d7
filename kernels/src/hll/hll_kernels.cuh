// HyperLogLog's passes: each element hashed as rules/agg/hll_state.h hashes
// it, its rank kept as the maximum of its register (in shared memory where
// the registers fit, merged into global registers at the end), and, while
// the count may be small enough for the host state's exact form, the
// distinct hashes themselves.
#pragma once

#include <cstdint>
#include <type_traits>

#include "select/for_each.cuh"
#include "select/select_policy.h"
#include "tally/rules/agg/hll_state.h"

namespace tally::kernels::hll {

using H = select::HllPolicy;

// rules::agg::IdOf on the device (that one is host code: it uses
// std::bit_cast): float32 as its bits with every NaN one value and -0.0 as
// 0.0, float64 so in 64 bits, integers as their 32 or 64 bits. The tests
// check the two agree through the host state's answers.
template <typename T>
__device__ __forceinline__ rules::agg::Id<T> IdOf(T v) {
  if constexpr (std::is_same_v<T, float>) {
    if (v != v) return 0x7fc00000u;
    return v == 0 ? 0u : __float_as_uint(v);
  } else if constexpr (std::is_same_v<T, double>) {
    if (v != v) return 0x7ff8000000000000ull;
    return v == 0 ? 0ull : static_cast<std::uint64_t>(__double_as_longlong(v));
  } else {
    static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
    return static_cast<rules::agg::Id<T>>(v);
  }
}

template <typename T>
__device__ __forceinline__ std::uint64_t HashOf(T v) {
  return rules::agg::hll_detail::Mix(IdOf(v));
}

// Where a block keeps its registers while it reads: 32-bit words in shared
// memory (atomicMax, no loop: up to 2^15 registers, 128 KB), bytes in
// shared memory raised by CAS (2^16 and 2^17), or the global registers
// themselves (2^18).
enum class RegisterHome { kSharedWords, kSharedBytes, kGlobal };

// The register's byte in `words` raised to `rank` if below: bytes have no
// atomicMax, so a CAS on their word, after a plain read that rules out
// almost every element once the registers have filled.
__device__ __forceinline__ void RaiseByte(std::uint32_t* words, std::uint32_t reg, std::uint32_t rank) {
  std::uint32_t* word = words + (reg >> 2);
  const std::uint32_t shift = (reg & 3u) * 8u;
  std::uint32_t old = *static_cast<volatile std::uint32_t*>(word);
  while (((old >> shift) & 0xffu) < rank) {
    const std::uint32_t want = (old & ~(0xffu << shift)) | (rank << shift);
    const std::uint32_t seen = atomicCAS(word, old, want);
    if (seen == old) break;
    old = seen;
  }
}

// Threads of a block of HllRegistersKernel<T, R>.
template <RegisterHome R>
inline constexpr int kRegisterThreads = R == RegisterHome::kSharedWords ? H::kWordThreads : H::kThreads;

// Ranks into `registers` (2^p words, zeroed by the caller) by atomicMax;
// with the shared kinds, each block keeps its own registers and merges them
// at its end. Words in shared memory take a plain read and a predicated
// atomicMax: straight-line code, no divergence (the byte kind's CAS loop
// costs a third of the rate, measured on H100 at 2^12 registers).
template <typename T, RegisterHome R>
__global__ void __launch_bounds__(kRegisterThreads<R>, R == RegisterHome::kSharedWords ? 2 : 1)
    HllRegistersKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, std::uint32_t p,
                       std::uint32_t* __restrict__ registers) {
  constexpr int kThreads = kRegisterThreads<R>;
  extern __shared__ std::uint32_t words[];
  const std::uint32_t m = 1u << p;
  if constexpr (R != RegisterHome::kGlobal) {
    const std::uint32_t shared_words = R == RegisterHome::kSharedWords ? m : m / 4;
    for (std::uint32_t i = threadIdx.x; i < shared_words; i += kThreads) words[i] = 0;
    __syncthreads();
  }
  // The register is the hash's top p bits, all in its high word (p is 4 to
  // 18); the rank is the leading zeros of the other 64 - p plus one, at most
  // 64 - p + 1: a bit set just below them stops the count there (one OR in
  // place of a min).
  const std::uint32_t reg_shift = 32 - p;
  const std::uint64_t stop = std::uint64_t{1} << (p - 1);
  select::ForEach<T, kThreads, H::kVecs>(data, n, aligned, [&](T x, std::uint64_t, bool valid) {
    const std::uint64_t h = HashOf(x);
    const std::uint32_t reg = static_cast<std::uint32_t>(h >> 32) >> reg_shift;
    // An invalid slot raises nothing: rank 0.
    const std::uint32_t rank =
        valid ? static_cast<std::uint32_t>(__clzll(static_cast<long long>((h << p) | stop))) + 1 : 0;
    if constexpr (R == RegisterHome::kSharedWords) {
      if (rank > words[reg]) atomicMax(words + reg, rank);
    } else if constexpr (R == RegisterHome::kSharedBytes) {
      if (rank != 0) RaiseByte(words, reg, rank);
    } else {
      if (rank > __ldcg(registers + reg)) atomicMax(registers + reg, rank);
    }
  });
  if constexpr (R != RegisterHome::kGlobal) {
    __syncthreads();
    for (std::uint32_t r = threadIdx.x; r < m; r += kThreads) {
      const std::uint32_t v =
          R == RegisterHome::kSharedWords ? words[r] : (words[r >> 2] >> ((r & 3u) * 8u)) & 0xffu;
      if (v != 0 && v > __ldcg(registers + r)) atomicMax(registers + r, v);
    }
  }
}

// The distinct hashes, while there are at most `limit`: an open-addressing
// set of `slots` (a power of two, zeroed by the caller; 0 marks an empty
// slot, so the hash 0 is flagged apart) behind a set in each block's shared
// memory, so that a value seen again and again reaches the global set once
// per block. counters: [0] hashes in the set, [1] hash 0 seen, [2] more than
// `limit` (the pass then stops adding).
template <typename T>
__global__ void __launch_bounds__(H::kThreads)
    HllExactKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, std::uint64_t* __restrict__ set,
                   std::uint32_t slots, std::uint32_t limit, std::uint32_t* __restrict__ counters) {
  __shared__ unsigned long long local[H::kLocalSlots];
  __shared__ int zero_seen;
  for (std::uint32_t i = threadIdx.x; i < H::kLocalSlots; i += H::kThreads) local[i] = 0;
  if (threadIdx.x == 0) zero_seen = 0;
  __syncthreads();
  select::ForEach<T, H::kThreads, H::kVecs>(data, n, aligned, [&](T x, std::uint64_t, bool valid) {
    if (!valid) return;
    const unsigned long long h = HashOf(x);
    if (h == 0) {
      zero_seen = 1;
      return;
    }
    // This block's set, keyed by other bits than the global one's.
    std::uint32_t slot = static_cast<std::uint32_t>(h >> 40) & (H::kLocalSlots - 1);
    bool fresh = false;
    for (int probe = 0; probe < H::kLocalProbes; ++probe) {
      const unsigned long long cur = *static_cast<volatile unsigned long long*>(&local[slot]);
      if (cur == h) return;
      if (cur == 0) {
        const unsigned long long prev = atomicCAS(&local[slot], 0ull, h);
        if (prev == h) return;
        if (prev == 0) {
          fresh = true;
          break;
        }
      }
      slot = (slot + 1) & (H::kLocalSlots - 1);
    }
    (void)fresh;  // new to this block, or its neighbourhood there is full: either way, the global set
    if (__ldcg(counters + 2) != 0) return;
    auto* global = reinterpret_cast<unsigned long long*>(set);
    std::uint32_t g = static_cast<std::uint32_t>(h) & (slots - 1);
    for (std::uint32_t probe = 0; probe < slots; ++probe) {
      const unsigned long long cur = __ldcg(global + g);
      if (cur == h) return;
      if (cur == 0) {
        const unsigned long long prev = atomicCAS(global + g, 0ull, h);
        if (prev == h) return;
        if (prev == 0) {
          if (atomicAdd(counters, 1u) >= limit) atomicExch(counters + 2, 1u);
          return;
        }
      }
      g = (g + 1) & (slots - 1);
    }
    atomicExch(counters + 2, 1u);  // a full set holds more than the limit
  });
  __syncthreads();
  if (threadIdx.x == 0 && zero_seen != 0) atomicOr(counters + 1, 1u);
}

__global__ void PackRegistersKernel(const std::uint32_t* __restrict__ registers, std::uint8_t* __restrict__ out,
                                    std::uint32_t m) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) out[i] = static_cast<std::uint8_t>(registers[i]);
}

}  // namespace tally::kernels::hll
