// Per-dtype device types and the runtime set of stored fields a fused
// kernel computes (uniform branches, not one instantiation per subset).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

#define TALLY_DEV __device__ __forceinline__

namespace tally::kernels::detail {

template <rules::DType D>
struct DevTraits {
  using T = typename rules::Traits<D>::value;    // element
  using S = typename rules::Traits<D>::sum;      // OP_SUM accumulator
  using E = typename rules::Traits<D>::extreme;  // min/max/arg values as stored
  using B = typename rules::Traits<D>::bin;      // histogram binning type
  using BE = typename rules::Traits<D>::edge;    // what histogram edges are rounded to
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  static constexpr bool kFloat = rules::kIsFloatValue<T>;
};

// One 16-byte load of K elements of input, through the read-only path
// without allocating in L1 (L1::no_allocate): the kernels read each input
// byte once, so L1 lines would only be filled and evicted. Against __ldg,
// side by side on three H100s (2026-11-22, 1 GiB float32, 16-17 runs each,
// CUB in the same runs): sum 0.998-1.001x -> 0.999-1.003x CUB (median
// 1.002x), max and argmax up 4-5 GB/s; histograms, fused and segmented
// rows unchanged within the spread (docs/performance.md). Adding the
// L2::256B prefetch hint gained nothing more.
template <typename T, int K>
TALLY_DEV void LoadVec(T (&dst)[K], const uint4* src) {
  uint4 raw;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w)
      : "l"(src));
  static_assert(sizeof(T) * K == 16);
  std::memcpy(dst, &raw, 16);
}

// Which stored fields a pass computes; derived once from the OpMask.
struct Want {
  bool sum, min, max, sumsq, moments, argmin, argmax, hist;

  static constexpr Want From(rules::OpMask m) {
    using rules::Has;
    using K = rules::OpKind;
    return Want{Has(m, K::kSum),
                Has(m, K::kMin),
                Has(m, K::kMax),
                Has(m, K::kSumSquares),
                Has(m, K::kMean) || Has(m, K::kVariance) || Has(m, K::kStddev),
                Has(m, K::kArgmin),
                Has(m, K::kArgmax),
                Has(m, K::kHistogram)};
  }
  // Sum, min and max at most (kSimple, SmallKernel).
  constexpr bool OnlySumMinMax() const { return !sumsq && !moments && !argmin && !argmax && !hist; }
  // A histogram and nothing else (kHistOnly).
  constexpr bool OnlyHistogram() const {
    return hist && !sum && !min && !max && !sumsq && !moments && !argmin && !argmax;
  }
};

// Device pointers to the state arrays (nullptr when absent); see
// tally/kernels/aggregate.h ResultLayout.
struct StateView {
  void* sum;
  void* min;
  void* max;
  void* moments;
  double* sumsq;
  std::int64_t* argmin;
  void* argmin_value;
  std::int64_t* argmax;
  void* argmax_value;
  unsigned long long* hist;
  std::uint32_t hist_stride;
};

}  // namespace tally::kernels::detail
