// Warp level: reduce partials across a team of `width` lanes (a power of two
// up to 32) with butterfly shuffles; every lane of the team ends with the
// team's result.
#pragma once

#include "../partial.cuh"

namespace tally::kernels::detail {

template <rules::DType D>
TALLY_DEV Partial<D> TeamReduce(Partial<D> p, int width, const Want& w) {
  for (int m = width >> 1; m > 0; m >>= 1) {
    const Partial<D> q = ShflXor(p, m, width, w);
    if ((threadIdx.x & m) == 0) {
      MergeInto(p, q, w);  // q covers later elements
    } else {
      Partial<D> r = q;
      MergeInto(r, p, w);
      p = r;
    }
  }
  return p;
}

}  // namespace tally::kernels::detail
