// DDSketch's counting pass: each element's bucket by
// rules/agg/ddsketch_state.h's Mapping, in the same IEEE operations, counted
// per sign; zeros (|x| < 2^-1000) and infinities apart, NaN left out. Each
// block counts in shared memory over a window of indices placed at its
// first element's, and adds its non-zero counts to the global ones at its
// end; an element outside the window goes to the global counts at once.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ddsketch/ddsketch_dispatch.h"
#include "select/for_each.cuh"
#include "select/select_policy.h"

namespace tally::kernels::ddsketch {

using D = select::DdSketchPolicy;

inline constexpr double kZeroBelow = 0x1p-1000;  // ddsketch_detail::kZeroBelow

// The element as float64 (integers converted, as the host state does).
template <typename T>
__device__ __forceinline__ double Widened(T v) {
  return static_cast<double>(v);
}

// ddsketch_detail::Mapping::Index for a normal magnitude: f = e + (m - 1),
// index = ceil(f * M), with the additions and products rounded as the host
// rounds them (the _rn intrinsics: no contraction into an FMA). The terms
// come from the magnitude's bits without a conversion unit's instruction
// (a quarter of the arithmetic units' rate): m - 1 is the double 1.m less 1
// (exact), and e is (2^52 + biased e) - (2^52 + 1023), both doubles, exact;
// the ceiling and the conversion to int are one rounding toward +inf. Any
// other bits (zero, subnormal, inf, NaN) give some index and no fault, so a
// caller may compute it before it knows whether the element has one.
__device__ __forceinline__ std::int32_t IndexOf(double magnitude, double multiplier) {
  const auto bits = static_cast<std::uint64_t>(__double_as_longlong(magnitude));
  const auto hi = static_cast<std::uint32_t>(bits >> 32);
  const double one_m = __hiloint2double(static_cast<int>((hi & 0xfffffu) | 0x3ff00000u), static_cast<int>(bits));
  const double mantissa = __dadd_rn(one_m, -1.0);
  const double biased = __hiloint2double(0x43300000, static_cast<int>(hi >> 20));  // 2^52 + biased e
  const double e = __dadd_rn(biased, -(0x1p52 + 1023.0));
  const double f = __dadd_rn(e, mantissa);
  return __double2int_ru(__dmul_rn(f, multiplier));
}

// kW: the window's indices per sign (the launcher sizes it).
// counts: [0, span) the negative magnitudes' indices from min_index, then
// [span, 2 span) the positive ones', then kTailSlots (ddsketch_dispatch.h);
// zeroed by the caller.
//
// Every element takes one shared atomic and no branch: what counts nowhere
// in the window (NaN, a slot past the array, an index outside the window)
// goes to a trash slot, and the rare index outside the window also to the
// global counts, behind a warp vote. Branching per element (the first
// version) cost a quarter of the rate: 1,942 against 2,439 GB/s for float32
// on an H200, 3,655 against 4,254 for float64, same counts.
template <typename T>
__global__ void __launch_bounds__(D::kThreads)
    DdSketchCountKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, double multiplier,
                        std::int32_t min_index, std::int32_t span, std::int32_t kW,
                        unsigned long long* __restrict__ counts) {
  const std::int32_t kSpecial = 2 * kW;     // zero, -inf, +inf after the two signs' windows
  const std::int32_t kTrash = kSpecial + 3;  // counted, never read
  // 2 * kW + 4 counts: dynamic shared memory, being over 48 KB.
  extern __shared__ std::uint32_t window[];
  __shared__ std::int32_t low;
  for (std::int32_t i = threadIdx.x; i <= kTrash; i += D::kThreads) window[i] = 0;
  if (threadIdx.x == 0) {
    // The window around the first element this block reads (its first
    // tile), or around 1.0's index when that one has no bucket.
    const std::uint64_t first = std::uint64_t{blockIdx.x} * select::kTile<T, D::kThreads, D::kVecs>;
    std::int32_t center = 0;
    if (first < n) {
      const double m = fabs(Widened(data[first]));
      if (m >= kZeroBelow && m <= 1.7976931348623157e308) center = IndexOf(m, multiplier);
    }
    low = center - kW / 2;
  }
  __syncthreads();
  const std::int32_t lo = low;
  select::ForEach<T, D::kThreads, D::kVecs>(data, n, aligned, [&](T x, std::uint64_t, bool valid) {
    const double v = Widened(x);
    const double m = fabs(v);
    const bool normal = m >= kZeroBelow && m <= 1.7976931348623157e308;  // false for NaN
    const bool positive = v > 0;
    const std::int32_t index = IndexOf(m, multiplier);
    const std::int32_t at = index - lo;
    const bool inside = static_cast<std::uint32_t>(at) < static_cast<std::uint32_t>(kW);
    std::int32_t slot = valid && normal && inside ? (positive ? kW : 0) + at : kTrash;
    if (valid && !normal && v == v) slot = kSpecial + (m < kZeroBelow ? kZeroSlot : positive ? kPositiveInfSlot : kNegativeInfSlot);
    atomicAdd(window + slot, 1u);
    const bool outside = valid && normal && !inside;
    if (__any_sync(0xffffffffu, outside)) {
      if (outside) atomicAdd(counts + (positive ? span : 0) + (index - min_index), 1ull);
    }
  });
  __syncthreads();
  for (std::int32_t i = threadIdx.x; i < kTrash; i += D::kThreads) {
    const std::uint32_t c = window[i];
    if (c == 0) continue;
    const std::int32_t to = i >= kSpecial ? 2 * span + (i - kSpecial) : i / kW * span + (lo + i % kW - min_index);
    atomicAdd(counts + to, static_cast<unsigned long long>(c));
  }
}

// Each sign's lowest and highest counted index into the edge slots after
// the counters (see kEdgeSlots): a block's threads reduce in registers,
// then one atomic each per block.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    DdSketchEdgesKernel(std::int32_t span, unsigned long long* __restrict__ counts) {
  unsigned long long edge[kEdgeSlots] = {0, 0, 0, 0};
  const std::uint64_t total = 2 * static_cast<std::uint64_t>(span);
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * kThreads + threadIdx.x; i < total;
       i += std::uint64_t{gridDim.x} * kThreads) {
    if (counts[i] == 0) continue;
    const int sign = i >= static_cast<std::uint64_t>(span);
    const auto at = static_cast<unsigned long long>(i - (sign ? span : 0));
    edge[2 * sign] = max(edge[2 * sign], static_cast<unsigned long long>(span) - at);
    edge[2 * sign + 1] = max(edge[2 * sign + 1], at + 1);
  }
  unsigned long long* out = counts + total + kFirstEdgeSlot;
#pragma unroll
  for (int k = 0; k < kEdgeSlots; ++k) {
    unsigned long long e = edge[k];
    for (int d = 16; d > 0; d /= 2) e = max(e, __shfl_xor_sync(0xffffffffu, e, d));
    if (threadIdx.x % 32 == 0 && e != 0) atomicMax(out + k, e);
  }
}

}  // namespace tally::kernels::ddsketch
