// numpy.histogram's bin edges written out on their own, apart from the
// binner: numpy.linspace(lo, hi, bins + 1) computed in float64 (with its
// special case for a step that rounds to zero) and rounded to the edge type,
// and numpy 2's rule that refuses edges that are not strictly increasing.
// The reference for the histogram tests; no dependencies beyond the standard
// library, so that a sanitizer build can include it too.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tally::testing {

// numpy.linspace(lo, hi, bins + 1, dtype=T): y = arange(bins + 1) * step + lo
// in float64, or (arange / bins) * (hi - lo) + lo when step is 0; the last
// is hi itself; then rounded to T. (Built with -ffp-contract=off, like numpy.)
template <typename T>
std::vector<T> NumpyEdges(std::uint32_t bins, double lo, double hi) {
  const double delta = hi - lo;
  const double div = static_cast<double>(bins);
  const double step = delta / div;
  std::vector<T> edges(bins + std::size_t{1});
  for (std::uint32_t i = 0; i < bins; ++i) {
    const double y = step == 0 ? (static_cast<double>(i) / div) * delta : static_cast<double>(i) * step;
    edges[i] = static_cast<T>(y + lo);
  }
  edges[bins] = static_cast<T>(hi);
  return edges;
}

// numpy 2: "Too many bins for data range. Cannot create N finite-sized bins."
// unless every edge is below the next.
template <typename T>
bool Numpy2Accepts(const std::vector<T>& edges) {
  for (std::size_t i = 0; i + 1 < edges.size(); ++i) {
    if (!(edges[i] < edges[i + 1])) return false;
  }
  return true;
}

// The bin numpy's edges give x: the last i with edges[i] <= x, the last bin
// closed; -1 below, -2 above, -3 NaN (tally::rules::kBin*).
template <typename T>
std::int32_t NumpyBinOf(const std::vector<T>& edges, T x) {
  if (x != x) return -3;
  if (x < edges.front()) return -1;
  if (x > edges.back()) return -2;
  // Among the first bins edges (the last bin is closed), the last <= x.
  const auto first_above = std::upper_bound(edges.begin(), edges.end() - 1, x);
  return static_cast<std::int32_t>(first_above - edges.begin()) - 1;
}

// The doubles in order as integers (-0 and +0 next to each other), and back.
inline std::int64_t DoubleOrder(double x) {
  const auto bits = std::bit_cast<std::int64_t>(x);
  return bits >= 0 ? bits : std::numeric_limits<std::int64_t>::min() - bits;
}
inline double DoubleAt(std::int64_t order) {
  return std::bit_cast<double>(order >= 0 ? order : std::numeric_limits<std::int64_t>::min() - order);
}

// The smallest hi above lo at which numpy 2 accepts `bins` bins in edge type
// T, with the next double below it refused: "the narrowest range numpy 2
// accepts" (acceptance need not be monotone in hi; this is the first
// boundary from above the one a doubling search finds).
template <typename T>
double NarrowestAcceptedHi(std::uint32_t bins, double lo) {
  const auto accepts = [&](double hi) { return Numpy2Accepts(NumpyEdges<T>(bins, lo, hi)); };
  // Start below the answer: bins spacings of T at lo, over 8.
  const T lo_t = static_cast<T>(lo);
  const double spacing = static_cast<double>(std::nextafter(lo_t, std::numeric_limits<T>::infinity())) -
                         static_cast<double>(lo_t);
  double width = std::max(std::numeric_limits<double>::denorm_min(), bins * spacing / 8);
  while (!accepts(lo + width)) width *= 2;
  std::int64_t refused = DoubleOrder(lo), accepted = DoubleOrder(lo + width);
  while (accepted - refused > 1) {
    const std::int64_t mid = refused + (accepted - refused) / 2;
    (accepts(DoubleAt(mid)) ? accepted : refused) = mid;
  }
  return DoubleAt(accepted);
}

}  // namespace tally::testing
