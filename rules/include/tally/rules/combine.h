// The rules for combining partial results, shared by the CPU backend and the
// CUDA kernels so that both follow numpy in exactly the same way.
#pragma once

#include <cmath>
#include <cstdint>

#include "tally/rules/hd.h"

namespace tally::rules {

template <typename T>
TALLY_HD bool IsNan(T v) {
  return v != v;  // false for every integer type
}

// numpy.min/max: any NaN wins (unlike fmin/fmax, which drop NaNs).
template <typename T>
TALLY_HD T MinNan(T a, T b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  return b < a ? b : a;
}
template <typename T>
TALLY_HD T MaxNan(T a, T b) {
  if (IsNan(a)) return a;
  if (IsNan(b)) return b;
  return b > a ? b : a;
}

// A candidate for argmin/argmax: a value and where it was.
template <typename T>
struct ArgCandidate {
  T value;
  std::int64_t index;  // -1: no candidate yet
};

// numpy.argmin/argmax: the first NaN if there is one, else the first
// occurrence of the extreme value. `kMax` picks argmax.
template <bool kMax, typename T>
TALLY_HD bool Better(const ArgCandidate<T>& a, const ArgCandidate<T>& b) {
  // Is `a` the better answer than `b`?
  if (b.index < 0) return a.index >= 0;
  if (a.index < 0) return false;
  const bool a_nan = IsNan(a.value), b_nan = IsNan(b.value);
  if (a_nan || b_nan) {
    if (a_nan && b_nan) return a.index < b.index;
    return a_nan;
  }
  if (kMax ? (a.value > b.value) : (a.value < b.value)) return true;
  return a.value == b.value && a.index < b.index;
}
template <bool kMax, typename T>
TALLY_HD ArgCandidate<T> PickArg(const ArgCandidate<T>& a, const ArgCandidate<T>& b) {
  return Better<kMax>(a, b) ? a : b;
}

// Count, mean and sum of squared deviations (M2) of a set of values, in
// float64. Merging two of them (Chan, Golub & LeVeque) is exact in real
// arithmetic and numerically stable, unlike sum(x^2) - sum(x)^2 / n, so the
// variance of data with a large mean keeps its digits.
struct Moments {
  double count = 0.0;
  double mean = 0.0;
  double m2 = 0.0;
};

TALLY_HD Moments MergeMoments(const Moments& a, const Moments& b) {
  if (b.count == 0.0) return a;
  if (a.count == 0.0) return b;
  const double n = a.count + b.count;
  // An infinite or NaN mean (the values hold an infinity or a NaN): numpy's
  // mean is then the sum's, inf, -inf or NaN, which adding the two means
  // gives, and its variance NaN (x - mean is inf - inf). Chan's rule would
  // give NaN for the mean too (inf - inf in delta). x - x is 0 exactly when
  // x is finite.
  if (!((a.mean - a.mean) + (b.mean - b.mean) == 0.0)) {
    return Moments{n, a.mean + b.mean, __builtin_nan("")};
  }
  const double delta = b.mean - a.mean;
  const double wb = b.count / n;
  Moments r;
  r.count = n;
  r.mean = a.mean + delta * wb;
  r.m2 = a.m2 + b.m2 + delta * delta * a.count * wb;
  return r;
}

// numpy.var's final step: M2 / max(n - ddof, 0). A zero divisor gives inf,
// or NaN when M2 is 0 (numpy warns and returns the same).
TALLY_HD double VarianceOf(const Moments& m, double ddof) {
  if (m.count == 0.0) return __builtin_nan("");
  double divisor = m.count - ddof;
  if (divisor < 0.0) divisor = 0.0;
  return m.m2 / divisor;
}

// numpy.nanvar's final step on a float input (the moments of its non-NaN
// elements): M2 / (n - ddof), but NaN where n - ddof <= 0 ("Degrees of
// freedom <= 0"), where numpy.var gives inf. numpy.nanvar of an integer
// input is numpy.var (VarianceOf).
TALLY_HD double NanVarianceOf(const Moments& m, double ddof) {
  const double divisor = m.count - ddof;
  if (!(divisor > 0.0)) return __builtin_nan("");
  return m.m2 / divisor;
}

// numpy.mean's value from the moments: NaN when they cover no element.
TALLY_HD double MeanOf(const Moments& m) { return m.count == 0.0 ? __builtin_nan("") : m.mean; }

// numpy.std: the square root of numpy.var (VarianceOf). Host code only.
inline double StddevOf(const Moments& m, double ddof) { return std::sqrt(VarianceOf(m, ddof)); }
inline double NanStddevOf(const Moments& m, double ddof) { return std::sqrt(NanVarianceOf(m, ddof)); }

}  // namespace tally::rules
