// An integer block's exact sums for its dtype's mean, variance, standard
// deviation and sum of squares (tally/rules/exact_integers.h): the
// elements' sum, from the native lane sum where it is exact, and the
// squares' in two 64-bit lanes of 32-bit halves, so the loop stays in
// vector registers for the dtypes of 32 bits and fewer.
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

// The squares of x[0..n) (an integer dtype of 32 bits or fewer) as
// high * 2^32 + low.
template <typename V>
TALLY_CPU_CLONES void SquareHalvesLanes(const V* x, std::size_t n, std::uint64_t* high, std::uint64_t* low) {
  constexpr int L = CpuPolicy::kLanes;
  std::uint64_t hi[L] = {}, lo[L] = {};
  auto update = [&](int j, V v) {
    const std::uint64_t m = rules::IntegerSums::Magnitude(v);
    const std::uint64_t s = m * m;
    lo[j] += s & 0xffffffffu;
    hi[j] += s >> 32;
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) update(j, x[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) update(j, x[i]);
  std::uint64_t h = 0, l = 0;
  for (int j = 0; j < L; ++j) {
    h += hi[j];
    l += lo[j];
  }
  *high = h;
  *low = l;
}

// The block's sums: `lane_sum` is its native lane sum (LaneTotals::sum),
// exact for the dtypes of 32 bits and fewer; 64-bit ones are summed here
// in 128 bits.
template <typename V>
rules::IntegerSums IntegerBlockSums(const V* x, std::size_t n, SumLane<V> lane_sum, bool squares) {
  rules::IntegerSums s;
  if constexpr (sizeof(V) <= 4) {
    if constexpr (std::is_signed_v<V>) {
      s.sum = static_cast<std::int64_t>(lane_sum);  // two's complement of a sum below 2^43 in size
    } else {
      s.sum = lane_sum;
    }
    if (squares) {
      std::uint64_t high = 0, low = 0;
      SquareHalvesLanes(x, n, &high, &low);
      s.AddSquares((static_cast<unsigned __int128>(high) << 32) + low, 0);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) s.AddSum(x[i]);
    if (squares) {
      for (std::size_t i = 0; i < n; ++i) s.AddSquare(x[i]);
    }
  }
  return s;
}

}  // namespace tally::cpu
