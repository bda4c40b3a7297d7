// The vector loops of the exact block sums (exact_block.h): a block's
// range pass (its largest and least magnitudes, whether all are finite,
// the plain lane sum, and on request min/max and a split at a guessed
// grid) and the splits of elements and squares against grids fixed by the
// block's largest magnitude, each summing its parts in float64 lanes that
// stay exact. Each is compiled for the x86-64 levels (TALLY_CPU_CLONES).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "server/engine/cpu/block_kernels.h"
#include "server/engine/cpu/tuning.h"
#include "tally/rules/combine.h"

namespace tally::cpu {

// Two parts' lane sums folded into out[0] and out[1]: exact sums of
// values on one grid, so the order does not matter (when the split's
// grid held; the callers check).
template <int L>
inline void FoldParts(const double (&high)[L], const double (&low)[L], double* out) {
  double a = 0.0, b = 0.0;
  for (int j = 0; j < L; ++j) {
    a += high[j];
    b += low[j];
  }
  out[0] = a;
  out[1] = b;
}

// One pass over the block: its largest finite magnitude, its smallest
// non-zero finite one (infinity when there is none), whether some element
// is an infinity or a NaN (NaNs count as 0 when kSkipNan: nansum), and the
// float64 lane sum, which is exact when every element lies on the grid of
// the largest one's 2^-40 (AddExactBlock checks).
// float32: the range from the elements' bits as integers (a finite
// float's magnitude orders as its bits do), 16 to a 512-bit register where
// float64 lanes hold 8; only the sum converts to float64. With kExtremes
// the same pass also takes the block's min and max into `extremes` as
// FusedLanes does (the same lanes and tree, so the same bits: a NaN wins,
// and of equal zeros the one FusedLanes keeps), so a plan with a float sum
// and min or max reads a block once.
//
// With kSquares the pass also splits each element's square at the grid a
// narrow block whose largest magnitude lies in [2^(e-1), 2^e) takes
// (NarrowSquaresLanes) for e = `squares_e`, a guess (the block before's);
// `squares` gets the two parts' sums, which are the exact sum of the
// squares only if the block turns out narrow with that e (the caller
// checks), so the squares cost no second pass when the guess holds.
// Without kSum (squares alone: sum_squares, whose plan wants no element
// sum) the lane sum is left out and 0 returned.
template <bool kSkipNan, bool kExtremes = false, bool kSquares = false, bool kSum = true>
TALLY_CPU_CLONES double Float32RangeAndSum(const float* x, std::size_t n, double& top, double& bottom,
                                           bool& not_finite, LaneTotals<float>* extremes = nullptr,
                                           int squares_e = 0, double* squares = nullptr) {
  static_assert(!(kSkipNan && kExtremes), "NaN-skipping extremes are NanLanes'");
  static_assert(kSum || kSquares, "a pass for the range alone is not needed");
  constexpr int L = CpuPolicy::kLanes;
  static_assert(L == kLanesOf<float>, "FusedLanes' lanes, for the same extremes");
  constexpr std::uint32_t kInfBits = 0x7f800000u;
  const double sigma = kSquares ? std::ldexp(1.5, 2 * squares_e + 10) : 0.0;  // NarrowSquaresLanes' grid
  std::uint32_t hi[L] = {};
  std::uint32_t lo[L];
  double sum[L] = {};
  double sq_high[L] = {};
  double sq_low[L] = {};
  float mn[L], mx[L], nan[L];
  for (int j = 0; j < L; ++j) {
    lo[j] = 0xffffffffu;
    mn[j] = MinIdentity<float>();
    mx[j] = MaxIdentity<float>();
    nan[j] = 0.0f;
  }
  auto step = [&](float v, int j) {
    if constexpr (kExtremes) {
      mn[j] = v < mn[j] ? v : mn[j];
      mx[j] = v > mx[j] ? v : mx[j];
      nan[j] = v != v ? v : nan[j];
    }
    std::uint32_t a = std::bit_cast<std::uint32_t>(v) & 0x7fffffffu;
    if constexpr (kSkipNan) {
      const bool is_nan = a > kInfBits;
      a = is_nan ? 0u : a;
      v = is_nan ? 0.0f : v;
    }
    hi[j] = a > hi[j] ? a : hi[j];  // an infinity or a NaN lands above every finite value
    const std::uint32_t nonzero = a != 0u ? a : 0xffffffffu;
    lo[j] = nonzero < lo[j] ? nonzero : lo[j];
    const double d = static_cast<double>(v);
    if constexpr (kSum) sum[j] += d;
    if constexpr (kSquares) {
      // d * d is exact (48 bits at most), so one rounding of sigma + d^2
      // and the exact d^2 - h by FMAs are (sigma + q) - sigma and q - h
      // for q = d * d, one multiply fewer.
      const double h = std::fma(d, d, sigma) - sigma;
      sq_high[j] += h;
      sq_low[j] += std::fma(d, d, -h);
    }
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
  if constexpr (kSquares) FoldParts<L>(sq_high, sq_low, squares);
  if constexpr (kExtremes) {
    extremes->min = LaneMin<L>(mn);
    extremes->max = LaneMax<L>(mx);
    NanWins<L>(nan, extremes);
  }
  return s;
}

// 2^e and 1.5 * 2^e for e in float64's normal range, [-1022, 1023], from
// their bits: a block's grids without a libm call (ldexp showed in
// profiles of the squares' pass).
inline double PowerOfTwo(int e) { return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52); }
inline double OneAndAHalfTimesPowerOfTwo(int e) {
  return std::bit_cast<double>((static_cast<std::uint64_t>(e + 1023) << 52) | (std::uint64_t{1} << 51));
}

// The grids at which a float64 block whose non-zero magnitudes lie in
// [2^(e-16), 2^e) splits its squares once each (NarrowSquares64Lanes):
// x * x at 2^(2e-42), its FMA error at 2^(2e-96), as the sigmas (1.5 times
// 2^(grid + 52)) that extract them.
struct Float64SquaresGrids {
  double square;
  double error;
};
inline Float64SquaresGrids SquaresGridsOf(int e) {
  return {OneAndAHalfTimesPowerOfTwo(2 * e + 10), OneAndAHalfTimesPowerOfTwo(2 * e - 44)};
}

// One float64 element's square into four lane sums at `g`'s grids: x * x's
// high and low parts and its FMA error's (NarrowSquares64Lanes says why
// they stay exact). The high part is x^2 rounded once to its grid, an FMA
// with the sigma rather than an add to x * x: the same guarantees, and one
// add fewer on the two pipes of Zen's four that add (the loop's bound).
inline void SplitSquare64(double v, const Float64SquaresGrids& g, double& square_high, double& square_low,
                          double& error_high, double& error_low) {
  const double q = v * v;
  const double err = std::fma(v, v, -q);
  const double h = std::fma(v, v, g.square) - g.square;
  const double eh = (g.error + err) - g.error;
  square_high += h;
  square_low += q - h;
  error_high += eh;
  error_low += err - eh;
}

// float64's range pass, as Float32RangeAndSum's: the range from the
// elements' bits as integers (a finite double's magnitude orders as its
// bits do, an infinity or a NaN lands above every finite one, and a zero's
// bits less one wrap to the largest, out of the least non-zero one's way):
// four integer operations an element where comparing doubles took eight.
// No lane sum: float64 blocks are always split. top and bottom mean
// something only where not_finite is false (else 0 and infinity). With
// kExtremes, min and max as FusedLanes takes them.
//
// kSplit: the pass also splits each element at the grid a narrow float64
// block whose largest magnitude lies in [2^(e-1), 2^e) takes
// (NarrowSplitLanes) for e = `guess_e`, a guess (the block before's);
// `split` gets the two parts' sums, the block's exact sum only if it turns
// out narrow with that e (the caller checks).
//
// kSquares: the pass also splits each element's square and its FMA error
// at the grids NarrowSquares64Lanes takes for e = `guess_e`; `squares`
// gets the four parts' sums, the exact sum of the squares only where every
// non-zero magnitude lies in [2^(guess_e-16), 2^guess_e) (the caller
// checks: IsNarrowFloat64Squares). So a float64 block's sum and squares
// cost one pass where the guess holds.
template <bool kSkipNan, bool kExtremes = false, bool kSplit = false, bool kSquares = false>
TALLY_CPU_CLONES void Float64RangeAndSplits(const double* x, std::size_t n, double& top, double& bottom,
                                            bool& not_finite, LaneTotals<double>* extremes = nullptr,
                                            int guess_e = 0, double* split = nullptr, double* squares = nullptr) {
  static_assert(!(kSkipNan && kExtremes), "NaN-skipping extremes are NanLanes'");
  constexpr int L = kExtremes ? CpuPolicy::kLanes : CpuPolicy::kFloat64RangeLanes;
  static_assert(!kExtremes || L == kLanesOf<double>, "FusedLanes' lanes, for the same extremes");
  constexpr std::uint64_t kInfBits = 0x7ff0000000000000u;
  constexpr std::uint64_t kMagnitude = 0x7fffffffffffffffu;
  const double sigma = kSplit ? OneAndAHalfTimesPowerOfTwo(guess_e + 10) : 0.0;  // NarrowSplitLanes' grid
  const Float64SquaresGrids grids = kSquares ? SquaresGridsOf(guess_e) : Float64SquaresGrids{0.0, 0.0};
  std::uint64_t hi[L] = {};
  std::uint64_t lo[L];
  double split_high[L] = {};
  double split_low[L] = {};
  double sq[4][L] = {};
  double mn[L], mx[L], nan[L];
  for (int j = 0; j < L; ++j) {
    lo[j] = ~std::uint64_t{0};
    mn[j] = MinIdentity<double>();
    mx[j] = MaxIdentity<double>();
    nan[j] = 0.0;
  }
  auto step = [&](double v, int j) {
    if constexpr (kExtremes) {
      mn[j] = v < mn[j] ? v : mn[j];
      mx[j] = v > mx[j] ? v : mx[j];
      nan[j] = v != v ? v : nan[j];
    }
    std::uint64_t bits = std::bit_cast<std::uint64_t>(v);
    if constexpr (kSkipNan) {  // a NaN's bits cleared: +0.0 (a mask, not selects, which became a branch)
      bits &= std::uint64_t{0} - static_cast<std::uint64_t>((bits & kMagnitude) <= kInfBits);
      v = std::bit_cast<double>(bits);
    }
    const std::uint64_t a = bits & kMagnitude;
    hi[j] = a > hi[j] ? a : hi[j];
    const std::uint64_t below = a - 1;  // a zero's wraps to the largest
    lo[j] = below < lo[j] ? below : lo[j];
    if constexpr (kSplit) {
      const double h = (sigma + v) - sigma;
      split_high[j] += h;
      split_low[j] += v - h;
    }
    if constexpr (kSquares) SplitSquare64(v, grids, sq[0][j], sq[1][j], sq[2][j], sq[3][j]);
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) step(x[i + j], j);
  }
  for (int j = 0; i < n; ++i, ++j) step(x[i], j);
  std::uint64_t h = 0, l = ~std::uint64_t{0};
  for (int j = 0; j < L; ++j) {
    h = hi[j] > h ? hi[j] : h;
    l = lo[j] < l ? lo[j] : l;
  }
  not_finite = h >= kInfBits;
  top = not_finite ? 0.0 : std::bit_cast<double>(h);
  bottom = not_finite || l == ~std::uint64_t{0} ? std::numeric_limits<double>::infinity()
                                                : std::bit_cast<double>(l + 1);
  if constexpr (kSplit) FoldParts<L>(split_high, split_low, split);
  if constexpr (kSquares) {
    FoldParts<L>(sq[0], sq[1], squares);
    FoldParts<L>(sq[2], sq[3], squares + 2);
  }
  if constexpr (kExtremes) {
    extremes->min = LaneMin<L>(mn);
    extremes->max = LaneMax<L>(mx);
    NanWins<L>(nan, extremes);
  }
}

// The range pass of float16 and bfloat16 blocks, as Float32RangeAndSum's
// without extremes or splits: every such element converts to a float
// exactly, so the range compares doubles, and the lane sum is the narrow
// block's exact sum (IsNarrowBlock).
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
    const double nonzero = finite != 0.0 ? finite : kInf;
    lo[j] = nonzero < lo[j] ? nonzero : lo[j];
    sum[j] += v;
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

// One extraction an element at the grid of `sigma` (1.5 times 2^(grid +
// 52)): the high parts' and the low parts' sums of the elements (kSquare:
// of their squares), each exact where the caller's block allows it (the
// two callers below say why).
template <bool kSkipNan, bool kSquare, typename V>
TALLY_CPU_CLONES void SplitOnceLanes(const V* x, std::size_t n, double sigma, double& high, double& low) {
  constexpr int L = CpuPolicy::kLanes;
  double acc1[L] = {};
  double acc2[L] = {};
  auto step = [&](double v, int j) {
    if constexpr (kSkipNan) v = v == v ? v : 0.0;
    if constexpr (kSquare) v = v * v;
    const double h = (sigma + v) - sigma;
    acc1[j] += h;
    acc2[j] += v - h;
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) step(static_cast<double>(x[i + j]), j);
  }
  for (int j = 0; i < n; ++i, ++j) step(static_cast<double>(x[i]), j);
  double a = 0.0, b = 0.0;
  for (int j = 0; j < L; ++j) {  // exact sums: the order does not matter
    a += acc1[j];
    b += acc2[j];
  }
  high = a;
  low = b;
}

// sum(high parts) and sum(low parts) of a float64 block whose non-zero
// magnitudes lie in [2^(e-33), 2^e) (IsNarrowFloat64Block): split once at
// 2^(e-42), the high parts of 2^11 elements sum exactly in a float64 (below
// 2^(e+11) on that grid), and so do the low parts (below 2^(e-32), each a
// multiple of the least element's ulp, at least 2^(e-85)): no check.
template <bool kSkipNan>
void NarrowSplitLanes(const double* x, std::size_t n, int e, double& high, double& low) {
  SplitOnceLanes<kSkipNan, false>(x, n, std::ldexp(1.5, e + 10), high, low);  // ulp 2^(e-42)
}

// The squares of a narrow block's elements (IsNarrowBlock: multiples of
// 2^(e-40) below 2^e), each exact in float64 (at most 48 significant bits),
// a multiple of 2^(2e-80) below 2^(2e). Split at 2^(2e-42), the high parts
// of 2^11 squares sum exactly in a float64 (below 2^(2e+11) on that grid)
// and so do the low parts (below 2^(2e-32) on 2^(2e-80)), in any order:
// no check, and one extraction a square where the general split makes
// three.
template <bool kSkipNan, typename V>
void NarrowSquaresLanes(const V* x, std::size_t n, int e, double& high, double& low) {
  SplitOnceLanes<kSkipNan, true>(x, n, std::ldexp(1.5, 2 * e + 10), high, low);  // ulp 2^(2e-42)
}

// The squares of a float64 block whose non-zero magnitudes lie in
// [2^(e-16), 2^e), e in [-469, 506] (IsNarrowFloat64Squares), one split
// each at SquaresGridsOf(e), as the range pass splits them with a guess:
// four float64 sums, each exact in any order, no check. For such x, q = x *
// x lies in [2^(2e-32), 2^(2e)] and its FMA error err = x^2 - q is exact
// (x at least 2^-485), below 2^(2e-54) in size and a multiple of ulp(x)^2,
// at least 2^(2e-136). The high part h is x^2 rounded to a multiple of
// 2^(2e-42), at most 2^(2e); the low part q - h is exact, a multiple of
// ulp(q) (at least 2^(2e-84)) of at most 2^(2e-43) + ulp(q)/2. Of 2^11
// elements: the high parts' sums stay below 2^(2e+11) on their grid (53
// bits), the low parts' below 2^(2e-32) + 2^(2e-43) on theirs (under 53);
// err's high parts are multiples of 2^(2e-96) of at most 2^(2e-54) (53
// bits with the count), its low parts multiples of 2^(2e-136) of at most
// 2^(2e-97) (50 bits). Twelve operations a square where the general split
// (SplitSquaresLanes) takes about 29.
template <bool kSkipNan>
TALLY_CPU_CLONES void NarrowSquares64Lanes(const double* x, std::size_t n, int e, double (&parts)[4]) {
  constexpr int L = CpuPolicy::kLanes;
  const Float64SquaresGrids grids = SquaresGridsOf(e);
  double sq[4][L] = {};
  auto step = [&](double v, int j) {
    if constexpr (kSkipNan) v = v == v ? v : 0.0;
    SplitSquare64(v, grids, sq[0][j], sq[1][j], sq[2][j], sq[3][j]);
  };
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int j = 0; j < L; ++j) step(x[i + j], j);
  }
  for (int j = 0; i < n; ++i, ++j) step(x[i], j);
  FoldParts<L>(sq[0], sq[1], parts);
  FoldParts<L>(sq[2], sq[3], parts + 2);
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

}  // namespace tally::cpu
