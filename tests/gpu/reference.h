// Host reference for the GPU kernel tests: each row aggregated on the CPU in
// the plainest way (long double where precision matters, exact integers),
// following the same tally/rules rules the wire contract defines.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tally/rules/combine.h"
#include "tally/rules/dtype.h"
#include "tally/rules/histogram_bin.h"
#include "tally/rules/op.h"

namespace tally::testing {

struct RefRow {
  long double fsum = 0;        // float dtypes
  std::uint64_t isum = 0;      // integer dtypes, modulo 2^64
  long double abs_sum = 0;     // sum |x|, for tolerances
  long double mean = 0, m2 = 0, sumsq = 0, max_abs = 0;
  long double min = 0, max = 0;  // as long double (exact for every dtype but int64/uint64 extremes)
  std::int64_t imin = 0, imax = 0;    // int64 extremes exactly
  std::uint64_t umin = 0, umax = 0;   // uint64 extremes exactly
  bool min_nan = false, max_nan = false;
  std::int64_t argmin = -1, argmax = -1;
  std::vector<std::uint64_t> hist;  // bins + 3
};

template <rules::DType D>
std::vector<RefRow> Reference(const std::vector<typename rules::Traits<D>::value>& x,
                              std::uint64_t row_length, const rules::HistogramSpec* h) {
  using T = typename rules::Traits<D>::value;
  using B = typename rules::Traits<D>::bin;
  const std::uint64_t n = x.size();
  const std::uint64_t L = row_length == 0 ? n : row_length;
  const std::uint64_t rows = row_length == 0 ? 1 : n / row_length;
  std::vector<RefRow> out(rows);
  using Binner = rules::BinnerFor<rules::Traits<D>>;
  const auto binner = h ? Binner::Make(h->bins, h->lo, h->hi) : Binner{};
  for (std::uint64_t r = 0; r < rows; ++r) {
    RefRow& o = out[r];
    const T* p = x.data() + r * L;
    rules::ArgCandidate<T> amin{T{}, -1}, amax{T{}, -1};
    T mn{}, mx{};
    for (std::uint64_t i = 0; i < L; ++i) {
      const T v = p[i];
      const long double lv = static_cast<long double>(v);
      if constexpr (rules::IsFloat(D)) o.fsum += lv;
      else o.isum += static_cast<std::uint64_t>(v);
      o.abs_sum += std::fabs(lv);
      o.sumsq += lv * lv;
      if (std::fabs(lv) > o.max_abs) o.max_abs = std::fabs(lv);
      mn = i == 0 ? v : rules::MinNan(mn, v);
      mx = i == 0 ? v : rules::MaxNan(mx, v);
      const rules::ArgCandidate<T> c{v, static_cast<std::int64_t>(i)};
      amin = rules::PickArg<false>(amin, c);
      amax = rules::PickArg<true>(amax, c);
    }
    if (L > 0) {
      long double s = 0;
      for (std::uint64_t i = 0; i < L; ++i) s += static_cast<long double>(p[i]);
      o.mean = s / L;
      for (std::uint64_t i = 0; i < L; ++i) {
        const long double d = static_cast<long double>(p[i]) - o.mean;
        o.m2 += d * d;
      }
    }
    o.min = static_cast<long double>(mn);
    o.max = static_cast<long double>(mx);
    o.min_nan = rules::IsNan(mn);
    o.max_nan = rules::IsNan(mx);
    if constexpr (!rules::IsFloat(D)) {
      o.imin = static_cast<std::int64_t>(mn);
      o.imax = static_cast<std::int64_t>(mx);
      o.umin = static_cast<std::uint64_t>(mn);
      o.umax = static_cast<std::uint64_t>(mx);
    }
    o.argmin = amin.index;
    o.argmax = amax.index;
    if (h) {
      o.hist.assign(h->bins + 3, 0);
      for (std::uint64_t i = 0; i < L; ++i) {
        const std::int32_t b = binner.Bin(static_cast<B>(p[i]));
        const std::int32_t slot = b >= 0 ? b : static_cast<std::int32_t>(h->bins) - 1 - b;
        ++o.hist[slot];
      }
    }
  }
  return out;
}

}  // namespace tally::testing
