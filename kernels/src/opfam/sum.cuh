// OP_SUM and OP_SUM_SQUARES: float64 for floats, int64/uint64 with numpy's
// wraparound for integers; sum of squares in float64 for every dtype.
#pragma once

#include <cstdint>

#include "../device_traits.cuh"

namespace tally::kernels::detail {

template <rules::DType D>
struct SumOp {
  using T = typename DevTraits<D>::T;
  using S = typename DevTraits<D>::S;

  static TALLY_DEV S Identity() { return S{0}; }
  // Adds in unsigned arithmetic so signed overflow wraps modulo 2^64.
  static TALLY_DEV S Merge(S a, S b) {
    if constexpr (DevTraits<D>::kFloat) {
      return a + b;
    } else {
      return static_cast<S>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
    }
  }
  static TALLY_DEV S Lift(T x) {
    if constexpr (DevTraits<D>::kFloat) {
      return static_cast<double>(x);
    } else if constexpr (std::is_signed_v<T>) {
      return static_cast<std::int64_t>(x);
    } else {
      return static_cast<std::uint64_t>(x);
    }
  }
  // A group of K contiguous elements: summed pairwise into one addend.
  template <int K>
  static TALLY_DEV S Group(const T (&x)[K]) {
    S s = Lift(x[0]);
#pragma unroll
    for (int e = 1; e < K; ++e) s = Merge(s, Lift(x[e]));
    return s;
  }
};

template <rules::DType D>
struct SumSquaresOp {
  using T = typename DevTraits<D>::T;
  template <int K>
  static TALLY_DEV double Group(const T (&x)[K]) {
    double s = 0.0;
#pragma unroll
    for (int e = 0; e < K; ++e) {
      const double v = static_cast<double>(x[e]);
      s = __fma_rn(v, v, s);
    }
    return s;
  }
};

}  // namespace tally::kernels::detail
