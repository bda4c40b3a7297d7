// numpy.histogram's binning for equal-width bins over [lo, hi], reproduced
// exactly: numpy computes the edges as linspace(lo, hi, bins + 1) in float64,
// rounds them to the binning type (float32 for float32 input, float64
// otherwise), and puts x in bin i when edge[i] <= x < edge[i+1], the last bin
// being closed. Values are compared with the range in the binning type too.
#pragma once

#include <cstdint>

#include "tally/ops/hd.h"

namespace tally::ops {

enum : std::int32_t { kBinBelow = -1, kBinAbove = -2, kBinNan = -3 };

// T: the binning type (Traits<dtype>::bin).
template <typename T>
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
    b.lo_t = static_cast<T>(lo);
    b.hi_t = static_cast<T>(hi);
    b.scale = static_cast<T>(static_cast<double>(bins) / (hi - lo));
    b.bins = static_cast<std::int32_t>(bins);
    return b;
  }

  // edge[i] = linspace(lo, hi, bins + 1)[i] in the binning type.
  TALLY_HD T Edge(std::int32_t i) const {
    if (i >= bins) return hi_t;
    return static_cast<T>(AddRn(MulRn(static_cast<double>(i), step), lo));
  }

  // The bin of x (already converted to T), or kBinBelow / kBinAbove / kBinNan.
  TALLY_HD std::int32_t Bin(T x) const {
    if (x != x) return kBinNan;
    if (x < lo_t) return kBinBelow;
    if (x > hi_t) return kBinAbove;
    // The guess is within a bin or two of the answer; the edges decide.
    T f = (x - lo_t) * scale;
    std::int32_t i = f >= static_cast<T>(bins) ? bins - 1 : static_cast<std::int32_t>(f);
    if (i < 0) i = 0;
    while (i > 0 && x < Edge(i)) --i;
    while (i < bins - 1 && x >= Edge(i + 1)) ++i;
    return i;
  }
};

}  // namespace tally::ops
