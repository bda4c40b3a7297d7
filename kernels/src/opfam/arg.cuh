// OP_ARGMIN / OP_ARGMAX: (value, index) candidates. Within one thread the
// elements come in increasing index order, so a strict comparison keeps the
// first occurrence; across threads ops::PickArg decides (first NaN, then the
// extreme, then the lower index).
#pragma once

#include <cstdint>

#include "tally/ops/combine.h"
#include "../device_traits.cuh"

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
  static TALLY_DEV ops::ArgCandidate<E> Merge(const ops::ArgCandidate<E>& a,
                                              const ops::ArgCandidate<E>& b) {
    return ops::PickArg<kMax>(a, b);
  }
};

}  // namespace tally::kernels::detail
