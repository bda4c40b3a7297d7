// OP_ARGMIN / OP_ARGMAX: (value, index) candidates. Within one thread the
// elements come in increasing index order, so a strict comparison keeps the
// first occurrence; across threads ops::PickArg decides (first NaN, then the
// extreme, then the lower index).
#pragma once

#include <cstdint>

#include "tally/ops/combine.h"
#include "../device_traits.cuh"
#include "extreme.cuh"

namespace tally::kernels::detail {

template <ops::DType D, bool kMax>
struct ArgOp {
  using T = typename DevTraits<D>::T;
  using E = typename DevTraits<D>::E;

  // Visit x at index i (indices increase along a thread's calls).
  static TALLY_DEV void Update(T& best, std::int64_t& at, T x, std::int64_t i) {
    bool take = kMax ? (x > best) : (x < best);
    if constexpr (DevTraits<D>::kFloat) take = take || (x != x && best == best);
    take = take || at < 0;
    if (take) {
      best = x;
      at = i;
    }
  }
  // Visit a group of nvec vectors of K elements (group v starts at index
  // base[v]; indices above the thread's earlier ones). The group's extreme
  // (NaN-propagating) decides whether the candidate changes at all, one
  // min/max per element; only then is its first occurrence looked for. On
  // random data a thread's candidate changes a few times per thousand
  // elements, so the search is rare.
  template <int V, int K>
  static TALLY_DEV void UpdateGroup(T& best, std::int64_t& at, const T (&x)[V][K],
                                    const std::int64_t (&base)[V], int nvec) {
    if constexpr (K > 4) {
      // uint8 (16 elements a vector): the search unrolled over a group
      // costs more registers than it saves; visit element by element.
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
#pragma unroll
          for (int e = 0; e < K; ++e) Update(best, at, x[v][e], base[v] + e);
        }
      return;
    }
    UpdateGroupWith<V, K>(best, at, x, base, nvec, GroupExtreme<V, K>(x, nvec));
  }
  // The group's extreme, NaN-propagating (the first nvec vectors).
  template <int V, int K>
  static TALLY_DEV T GroupExtreme(const T (&x)[V][K], int nvec) {
    T m = x[0][0];
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
#pragma unroll
        for (int e = 0; e < K; ++e) m = kMax ? ExtremeOp<D>::Max(m, x[v][e]) : ExtremeOp<D>::Min(m, x[v][e]);
      }
    return m;
  }
  // UpdateGroup with the group's extreme m already known (K <= 4).
  template <int V, int K>
  static TALLY_DEV void UpdateGroupWith(T& best, std::int64_t& at, const T (&x)[V][K],
                                        const std::int64_t (&base)[V], int nvec, T m) {
    bool take = kMax ? (m > best) : (m < best);
    if constexpr (DevTraits<D>::kFloat) take = take || (m != m && best == best);
    if (!(take || at < 0)) return;
    // The first element equal to m (the first NaN when m is NaN): a bit per
    // element, then the lowest set bit. V * K <= 32 (K <= 4 here).
    static_assert(V * K <= 32);
    const bool nan = m != m;
    unsigned hits = 0;
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int e = 0; e < K; ++e) {
        const bool hit = nan ? x[v][e] != x[v][e] : x[v][e] == m;
        hits |= (v < nvec && hit) ? 1u << (v * K + e) : 0u;
      }
    const int i = __ffs(static_cast<int>(hits)) - 1;  // hits != 0: m is one of them
    const int vi = i / K;
    std::int64_t b = base[0];
#pragma unroll
    for (int v = 1; v < V; ++v) b = vi == v ? base[v] : b;
    at = b + (i - vi * K);
    T bx = x[0][0];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int e = 0; e < K; ++e) bx = i == v * K + e ? x[v][e] : bx;
    best = bx;
  }

  static TALLY_DEV ops::ArgCandidate<E> Merge(const ops::ArgCandidate<E>& a,
                                              const ops::ArgCandidate<E>& b) {
    return ops::PickArg<kMax>(a, b);
  }
};

}  // namespace tally::kernels::detail
