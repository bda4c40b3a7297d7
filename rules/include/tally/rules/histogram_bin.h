// numpy.histogram's binning for equal-width bins over [lo, hi], reproduced
// exactly: numpy computes the edges as linspace(lo, hi, bins + 1) in float64,
// rounds them to the edge type (float32 for float32 input, the input's dtype
// for float16 and bfloat16, float64 otherwise), and puts x in bin i when edge[i] <= x < edge[i+1], the last bin
// being closed. Values are compared with the range in the binning type too.
#pragma once

#include <cstdint>

#include "tally/rules/half.h"
#include "tally/rules/hd.h"

namespace tally::rules {

enum : std::int32_t { kBinBelow = -1, kBinAbove = -2, kBinNan = -3 };

// T: the binning type (Traits<dtype>::bin); E: the type the edges and the
// range are rounded to (Traits<dtype>::edge), whose values T holds exactly.
template <typename T, typename E = T>
struct HistogramBinner {
  double lo = 0.0;    // the requested range, in float64
  double step = 0.0;  // (hi - lo) / bins, as numpy.linspace computes it
  T lo_t{};           // lo and hi in the binning type
  T hi_t{};
  T scale{};          // bins / (hi - lo), for the first guess only
  std::int32_t bins = 0;

  static HistogramBinner Make(std::uint32_t bins, double lo, double hi) {
    HistogramBinner b;
    b.lo = lo;
    b.step = (hi - lo) / static_cast<double>(bins);
    b.lo_t = static_cast<T>(RoundTo<E>(lo));
    b.hi_t = static_cast<T>(RoundTo<E>(hi));
    b.scale = static_cast<T>(static_cast<double>(bins) / (hi - lo));
    b.bins = static_cast<std::int32_t>(bins);
    return b;
  }

  // edge[i] = linspace(lo, hi, bins + 1)[i] in the edge type.
  TALLY_HD T Edge(std::int32_t i) const {
    if (i >= bins) return hi_t;
    return static_cast<T>(RoundTo<E>(AddRn(MulRn(static_cast<double>(i), step), lo)));
  }

  // The bin that (x - lo) * scale points at, in [0, bins - 1]. f is compared
  // before it is converted, never converted out of range: it is NaN or
  // infinite when lo_t or hi_t is infinite (float32 edges of a float64
  // range) or scale overflows (the narrowest ranges), and converting those
  // to an integer is undefined behaviour.
  TALLY_HD std::int32_t Guess(T x) const {
    const T f = (x - lo_t) * scale;
    if (!(f < static_cast<T>(bins))) return bins - 1;  // NaN too
    if (!(f > static_cast<T>(0))) return 0;
    return static_cast<std::int32_t>(f);
  }

  // The bin of x (already converted to T), or kBinBelow / kBinAbove / kBinNan.
  // Validation has made the edges strictly increasing (numpy 2's rule).
  TALLY_HD std::int32_t Bin(T x) const {
    if (x != x) return kBinNan;
    if (x < lo_t) return kBinBelow;
    if (x > hi_t) return kBinAbove;
    // The guess is the answer or a neighbour of it, except for ranges at the
    // ends of T's exponent range: there a binary search over the edges
    // bounds the cost. Edge(0) == lo_t <= x.
    const std::int32_t i = Guess(x);
    if (i > 0 && x < Edge(i)) {
      if (i == 1 || x >= Edge(i - 1)) return i - 1;
      return Search(x, 0, i - 2);
    }
    if (i < bins - 1 && x >= Edge(i + 1)) {
      if (i + 1 == bins - 1 || x < Edge(i + 2)) return i + 1;
      return Search(x, i + 2, bins - 1);
    }
    return i;
  }

  // The last j in [a, b] with Edge(j) <= x, given Edge(a) <= x.
  TALLY_HD std::int32_t Search(T x, std::int32_t a, std::int32_t b) const {
    while (a < b) {
      const std::int32_t m = b - (b - a) / 2;
      if (Edge(m) <= x) {
        a = m;
      } else {
        b = m - 1;
      }
    }
    return a;
  }
};

// The binner of a dtype, given its Traits.
template <typename Tr>
using BinnerFor = HistogramBinner<typename Tr::bin, typename Tr::edge>;

}  // namespace tally::rules
