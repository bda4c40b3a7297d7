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

// Which stored fields a pass computes; derived once from the OpMask and
// whether the plan has a validity mask (`count`: the valid elements of each
// row are stored). The nan* fields are the NaN-skipping ops' (float dtypes):
// nsum numpy.nansum, ncount the non-NaN elements (every NaN-skipping op
// stores it: it says whether its row had any), nmin/nmax, nmom the moments
// of nanmean/nanvar/nanstd, namin/namax nanargmin/nanargmax.
struct Want {
  bool sum, min, max, sumsq, moments, argmin, argmax, hist;
  bool count, nsum, ncount, nmin, nmax, nmom, namin, namax;

  static constexpr Want From(rules::OpMask m, bool masked = false) {
    using rules::Has;
    using K = rules::OpKind;
    constexpr rules::OpMask kNanOps = (rules::Bit(K::kNanCount) << 1) - rules::Bit(K::kNanSum);
    return Want{Has(m, K::kSum),
                Has(m, K::kMin),
                Has(m, K::kMax),
                Has(m, K::kSumSquares),
                Has(m, K::kMean) || Has(m, K::kVariance) || Has(m, K::kStddev),
                Has(m, K::kArgmin),
                Has(m, K::kArgmax),
                Has(m, K::kHistogram),
                masked,
                Has(m, K::kNanSum),
                (m & kNanOps) != 0,
                Has(m, K::kNanMin),
                Has(m, K::kNanMax),
                Has(m, K::kNanMean) || Has(m, K::kNanVariance) || Has(m, K::kNanStddev),
                Has(m, K::kNanArgmin),
                Has(m, K::kNanArgmax)};
  }
  constexpr bool AnyNan() const { return nsum || ncount || nmin || nmax || nmom || namin || namax; }
  // A validity mask or a NaN-skipping op: the kernels that read masks
  // (kNanSimple, kEvery and their team kernel) take the pass.
  constexpr bool Masking() const { return count || AnyNan(); }
  // Sum, min and max at most (kSimple, SmallKernel).
  constexpr bool OnlySumMinMax() const {
    return !sumsq && !moments && !argmin && !argmax && !hist && !Masking();
  }
  // A histogram and nothing else (kHistOnly).
  constexpr bool OnlyHistogram() const {
    return hist && !sum && !min && !max && !sumsq && !moments && !argmin && !argmax && !Masking();
  }
  // Sums, extremes and counts, plain or NaN-skipping, with or without a
  // mask (kNanSimple).
  constexpr bool OnlySimpleMasking() const {
    return !sumsq && !moments && !argmin && !argmax && !hist && !nmom && !namin && !namax;
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
  unsigned long long* count;  // valid elements (masked plans)
  double* nan_sum;
  unsigned long long* nan_count;
  void* nan_min;
  void* nan_max;
  void* nan_moments;
  std::int64_t* nan_argmin;
  void* nan_argmin_value;
  std::int64_t* nan_argmax;
  void* nan_argmax_value;
};

// Validity bits of the k <= 16 elements from global index g on (bit e:
// element g + e), from Arrow's LSB-first bitmap read as little-endian
// 32-bit words (tally/rules/validity.h: bit g % 32 of word g / 32). The
// second word is read only when the k bits cross into it, so no word past
// the last element's is touched.
TALLY_DEV unsigned ValidBits(const std::uint32_t* validity, std::uint64_t g, int k) {
  const std::uint64_t w = g >> 5;
  const unsigned s = static_cast<unsigned>(g & 31);
  const unsigned lo = __ldg(validity + w);
  const unsigned hi = s + static_cast<unsigned>(k) > 32u ? __ldg(validity + w + 1) : 0u;
  return __funnelshift_r(lo, hi, s) & ((1u << k) - 1u);
}

}  // namespace tally::kernels::detail
