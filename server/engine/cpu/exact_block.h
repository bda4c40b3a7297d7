// The exact sum of one block of float elements, at vector speed: the block's
// part of tally's exact float sums (tally/rules/exact_sum.h). Each element is
// split against two fixed grids derived from the block's largest magnitude
// (the extraction of Rump, Ogita and Oishi's AccSum): a high part that is a
// multiple of 2^(E-40) and a low part, itself split at 2^(E-81), where
// |x| < 2^E for every x. The high parts of at most 2^11 elements sum exactly
// in a float64 in any order, and so do the low parts; what is below the
// second grid must be zero (elements within about 29 binades of the largest
// for float64 data, 57 for float32), or the block takes the element-by-
// element path. So the answer is exact, and the same on every clone.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "server/engine/cpu/block_kernels.h"
#include "server/engine/cpu/tuning.h"
#include "tally/rules/exact_sum.h"

namespace tally::cpu {

// Elements per exact block: the grids leave 11 bits for the count.
inline constexpr std::size_t kExactBlockElements = 2048;
static_assert(CpuPolicy::kBlockElements <= kExactBlockElements);

// One pass over the block: its largest finite magnitude, its smallest
// non-zero finite one (infinity when there is none), whether some element
// is an infinity or a NaN (NaNs count as 0 when kSkipNan: nansum), and the
// float64 lane sum, which is exact when every element lies on the grid of
// the largest one's 2^-40 (AddExactBlock checks).
// float32: the range from the elements' bits as integers (a finite
// float's magnitude orders as its bits do), 16 to a 512-bit register where
// float64 lanes hold 8; only the sum converts to float64.
template <bool kSkipNan>
TALLY_CPU_CLONES double Float32RangeAndSum(const float* x, std::size_t n, double& top, double& bottom,
                                           bool& not_finite) {
  constexpr int L = CpuPolicy::kLanes;
  constexpr std::uint32_t kInfBits = 0x7f800000u;
  std::uint32_t hi[L] = {};
  std::uint32_t lo[L];
  double sum[L] = {};
  for (int j = 0; j < L; ++j) lo[j] = 0xffffffffu;
  auto step = [&](float v, int j) {
    std::uint32_t a = std::bit_cast<std::uint32_t>(v) & 0x7fffffffu;
    if constexpr (kSkipNan) {
      const bool nan = a > kInfBits;
      a = nan ? 0u : a;
      v = nan ? 0.0f : v;
    }
    hi[j] = a > hi[j] ? a : hi[j];  // an infinity or a NaN lands above every finite value
    const std::uint32_t nonzero = a != 0u ? a : 0xffffffffu;
    lo[j] = nonzero < lo[j] ? nonzero : lo[j];
    sum[j] += static_cast<double>(v);
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) step(x[i + j], j);
  }
  for (int j = 0; i < n; ++i, ++j) step(x[i], j);
  std::uint32_t h = 0, l = 0xffffffffu;
  double s = 0.0;
  for (int j = 0; j < L; ++j) {
    h = hi[j] > h ? hi[j] : h;
    l = lo[j] < l ? lo[j] : l;
    s += sum[j];
  }
  not_finite = h >= kInfBits;
  top = not_finite ? 0.0 : static_cast<double>(std::bit_cast<float>(h));
  bottom = l == 0xffffffffu ? std::numeric_limits<double>::infinity() : static_cast<double>(std::bit_cast<float>(l));
  return s;
}

template <bool kSkipNan, typename V>
TALLY_CPU_CLONES double BlockRangeAndSum(const V* x, std::size_t n, double& top, double& bottom, bool& not_finite) {
  constexpr int L = CpuPolicy::kLanes;
  constexpr double kMax = 1.7976931348623157e308;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double hi[L] = {};
  double lo[L];
  double bad[L] = {};
  double sum[L] = {};
  for (int j = 0; j < L; ++j) lo[j] = kInf;
  auto step = [&](double v, int j) {
    if constexpr (kSkipNan) v = v == v ? v : 0.0;
    const double a = std::fabs(v);
    const double finite = a <= kMax ? a : 0.0;
    bad[j] = a <= kMax ? bad[j] : 1.0;  // inf, or NaN unless skipped
    hi[j] = finite > hi[j] ? finite : hi[j];
    if constexpr (!std::is_same_v<V, double>) {  // a float64 block always takes the split
      const double nonzero = finite != 0.0 ? finite : kInf;
      lo[j] = nonzero < lo[j] ? nonzero : lo[j];
      sum[j] += v;
    }
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) step(static_cast<double>(x[i + j]), j);
  }
  for (int j = 0; i < n; ++i, ++j) step(static_cast<double>(x[i]), j);
  double t = 0.0, b = kInf, any = 0.0, s = 0.0;
  for (int j = 0; j < L; ++j) {
    t = hi[j] > t ? hi[j] : t;
    b = lo[j] < b ? lo[j] : b;
    any = bad[j] > any ? bad[j] : any;
    s += sum[j];
  }
  top = t;
  bottom = b;
  not_finite = any != 0.0;
  return s;
}

// sum(high parts) and sum(low parts) of x[0, n) against the grids of 2^e,
// both exact; false if some element has bits below the second grid.
template <bool kSkipNan, typename V>
TALLY_CPU_CLONES bool SplitSumLanes(const V* x, std::size_t n, int e, double& high, double& low) {
  constexpr int L = CpuPolicy::kLanes;
  const double sigma1 = std::ldexp(1.5, e + 12);  // ulp 2^(e-40)
  const double sigma2 = std::ldexp(1.5, e - 29);  // ulp 2^(e-81)
  double acc1[L] = {};
  double acc2[L] = {};
  double rest[L] = {};
  auto step = [&](double v, int j) {
    if constexpr (kSkipNan) v = v == v ? v : 0.0;
    const double h1 = (sigma1 + v) - sigma1;
    const double l1 = v - h1;
    const double h2 = (sigma2 + l1) - sigma2;
    acc1[j] += h1;
    acc2[j] += h2;
    rest[j] = l1 - h2 != 0.0 ? 1.0 : rest[j];
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) step(static_cast<double>(x[i + j]), j);
  }
  for (int j = 0; i < n; ++i, ++j) step(static_cast<double>(x[i]), j);
  double a = 0.0, b = 0.0, r = 0.0;
  for (int j = 0; j < L; ++j) {  // exact sums: the order does not matter
    a += acc1[j];
    b += acc2[j];
    r = rest[j] > r ? rest[j] : r;
  }
  high = a;
  low = b;
  return r == 0.0;
}

// Adds x[0, n) (n <= kExactBlockElements) to `into`, NaNs skipped when
// `skip_nan` (`summed`: the elements that are not skipped).
//
// Elements of at most 24 significant bits (float32, float16, bfloat16)
// within 2^17 of the block's largest lie on its 2^-40 grid, so their plain
// float64 lane sum is already exact: one pass. Otherwise (and always for
// float64) the block is split against two grids, a second pass over it
// while it is in L1.
template <typename V>
void AddExactBlock(const V* x, std::size_t n, bool skip_nan, std::size_t summed, rules::ExactAccumulator& into) {
  bool not_finite = false;
  double top = 0.0, bottom = 0.0;
  double plain = 0.0;
  if constexpr (std::is_same_v<V, float>) {
    plain = skip_nan ? Float32RangeAndSum<true>(x, n, top, bottom, not_finite)
                     : Float32RangeAndSum<false>(x, n, top, bottom, not_finite);
  } else {
    plain = skip_nan ? BlockRangeAndSum<true>(x, n, top, bottom, not_finite)
                     : BlockRangeAndSum<false>(x, n, top, bottom, not_finite);
  }
  auto any_other = [&] {
    for (std::size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(x[i]);
      if (!(v == 0.0 && std::signbit(v)) && !(skip_nan && v != v)) return true;
    }
    return false;
  };
  if (!not_finite) {
    if (top == 0.0) {
      into.AddBlock(0.0, 0.0, summed, any_other);
      return;
    }
    int e = 0;
    std::frexp(top, &e);  // top < 2^e
    constexpr bool kNarrow = !std::is_same_v<V, double>;
    if (kNarrow && bottom >= std::ldexp(1.0, e - 17)) {
      into.AddBlock(plain, 0.0, summed, any_other);
      return;
    }
    // The grids must be normal float64s: 2^(e+13) finite, 2^(e-81) not
    // below the smallest normal's ulp.
    double high = 0.0, low = 0.0;
    if (e <= 1010 && e >= -940 &&
        (skip_nan ? SplitSumLanes<true>(x, n, e, high, low) : SplitSumLanes<false>(x, n, e, high, low))) {
      into.AddBlock(high, low, summed, any_other);
      return;
    }
  }
  // Element by element, into the accumulator's ExactSum.
  into.AddElements(n, [&](std::size_t i, double& v) {
    v = static_cast<double>(x[i]);
    return !(skip_nan && v != v);
  });
}

// The squares of x[0, n) split against three grids of 2^e (x^2 < 2^e for
// every x: parts on 2^(e-40), 2^(e-81) and 2^(e-122)) and their FMA errors
// (float64 only) against three of 2^(e-53), as SplitSumLanes splits
// elements: exact float64 sums, one pass; false if some part has bits
// below its third grid (a square more than about 69 binades below the
// largest). Three levels, not SplitSumLanes' two: squares spread over
// twice the binades of their elements, and with two a quarter of the
// blocks of normal(0, 1) data took the element-by-element path.
template <bool kSkipNan, typename V>
TALLY_CPU_CLONES bool SplitSquaresLanes(const V* x, std::size_t n, int e, double (&parts)[6]) {
  constexpr int L = CpuPolicy::kLanes;
  constexpr bool kWide = std::is_same_v<V, double>;
  double sigma[6];
  for (int k = 0; k < 6; ++k) sigma[k] = std::ldexp(1.5, e + 12 - 41 * (k % 3) - (k < 3 ? 0 : 53));
  double acc[6][L] = {};
  double rest[L] = {};
  auto split = [&](double v, const double* s, double (*a)[L], int j) {
    const double h1 = (s[0] + v) - s[0];
    const double l1 = v - h1;
    const double h2 = (s[1] + l1) - s[1];
    const double l2 = l1 - h2;
    const double h3 = (s[2] + l2) - s[2];
    a[0][j] += h1;
    a[1][j] += h2;
    a[2][j] += h3;
    return l2 - h3;
  };
  auto step = [&](double v, int j) {
    if constexpr (kSkipNan) v = v == v ? v : 0.0;
    const double q = v * v;
    double bad = split(q, sigma, acc, j);
    if constexpr (kWide) {
      const double err = split(std::fma(v, v, -q), sigma + 3, acc + 3, j);
      bad = bad != 0.0 ? bad : err;
    }
    rest[j] = bad != 0.0 ? 1.0 : rest[j];
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) step(static_cast<double>(x[i + j]), j);
  }
  for (int j = 0; i < n; ++i, ++j) step(static_cast<double>(x[i]), j);
  double r = 0.0;
  for (int k = 0; k < 6; ++k) {
    double t = 0.0;
    for (int j = 0; j < L; ++j) t += acc[k][j];  // exact sums: the order does not matter
    parts[k] = t;
  }
  for (int j = 0; j < L; ++j) r = rest[j] > r ? rest[j] : r;
  return r == 0.0;
}

// Adds the squares of x[0, n) (n <= kExactBlockElements) to `into`, NaNs
// skipped when `skip_nan` (`summed`: the elements that are not). A float32,
// float16 or bfloat16 square is a double; a float64 square is two, x * x
// and its error by FMA (exact unless the error underflows: |x| below about
// 2^-485). One range pass and one split pass (SplitSquaresLanes) where the
// squares lie within about 69 binades of the largest: about 1 ns an
// element on one core of this 2-vCPU host, where squaring into arrays and
// summing each through AddExactBlock took 4-6. Otherwise that: the squares
// and their errors in arrays, each through AddExactBlock. The errors are
// added as values only, so `into` counts the elements once. A square that
// overflows is an infinity, its error 0.
template <typename V>
void AddExactSquares(const V* x, std::size_t n, bool skip_nan, std::size_t summed, rules::ExactAccumulator& into) {
  constexpr bool kWide = std::is_same_v<V, double>;
  double top = 0.0, bottom = 0.0;
  bool not_finite = false;
  if (skip_nan) {
    BlockRangeAndSum<true>(x, n, top, bottom, not_finite);
  } else {
    BlockRangeAndSum<false>(x, n, top, bottom, not_finite);
  }
  const double top_square = top * top;
  const auto any_other = [&] { return summed != 0; };  // a square is never -0.0
  if (!not_finite && top_square == 0.0) {
    into.AddBlock(0.0, 0.0, summed, any_other);
    return;
  }
  if (!not_finite && std::isfinite(top_square)) {
    int e = 0;
    std::frexp(top_square, &e);  // top^2 < 2^e
    // Every grid a normal float64: 2^(e+13) finite, the last (2^(e-122),
    // the errors' 2^(e-175)) not below the smallest normal's ulp.
    double parts[6] = {};
    if (e <= 1010 && e >= (kWide ? -899 : -952) &&
        (skip_nan ? SplitSquaresLanes<true>(x, n, e, parts) : SplitSquaresLanes<false>(x, n, e, parts))) {
      into.AddBlock(parts[0], parts[1], summed, any_other);
      rules::ExactAccumulator more;  // the other parts, as values only
      more.AddBlock(parts[2], parts[3], 0, any_other);
      more.AddBlock(parts[4], parts[5], 0, any_other);
      into.AddValueOf(more);
      return;
    }
  }
  double squares[kExactBlockElements];
  for (std::size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    squares[i] = v * v;
  }
  AddExactBlock(squares, n, skip_nan, summed, into);
  if constexpr (kWide) {
    double errors_of[kExactBlockElements];
    for (std::size_t i = 0; i < n; ++i) {
      const double v = x[i];
      errors_of[i] = std::isfinite(squares[i]) ? std::fma(v, v, -squares[i]) : 0.0;  // NaN, inf: 0
    }
    rules::ExactAccumulator errors;
    AddExactBlock(errors_of, n, /*skip_nan=*/false, n, errors);
    into.AddValueOf(errors);
  }
}

}  // namespace tally::cpu
