// DDSketch's counting pass: each element's bucket by
// rules/agg/ddsketch_state.h's Mapping, in the same IEEE operations, counted
// per sign; zeros (|x| < 2^-1000) and infinities apart, NaN left out. Each
// block counts in shared memory over a window of indices placed at its
// first element's, and adds its non-zero counts to the global ones at its
// end; an element outside the window goes to the global counts at once.
#pragma once

#include <cstdint>
#include <type_traits>

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
// rounds them (the _rn intrinsics: no contraction into an FMA).
__device__ __forceinline__ std::int32_t IndexOf(double magnitude, double multiplier) {
  const auto bits = static_cast<std::uint64_t>(__double_as_longlong(magnitude));
  const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  const double mantissa = __dmul_rn(static_cast<double>(bits & ((std::uint64_t{1} << 52) - 1)), 0x1p-52);
  const double f = __dadd_rn(static_cast<double>(e), mantissa);
  return static_cast<std::int32_t>(ceil(__dmul_rn(f, multiplier)));
}

// kW: the window's indices per sign (the launcher sizes it).
// counts: [0, span) the negative magnitudes' indices from min_index, then
// [span, 2 span) the positive ones', then zero, -inf, +inf; zeroed by the
// caller.
template <typename T>
__global__ void __launch_bounds__(D::kThreads)
    DdSketchCountKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, double multiplier,
                        std::int32_t min_index, std::int32_t span, std::int32_t kW,
                        unsigned long long* __restrict__ counts) {
  const std::int32_t kSpecial = 2 * kW;  // zero, -inf, +inf after the two signs' windows
  // 2 * kW + 3 counts: dynamic shared memory, being over 48 KB.
  extern __shared__ std::uint32_t window[];
  __shared__ std::int32_t low;
  for (std::int32_t i = threadIdx.x; i < kSpecial + 3; i += D::kThreads) window[i] = 0;
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
    std::int32_t slot = -1;    // where in window[] it counts; -1: nowhere there
    std::int32_t global = -1;  // where in counts[] instead, outside the window
    if (valid && v == v) {     // NaN: left out
      if (m < kZeroBelow) {
        slot = kSpecial;
      } else if (m > 1.7976931348623157e308) {
        slot = kSpecial + (v > 0 ? 2 : 1);
      } else {
        const std::int32_t index = IndexOf(m, multiplier);
        const std::int32_t at = index - lo;
        if (at >= 0 && at < kW) {
          slot = (v > 0 ? kW : 0) + at;
        } else {
          global = (v > 0 ? span : 0) + (index - min_index);
        }
      }
    }
    if (slot >= 0) atomicAdd(window + slot, 1u);
    if (global >= 0) atomicAdd(counts + global, 1ull);
  });
  __syncthreads();
  for (std::int32_t i = threadIdx.x; i < kSpecial + 3; i += D::kThreads) {
    const std::uint32_t c = window[i];
    if (c == 0) continue;
    const std::int32_t to = i >= kSpecial ? 2 * span + (i - kSpecial) : i / kW * span + (lo + i % kW - min_index);
    atomicAdd(counts + to, static_cast<unsigned long long>(c));
  }
}

}  // namespace tally::kernels::ddsketch
