// OP_ARGMIN / OP_ARGMAX: (value, index) candidates. Within one thread the
// elements come in increasing index order, so a strict comparison keeps the
// first occurrence; across threads rules::PickArg decides (first NaN, then the
// extreme, then the lower index).
#pragma once

#include <cstdint>

#include "tally/rules/combine.h"
#include "../device_traits.cuh"
#include "extreme.cuh"

namespace tally::kernels::detail {

template <rules::DType D, bool kMax>
struct ArgOp {
  using T = typename DevTraits<D>::T;
  using E = typename DevTraits<D>::E;

  // Is m certainly not the answer, given that an element already seen
  // holds `floor`? It is when it is strictly worse: a number when floor is
  // NaN, or a number beyond floor on the losing side. An equal value is not
  // worse (it may sit at a lower index), nor is a NaN.
  static TALLY_DEV bool Worse(T m, T floor) {
    if constexpr (DevTraits<D>::kFloat) {
      if (floor != floor) return m == m;
    }
    return kMax ? m < floor : m > floor;
  }
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
  // Visit a group of nvec vectors of K elements (vector v starts at index
  // base[v] = base[0] + v * stride; indices above the thread's earlier
  // ones). The group's extreme (NaN-propagating) decides whether the
  // candidate changes at all, one min/max per element: not when it is
  // Worse() than `floor` (a value some element already seen holds; see
  // ThreadAgg::ShareWarp), nor when it does not beat the thread's own
  // candidate. (uint8 goes element by element and does not use the floor.)
  // When it does:
  // - `defer` false: the first occurrence is found at once (a bit per
  //   element, find-first-set);
  // - `defer` true: the candidate becomes the group (`best` its extreme,
  //   `at` base[0], `pending` nvec) and Resolve() finds the first
  //   occurrence once, at the end, from memory. The histogram kernels defer:
  //   there a warp took the search in a third to two thirds of its groups,
  //   at ~40 instructions a time (fused five 3.97-4.00x -> 4.29-4.31x the
  //   five CUB calls); the lean kernel searches at once (argmax alone 2981
  //   GB/s at once, 2877-2919 deferred).
  template <int V, int K>
  static TALLY_DEV void UpdateGroup(T& best, std::int64_t& at, int& pending, bool defer,
                                    const T (&x)[V][K], const std::int64_t (&base)[V], int nvec,
                                    T floor) {
    if constexpr (K > 4) {
      // uint8 (16 elements a vector): element by element, no group.
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
#pragma unroll
          for (int e = 0; e < K; ++e) Update(best, at, x[v][e], base[v] + e);
        }
    } else {
      UpdateGroupWith<V, K>(best, at, pending, defer, x, base, nvec, GroupExtreme<V, K>(x, nvec), floor);
    }
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
  static TALLY_DEV void UpdateGroupWith(T& best, std::int64_t& at, int& pending, bool defer,
                                        const T (&x)[V][K], const std::int64_t (&base)[V], int nvec,
                                        T m, T floor) {
    if (Worse(m, floor)) return;
    bool take = kMax ? (m > best) : (m < best);
    if constexpr (DevTraits<D>::kFloat) take = take || (m != m && best == best);
    if (!(take || at < 0)) return;
    if (defer && V * K > 1) {
      best = m;
      at = base[0];
      pending = nvec;
      return;
    }
    const int i = FirstHit<V, K>(x, nvec, m);
    const int vi = i / K;
    std::int64_t b = base[0];
#pragma unroll
    for (int v = 1; v < V; ++v) b = vi == v ? base[v] : b;
    at = b + (i - vi * K);
    best = m;  // the element at `at` compares equal to m (and is NaN if m is)
    pending = 0;
  }
  // The flat index v * K + e of the first of the first nvec vectors' elements
  // equal to m (the first NaN when m is NaN): a bit per element, then the
  // lowest set bit. m must be one of them.
  template <int V, int K>
  static TALLY_DEV int FirstHit(const T (&x)[V][K], int nvec, T m) {
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
    return __ffs(static_cast<int>(hits)) - 1;  // hits != 0: m is one of them
  }
  // Points `at` at a pending group's first element equal to `best` (the
  // first NaN when best is NaN); vector v of the group is the 16 bytes at
  // data + (at - shift) + v * stride. All its vectors are loaded at once
  // (one memory latency, not one per element), then searched as above.
  template <int K, int kMaxV>
  static TALLY_DEV void Resolve(T& best, std::int64_t& at, int& pending, const T* data,
                                std::int64_t shift, std::int64_t stride) {
    if (pending == 0) return;
    T x[kMaxV][K];
#pragma unroll
    for (int v = 0; v < kMaxV; ++v)
      if (v < pending) LoadVec<T, K>(x[v], reinterpret_cast<const uint4*>(data + (at - shift) + v * stride));
    const int i = FirstHit<kMaxV, K>(x, pending, best);
    at += (i / K) * stride + i % K;
    pending = 0;
  }
  // Visit a group of which only some elements take part (the masking
  // kernels): y holds each element, or the op's identity in place of one
  // that does not take part (ok[v] bit e clear: masked, or NaN for the
  // NaN-skipping ops; ok[v] is 0 for v >= nvec). The group's extreme over y
  // is then the extreme of the elements that take part (NaN-propagating:
  // NaN only when one that takes part is NaN), and the first occurrence is
  // looked for among those alone, so an identity standing in for another
  // element is never picked, even where it equals the extreme (a row of
  // +inf for argmin). A group with none that take part changes nothing.
  template <int V, int K>
  static TALLY_DEV void UpdateGroupOk(T& best, std::int64_t& at, const T (&y)[V][K],
                                      const std::int64_t (&base)[V], int nvec,
                                      const unsigned (&ok)[V]) {
    static_assert(V * K <= 32);
    unsigned any = 0;
#pragma unroll
    for (int v = 0; v < V; ++v) any |= ok[v];
    if (any == 0) return;
    T m = kMax ? ExtremeOp<D>::MaxIdentity() : ExtremeOp<D>::MinIdentity();
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
#pragma unroll
        for (int e = 0; e < K; ++e) m = kMax ? ExtremeOp<D>::Max(m, y[v][e]) : ExtremeOp<D>::Min(m, y[v][e]);
      }
    bool take = kMax ? (m > best) : (m < best);
    if constexpr (DevTraits<D>::kFloat) take = take || (m != m && best == best);
    if (!(take || at < 0)) return;
    const bool nan = m != m;
    unsigned hits = 0;
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int e = 0; e < K; ++e) {
        const bool hit = nan ? y[v][e] != y[v][e] : y[v][e] == m;
        hits |= (((ok[v] >> e) & 1u) != 0 && hit) ? 1u << (v * K + e) : 0u;
      }
    const int i = __ffs(static_cast<int>(hits)) - 1;  // m is one of them
    const int vi = i / K;
    std::int64_t b = base[0];
#pragma unroll
    for (int v = 1; v < V; ++v) b = vi == v ? base[v] : b;
    at = b + (i - vi * K);
    best = m;
  }
  static TALLY_DEV rules::ArgCandidate<E> Merge(const rules::ArgCandidate<E>& a,
                                              const rules::ArgCandidate<E>& b) {
    return rules::PickArg<kMax>(a, b);
  }
};

}  // namespace tally::kernels::detail
