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
  // The same over the elements whose bit is set in ok[v] (bit e of vector
  // v; 0 for v >= nvec); empty moments when there are none.
  template <int V, int K>
  static TALLY_DEV rules::Moments GroupOk(const T (&x)[V][K], int nvec, const unsigned (&ok)[V]) {
    double s = 0.0;
    unsigned c = 0;
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
        c += __popc(ok[v]);
#pragma unroll
        for (int e = 0; e < K; ++e) s += ((ok[v] >> e) & 1u) ? static_cast<double>(x[v][e]) : 0.0;
      }
    if (c == 0) return rules::Moments{};
    const double n = static_cast<double>(c);
    const double mean = s / n;
    double m2 = 0.0;
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
#pragma unroll
        for (int e = 0; e < K; ++e) {
          const double d = ((ok[v] >> e) & 1u) ? static_cast<double>(x[v][e]) - mean : 0.0;
          m2 = __fma_rn(d, d, m2);
        }
      }
    return rules::Moments{n, mean, m2};
  }
};

}  // namespace tally::kernels::detail
