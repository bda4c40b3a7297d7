// OP_MEAN / OP_VARIANCE / OP_STDDEV: float64 (count, mean, M2). Each group of
// loaded elements is summarized exactly (its own mean and M2) and merged with
// Chan's rule (rules::MergeMoments): one division per group, not per element.
#pragma once

#include "tally/rules/combine.h"
#include "../device_traits.cuh"

namespace tally::kernels::detail {

template <rules::DType D>
struct MomentsOp {
  using T = typename DevTraits<D>::T;

  // The first `n` of the V*K elements (n > 0).
  template <int V, int K>
  static TALLY_DEV rules::Moments Group(const T (&x)[V][K], int nvec) {
    double s = 0.0;
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
#pragma unroll
        for (int e = 0; e < K; ++e) s += static_cast<double>(x[v][e]);
      }
    const double n = static_cast<double>(nvec * K);
    const double mean = s / n;
    double m2 = 0.0;
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
#pragma unroll
        for (int e = 0; e < K; ++e) {
          const double d = static_cast<double>(x[v][e]) - mean;
          m2 = __fma_rn(d, d, m2);
        }
      }
    return rules::Moments{n, mean, m2};
  }
};

}  // namespace tally::kernels::detail
