// An integer block's exact sums for its dtype's mean, variance, standard
// deviation and sum of squares (tally/rules/exact_integers.h), in 64-bit
// lanes of 32-bit pieces so the loops stay in vector registers: the
// elements' sum from the native lane sum where it is exact (32 bits and
// fewer) or from its halves' sums (64 bits), the squares' from their
// 32-bit halves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "server/engine/cpu/block_kernels.h"
#include "server/engine/cpu/tuning.h"
#include "tally/rules/exact_integers.h"

namespace tally::cpu {

// A square of 32 bits or fewer is below 2^64; a block's halves below 2^43.
static_assert(CpuPolicy::kBlockElements <= (std::size_t{1} << 11));

// The sum of x[0..n) (an integer dtype of 32 bits or fewer) and of its
// squares, as high * 2^32 + low, in one loop.
template <typename V>
TALLY_CPU_CLONES void NarrowSumsLanes(const V* x, std::size_t n, std::int64_t* sum, std::uint64_t* high,
                                      std::uint64_t* low) {
  constexpr int L = CpuPolicy::kLanes;
  std::int64_t s[L] = {};
  std::uint64_t hi[L] = {}, lo[L] = {};
  auto update = [&](int j, V v) {
    s[j] += static_cast<std::int64_t>(v);
    const std::uint64_t m = rules::IntegerSums::Magnitude(v);
    const std::uint64_t q = m * m;
    lo[j] += q & 0xffffffffu;
    hi[j] += q >> 32;
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) update(j, x[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) update(j, x[i]);
  std::int64_t t = 0;
  std::uint64_t h = 0, l = 0;
  for (int j = 0; j < L; ++j) {
    t += s[j];
    h += hi[j];
    l += lo[j];
  }
  *sum = t;
  *high = h;
  *low = l;
}

// The sums of x[0..n) (a 64-bit integer dtype) in 32-bit pieces: x = hi
// 2^32 + lo (hi signed for int64), and |x| = a 2^32 + b, whose square is
// a^2 2^64 + 2ab 2^32 + b^2, three products of 32-bit halves (one vector
// multiply each) summed by the 32-bit weight they land on. Each lane sum
// stays below 2^46 for a block, so none overflows.
struct WidePieces {
  std::int64_t hi = 0;   // sum of hi
  std::uint64_t lo = 0;  // sum of lo
  std::uint64_t w[4] = {0, 0, 0, 0};  // the squares' pieces at 2^0, 2^32, 2^64, 2^96
};

template <typename V>
TALLY_CPU_CLONES void WidePiecesLanes(const V* x, std::size_t n, bool squares, WidePieces* out) {
  static_assert(sizeof(V) == 8);
  constexpr int L = CpuPolicy::kLanes / 2;  // six accumulators a lane
  constexpr std::uint64_t kLow = 0xffffffffu;
  std::int64_t hi[L] = {};
  std::uint64_t lo[L] = {}, w0[L] = {}, w32[L] = {}, w64[L] = {}, w96[L] = {};
  auto sums = [&](int j, V v) {
    if constexpr (std::is_signed_v<V>) {
      hi[j] += static_cast<std::int64_t>(v) >> 32;  // arithmetic: v = hi 2^32 + lo
    } else {
      hi[j] += static_cast<std::int64_t>(static_cast<std::uint64_t>(v) >> 32);
    }
    lo[j] += static_cast<std::uint64_t>(v) & kLow;
  };
  auto square = [&](int j, V v) {
    const std::uint64_t m = rules::IntegerSums::Magnitude(v);
    const std::uint64_t a = m >> 32, b = m & kLow;
    const std::uint64_t bb = b * b, ab = a * b, aa = a * a;
    w0[j] += bb & kLow;
    w32[j] += (bb >> 32) + ((ab & kLow) << 1);
    w64[j] += ((ab >> 32) << 1) + (aa & kLow);
    w96[j] += aa >> 32;
  };
  std::size_t i = 0;
  if (squares) {
    for (; i + L <= n; i += L) {
#pragma GCC unroll 1
      for (int j = 0; j < L; ++j) {
        sums(j, x[i + j]);
        square(j, x[i + j]);
      }
    }
    for (int j = 0; i < n; ++i, ++j) {
      sums(j, x[i]);
      square(j, x[i]);
    }
  } else {
    for (; i + L <= n; i += L) {
#pragma GCC unroll 1
      for (int j = 0; j < L; ++j) sums(j, x[i + j]);
    }
    for (int j = 0; i < n; ++i, ++j) sums(j, x[i]);
  }
  for (int j = 0; j < L; ++j) {
    out->hi += hi[j];
    out->lo += lo[j];
    out->w[0] += w0[j];
    out->w[1] += w32[j];
    out->w[2] += w64[j];
    out->w[3] += w96[j];
  }
}

// The block's sums: `lane_sum` is its native lane sum (LaneTotals::sum),
// exact for the dtypes of 32 bits and fewer, which serves where the
// squares are not asked; otherwise one loop takes both (NarrowSumsLanes,
// WidePiecesLanes, the 64-bit ones in 32-bit pieces).
template <typename V>
rules::IntegerSums IntegerBlockSums(const V* x, std::size_t n, SumLane<V> lane_sum, bool squares) {
  rules::IntegerSums s;
  if constexpr (sizeof(V) <= 4) {
    if (squares) {
      std::int64_t sum = 0;
      std::uint64_t high = 0, low = 0;
      NarrowSumsLanes(x, n, &sum, &high, &low);
      s.sum = sum;
      s.AddSquares((static_cast<unsigned __int128>(high) << 32) + low, 0);
    } else if constexpr (std::is_signed_v<V>) {
      s.sum = static_cast<std::int64_t>(lane_sum);  // two's complement of a sum below 2^43 in size
    } else {
      s.sum = lane_sum;
    }
  } else {
    (void)lane_sum;
    WidePieces p;
    WidePiecesLanes(x, n, squares, &p);
    s.sum = static_cast<__int128>(p.hi) * (__int128{1} << 32) + static_cast<__int128>(p.lo);
    if (squares) {
      // w0 + w32 2^32 + w64 2^64 + w96 2^96, each below 2^46: the part
      // below 2^128 and the carry past it.
      unsigned __int128 low = static_cast<unsigned __int128>(p.w[0]) + (static_cast<unsigned __int128>(p.w[1]) << 32);
      const unsigned __int128 upper = static_cast<unsigned __int128>(p.w[2]) + (static_cast<unsigned __int128>(p.w[3]) << 32);
      const unsigned __int128 shifted = upper << 64;
      low += shifted;
      const std::uint64_t high = static_cast<std::uint64_t>(upper >> 64) + (low < shifted ? 1u : 0u);
      s.AddSquares(low, high);
    }
  }
  return s;
}

}  // namespace tally::cpu
