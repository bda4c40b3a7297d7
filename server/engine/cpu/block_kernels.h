// What the CPU backend does with one block (at most CpuPolicy::kBlockElements
// elements, resident in L1): fixed-lane vector loops whose results depend
// only on the block's contents, never on the instruction set they run with.
// Floating-point lanes are combined in a fixed tree; the compiler may not
// reassociate them (no -ffast-math), so every clone gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "server/engine/cpu/tuning.h"
#include "tally/rules/combine.h"
#include "tally/rules/histogram_bin.h"

// One copy of each vector kernel per instruction set, picked at load time;
// the binary still runs on any x86-64.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TALLY_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TALLY_CPU_CLONES
#endif

namespace tally::cpu {

// Which of the fused lane loops a block needs.
enum : unsigned {
  kLaneSum = 1,  // the dtype's native sum: float64 for floats, 64-bit wrap for ints
  kLaneMin = 2,  // NaN-propagating minimum
  kLaneMax = 4,  // NaN-propagating maximum
};
inline constexpr unsigned kLaneMasks = 8;

// Accumulator type of the native sum lanes. uint8 sums a block exactly in
// 32 bits (kBlockElements * 255 < 2^32); int32, uint32 and int64 in 64 bits (two's
// complement for the signed ones, so overflow wraps as numpy's does).
template <typename V>
using SumLane = std::conditional_t<
    rules::kIsFloatValue<V>, double,
    std::conditional_t<std::is_same_v<V, std::uint8_t>, std::uint32_t, std::uint64_t>>;

static_assert(CpuPolicy::kBlockElements * 255 < (std::uint64_t{1} << 32));

template <typename V>
inline constexpr int kLanesOf = std::is_same_v<V, std::uint8_t> ? CpuPolicy::kByteLanes
                                                                : CpuPolicy::kLanes;

template <typename V>
struct LaneTotals {
  SumLane<V> sum{};
  V min{};
  V max{};
};

template <typename V>
constexpr V MinIdentity() {
  if constexpr (rules::kIsFloatValue<V>) return std::numeric_limits<V>::infinity();
  return std::numeric_limits<V>::max();
}
template <typename V>
constexpr V MaxIdentity() {
  if constexpr (rules::kIsFloatValue<V>) return -std::numeric_limits<V>::infinity();
  return std::numeric_limits<V>::lowest();
}

template <typename V>
inline SumLane<V> WidenForSum(V v) {
  if constexpr (rules::kIsFloatValue<V>) {
    return static_cast<double>(v);
  } else if constexpr (std::is_signed_v<V>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<SumLane<V>>(v);
  }
}

// Halves the lanes pairwise, a fixed tree, into lane 0.
template <int L, typename T, typename Combine>
inline T TreeReduce(T (&acc)[L], Combine combine) {
  for (int width = L / 2; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] = combine(acc[j], acc[j + width]);
  }
  return acc[0];
}

// The lanes' min and max by the fixed tree, and a NaN lane's value over
// both: every loop that takes a block's extremes (FusedLanes, the exact
// range passes) ends with these, so they give the same bits.
template <int L, typename V>
inline V LaneMin(V (&mn)[L]) {
  return TreeReduce<L>(mn, [](V a, V b) { return b < a ? b : a; });
}
template <int L, typename V>
inline V LaneMax(V (&mx)[L]) {
  return TreeReduce<L>(mx, [](V a, V b) { return b > a ? b : a; });
}
template <int L, typename V, typename Out>
inline void NanWins(const V (&nan)[L], Out* out) {
  for (int j = 0; j < L; ++j) {
    if (rules::IsNan(nan[j])) {
      out->min = out->max = nan[j];
      return;
    }
  }
}

// Sum, min and max of x[0..n) in one loop, kMask choosing
// which. n >= 1. Min and max lanes use plain compare-and-select, which the
// vectorizer maps to vector min/max; NaNs, which the selects skip, are
// tracked in lanes of their own and win at the end (numpy's rule). Folding
// the NaN test into each select instead keeps GCC 12 from vectorizing a loop
// with both min and max (0.80 vs 0.09 ns per float32 element in L1, Zen 4).
template <typename V, unsigned kMask>
TALLY_CPU_CLONES void FusedLanes(const V* x, std::size_t n, LaneTotals<V>* out) {
  constexpr int L = kLanesOf<V>;
  constexpr bool kSum = kMask & kLaneSum;
  constexpr bool kMin = kMask & kLaneMin, kMax = kMask & kLaneMax;
  constexpr bool kNan = rules::kIsFloatValue<V> && (kMin || kMax);
  SumLane<V> sum[L];
  V mn[L], mx[L], nan[L];
  for (int j = 0; j < L; ++j) {
    sum[j] = SumLane<V>{};
    mn[j] = MinIdentity<V>();
    mx[j] = MaxIdentity<V>();
    nan[j] = V{};
  }
  auto update = [&](int j, V v) {
    if constexpr (kSum) sum[j] += WidenForSum(v);
    if constexpr (kMin) mn[j] = v < mn[j] ? v : mn[j];
    if constexpr (kMax) mx[j] = v > mx[j] ? v : mx[j];
    if constexpr (kNan) nan[j] = v != v ? v : nan[j];
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
    // Kept as a loop so the loop vectorizer maps the lanes onto vector
    // registers (GCC 12's SLP pass does worse with it unrolled).
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) update(j, x[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) update(j, x[i]);  // the tail, into the same lanes
  if constexpr (kSum) out->sum = TreeReduce<L>(sum, [](SumLane<V> a, SumLane<V> b) { return a + b; });
  if constexpr (kMin) out->min = LaneMin<L>(mn);
  if constexpr (kMax) out->max = LaneMax<L>(mx);
  if constexpr (kNan) NanWins<L>(nan, out);
}

// Which of the NaN-skipping lane loops a block of a float dtype needs.
enum : unsigned {
  kNanLaneSum = 1,  // float64 sum and number of the non-NaN elements
  kNanLaneMin = 2,  // minimum of the non-NaN elements
  kNanLaneMax = 4,  // maximum of the non-NaN elements
};
inline constexpr unsigned kNanLaneMasks = 8;

template <typename V>
struct NanLaneTotals {
  double sum = 0.0;
  std::uint64_t count = 0;  // non-NaN elements
  V min{};                  // MinIdentity() when count is 0
  V max{};                  // MaxIdentity() when count is 0
};

// FusedLanes' NaN-skipping twin for float dtypes: a second loop over a block
// that is already in L1, so the array is still read once. A NaN fails every
// comparison, so the plain compare-and-select min and max skip it as they
// are; the sum adds 0 in its place (numpy.nansum replaces NaNs with 0).
template <typename V, unsigned kMask>
TALLY_CPU_CLONES void NanLanes(const V* x, std::size_t n, NanLaneTotals<V>* out) {
  static_assert(rules::kIsFloatValue<V>);
  constexpr int L = CpuPolicy::kLanes;
  constexpr bool kSum = kMask & kNanLaneSum, kMin = kMask & kNanLaneMin, kMax = kMask & kNanLaneMax;
  double sum[L];
  std::uint32_t cnt[L];  // a block has fewer than 2^32 elements
  V mn[L], mx[L];
  for (int j = 0; j < L; ++j) {
    sum[j] = 0.0;
    cnt[j] = 0;
    mn[j] = MinIdentity<V>();
    mx[j] = MaxIdentity<V>();
  }
  auto update = [&](int j, V v) {
    if constexpr (kSum) {
      const bool ok = v == v;
      sum[j] += ok ? static_cast<double>(v) : 0.0;
      cnt[j] += ok ? 1u : 0u;
    }
    if constexpr (kMin) mn[j] = v < mn[j] ? v : mn[j];
    if constexpr (kMax) mx[j] = v > mx[j] ? v : mx[j];
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) update(j, x[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) update(j, x[i]);
  if constexpr (kSum) {
    out->sum = TreeReduce<L>(sum, [](double a, double b) { return a + b; });
    std::uint64_t c = 0;
    for (int j = 0; j < L; ++j) c += cnt[j];
    out->count = c;
  }
  out->min = TreeReduce<L>(mn, [](V a, V b) { return b < a ? b : a; });
  out->max = TreeReduce<L>(mx, [](V a, V b) { return b > a ? b : a; });
}

// Which of the product and nonzero lane loops a block needs.
enum : unsigned {
  kMoreLaneProduct = 1,  // numpy.prod in its accumulator type
  kMoreLaneNonzero = 2,  // elements != 0 (NaN is one): count_nonzero, any, all
};
inline constexpr unsigned kMoreLaneMasks = 4;

// Accumulator type of the product lanes: float64 for floats (as the sums),
// 64-bit unsigned for every integer, whose wrap-around is numpy's int64 and
// uint64 accumulators' (two's complement multiplication modulo 2^64 is the
// same for signed and unsigned).
template <typename V>
using ProductLane = std::conditional_t<rules::kIsFloatValue<V>, double, std::uint64_t>;

template <typename V>
struct MoreLaneTotals {
  ProductLane<V> product = 1;
  std::uint64_t nonzero = 0;
};

template <typename V>
inline ProductLane<V> WidenForProduct(V v) {
  if constexpr (rules::kIsFloatValue<V>) {
    return static_cast<double>(v);
  } else if constexpr (std::is_signed_v<V>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<std::uint64_t>(v);
  }
}

// Product and nonzero count of x[0..n), kMask choosing which: a further loop
// over a block that is already in L1 (as NanLanes), so the array is still
// read once. The lanes' products are combined in a fixed tree, so the float
// product depends on the block's contents only.
template <typename V, unsigned kMask>
TALLY_CPU_CLONES void MoreLanes(const V* x, std::size_t n, MoreLaneTotals<V>* out) {
  constexpr int L = CpuPolicy::kLanes;
  constexpr bool kProd = kMask & kMoreLaneProduct, kNz = kMask & kMoreLaneNonzero;
  ProductLane<V> prod[L];
  std::uint32_t nz[L];  // a block has fewer than 2^32 elements
  for (int j = 0; j < L; ++j) {
    prod[j] = ProductLane<V>{1};
    nz[j] = 0;
  }
  auto update = [&](int j, V v) {
    if constexpr (kProd) prod[j] *= WidenForProduct(v);
    if constexpr (kNz) nz[j] += v != V{} ? 1u : 0u;  // NaN != 0
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) update(j, x[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) update(j, x[i]);
  if constexpr (kProd) out->product = TreeReduce<L>(prod, [](ProductLane<V> a, ProductLane<V> b) { return a * b; });
  if constexpr (kNz) {
    std::uint64_t c = 0;
    for (int j = 0; j < L; ++j) c += nz[j];
    out->nonzero = c;
  }
}

// float64 sum of x[0..n) (bench/cpu/exact_block_bench.cc's baseline for the exact sums).
template <typename V>
TALLY_CPU_CLONES double DoubleSumLanes(const V* x, std::size_t n) {
  constexpr int L = CpuPolicy::kLanes;
  double acc[L] = {};
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) acc[j] += static_cast<double>(x[i + j]);
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += static_cast<double>(x[i]);
  return TreeReduce<L>(acc, [](double a, double b) { return a + b; });
}

// The first index of `target` in x[0..n), or of the first NaN when target is
// NaN (the block's min or max, so it is there).
template <typename V>
std::size_t FirstIndexOf(const V* x, std::size_t n, V target) {
  if (rules::IsNan(target)) {
    for (std::size_t i = 0; i < n; ++i) {
      if (rules::IsNan(x[i])) return i;
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if (x[i] == target) return i;
    }
  }
  return 0;  // unreachable for a target taken from x
}

// Where histogram counts go: a row's result, or a thread's scratch.
struct HistogramSink {
  std::uint64_t* counts;
  std::uint64_t* below;
  std::uint64_t* above;
  std::uint64_t* nan;
};

// Bins x[0..n) exactly as numpy.histogram does (rules::HistogramBinner).
template <typename V, typename BinT, typename EdgeT>
void BinBlock(const V* x, std::size_t n, const rules::HistogramBinner<BinT, EdgeT>& binner,
              const HistogramSink& sink) {
  std::uint64_t below = 0, above = 0, nan = 0;
  std::uint64_t* counts = sink.counts;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t b = binner.Bin(static_cast<BinT>(x[i]));
    if (b >= 0) {
      ++counts[b];
    } else if (b == rules::kBinBelow) {
      ++below;
    } else if (b == rules::kBinAbove) {
      ++above;
    } else {
      ++nan;
    }
  }
  *sink.below += below;
  *sink.above += above;
  *sink.nan += nan;
}

}  // namespace tally::cpu
