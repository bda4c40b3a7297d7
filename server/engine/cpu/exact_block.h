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
// Narrow blocks take one grid (IsNarrowBlock, IsNarrowFloat64Block); the
// vector loops themselves are in exact_lanes.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "server/engine/cpu/block_kernels.h"
#include "server/engine/cpu/exact_lanes.h"
#include "server/engine/cpu/tuning.h"
#include "tally/rules/exact_sum.h"

namespace tally::cpu {

// Elements per exact block: the grids leave 11 bits for the count.
inline constexpr std::size_t kExactBlockElements = 2048;
static_assert(CpuPolicy::kBlockElements <= kExactBlockElements);

// One block's range pass (Float32RangeAndSum, Float64RangeAndSplits or
// BlockRangeAndSum), which the elements' exact sum and their squares'
// share: `plain` is the lane sum (float64 data: not computed, as its
// blocks are always split).
struct BlockRange {
  double top = 0.0;
  double bottom = 0.0;
  double plain = 0.0;
  bool not_finite = false;
  // Split in the same pass at the grids of a guessed binade `guess_e`
  // (RangeOfBlock's guess), where the block turns out narrow with that
  // binade: float64's elements (`split`: the high and low parts' sums;
  // AddExactBlock takes them), and float32's or float64's squares
  // (`split_squares`: float32's high and low parts; float64's x * x's high
  // and low parts, then its FMA errors'; AddExactSquares takes them).
  int guess_e = 0;
  bool has_split = false;
  bool has_split_squares = false;
  double split[2] = {0.0, 0.0};
  double split_squares[4] = {0.0, 0.0, 0.0, 0.0};
};

// `extremes` (float32 and float64 without skip_nan only; else null): the
// block's min and max as well, from the same pass.
//
// `guess_e`: where it is not kNoRangeGuess, the binade the block's largest
// magnitude is guessed to lie in (typically the block before's): the pass
// also splits what `splits` asks for at its grids (BlockRange::split,
// split_squares): float64's elements (kSplitElements), float32's and
// float64's squares (kSplitSquares). Other dtypes ignore it.
inline constexpr int kNoRangeGuess = std::numeric_limits<int>::min();
inline constexpr unsigned kSplitElements = 1;
inline constexpr unsigned kSplitSquares = 2;

namespace detail {

// Float64RangeAndSplits for the splits chosen at run time.
template <bool kSkipNan, bool kExtremes>
void Float64Range(const double* x, std::size_t n, LaneTotals<double>* extremes, bool elements, bool squares,
                  BlockRange& r) {
  if (elements && squares) {
    Float64RangeAndSplits<kSkipNan, kExtremes, true, true>(x, n, r.top, r.bottom, r.not_finite, extremes, r.guess_e,
                                                           r.split, r.split_squares);
  } else if (elements) {
    Float64RangeAndSplits<kSkipNan, kExtremes, true, false>(x, n, r.top, r.bottom, r.not_finite, extremes,
                                                            r.guess_e, r.split);
  } else if (squares) {
    Float64RangeAndSplits<kSkipNan, kExtremes, false, true>(x, n, r.top, r.bottom, r.not_finite, extremes,
                                                            r.guess_e, nullptr, r.split_squares);
  } else {
    Float64RangeAndSplits<kSkipNan, kExtremes>(x, n, r.top, r.bottom, r.not_finite, extremes);
  }
  r.has_split = elements;
  r.has_split_squares = squares;
}

}  // namespace detail

template <typename V>
BlockRange RangeOfBlock(const V* x, std::size_t n, bool skip_nan, std::type_identity_t<LaneTotals<V>>* extremes = nullptr,
                        int guess_e = kNoRangeGuess, unsigned splits = kSplitElements | kSplitSquares) {
  BlockRange r;
  if constexpr (std::is_same_v<V, float>) {
    // The guessed grid must be one NarrowSquaresLanes could take (float32's
    // binades: e from -148 to 128).
    if (guess_e >= -148 && guess_e <= 128 && (splits & kSplitSquares) != 0) {
      r.has_split_squares = true;
      r.guess_e = guess_e;
      if (extremes != nullptr) {
        r.plain = Float32RangeAndSum<false, true, true>(x, n, r.top, r.bottom, r.not_finite, extremes, guess_e,
                                                        r.split_squares);
      } else if ((splits & kSplitElements) == 0) {  // squares alone: no element sum (`plain` stays 0)
        r.plain = skip_nan ? Float32RangeAndSum<true, false, true, false>(x, n, r.top, r.bottom, r.not_finite,
                                                                          nullptr, guess_e, r.split_squares)
                           : Float32RangeAndSum<false, false, true, false>(x, n, r.top, r.bottom, r.not_finite,
                                                                           nullptr, guess_e, r.split_squares);
      } else if (skip_nan) {
        r.plain = Float32RangeAndSum<true, false, true>(x, n, r.top, r.bottom, r.not_finite, nullptr, guess_e,
                                                        r.split_squares);
      } else {
        r.plain = Float32RangeAndSum<false, false, true>(x, n, r.top, r.bottom, r.not_finite, nullptr, guess_e,
                                                         r.split_squares);
      }
    } else if (extremes != nullptr) {
      r.plain = Float32RangeAndSum<false, true>(x, n, r.top, r.bottom, r.not_finite, extremes);
    } else {
      r.plain = skip_nan ? Float32RangeAndSum<true>(x, n, r.top, r.bottom, r.not_finite)
                         : Float32RangeAndSum<false>(x, n, r.top, r.bottom, r.not_finite);
    }
  } else if constexpr (std::is_same_v<V, double>) {
    // The guessed grids must be ones NarrowSplitLanes (IsNarrowFloat64Block)
    // and NarrowSquares64Lanes (IsNarrowFloat64Squares) allow.
    const bool guessed = guess_e != kNoRangeGuess;
    const bool elements = guessed && guess_e >= -1000 && guess_e <= 1010 && (splits & kSplitElements) != 0;
    const bool squares = guessed && guess_e >= -469 && guess_e <= 506 && (splits & kSplitSquares) != 0;
    r.guess_e = guess_e;
    if (extremes != nullptr) {
      detail::Float64Range<false, true>(x, n, extremes, elements, squares, r);
    } else if (skip_nan) {
      detail::Float64Range<true, false>(x, n, nullptr, elements, squares, r);
    } else {
      detail::Float64Range<false, false>(x, n, nullptr, elements, squares, r);
    }
  } else {
    r.plain = skip_nan ? BlockRangeAndSum<true>(x, n, r.top, r.bottom, r.not_finite)
                       : BlockRangeAndSum<false>(x, n, r.top, r.bottom, r.not_finite);
  }
  return r;
}

// Whether a float64 block takes NarrowSplitLanes: finite, every non-zero
// magnitude within 2^33 of the largest (top < 2^e), and its grid a normal
// float64.
inline bool IsNarrowFloat64Block(double bottom, int e) { return e <= 1010 && e >= -1000 && bottom >= std::ldexp(1.0, e - 33); }

// Whether a float64 block's squares take NarrowSquares64Lanes' grids for
// binade `e`: finite, top < 2^e, every non-zero magnitude at least
// 2^(e-16), and e in [-469, 506], so that 2^(2e+11) is finite and every
// square's FMA error exact (its element at least 2^-485). `e` may lie above
// the block's own top binade (a guess that was too high).
inline bool IsNarrowFloat64Squares(const BlockRange& r, int e) {
  if (r.not_finite || e < -469 || e > 506) return false;
  return r.top < PowerOfTwo(e) && r.bottom >= PowerOfTwo(e - 16);
}

// Whether a block of elements of at most 24 significant bits (not float64)
// is narrow: every non-zero magnitude within 2^17 of the largest, top <
// 2^e, so every element is a multiple of 2^(e-40). Its plain lane sum is
// exact, and its squares split against one grid (NarrowSquaresLanes).
template <typename V>
bool IsNarrowBlock(const BlockRange& r, int e) {
  if constexpr (std::is_same_v<V, double>) {
    return false;
  } else {
    return r.bottom >= std::ldexp(1.0, e - 17);
  }
}

// Adds x[0, n) (n <= kExactBlockElements) to `into`, NaNs skipped when
// `skip_nan` (`summed`: the elements that are not skipped), given the
// block's range pass `r`.
//
// Elements of at most 24 significant bits (float32, float16, bfloat16)
// within 2^17 of the block's largest lie on its 2^-40 grid, so their plain
// float64 lane sum is already exact: one pass. Otherwise (and always for
// float64) the block is split against two grids, a second pass over it
// while it is in L1.
template <typename V>
void AddExactBlock(const V* x, std::size_t n, bool skip_nan, std::size_t summed, const BlockRange& r,
                   rules::ExactAccumulator& into) {
  auto any_other = [&] {
    for (std::size_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(x[i]);
      if (!(v == 0.0 && std::signbit(v)) && !(skip_nan && v != v)) return true;
    }
    return false;
  };
  if (!r.not_finite) {
    if (r.top == 0.0) {
      into.AddBlock(0.0, 0.0, summed, any_other);
      return;
    }
    int e = 0;
    std::frexp(r.top, &e);  // top < 2^e
    if (IsNarrowBlock<V>(r, e)) {
      into.AddBlock(r.plain, 0.0, summed, any_other);
      return;
    }
    if constexpr (std::is_same_v<V, double>) {
      if (IsNarrowFloat64Block(r.bottom, e)) {
        if (r.has_split && r.guess_e == e) {  // split in the range pass, at this grid
          into.AddBlock(r.split[0], r.split[1], summed, any_other);
          return;
        }
        double high = 0.0, low = 0.0;
        if (skip_nan) {
          NarrowSplitLanes<true>(x, n, e, high, low);
        } else {
          NarrowSplitLanes<false>(x, n, e, high, low);
        }
        into.AddBlock(high, low, summed, any_other);
        return;
      }
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

template <typename V>
void AddExactBlock(const V* x, std::size_t n, bool skip_nan, std::size_t summed, rules::ExactAccumulator& into) {
  AddExactBlock(x, n, skip_nan, summed, RangeOfBlock(x, n, skip_nan), into);
}

// Adds the squares of x[0, n) (n <= kExactBlockElements) to `into`, NaNs
// skipped when `skip_nan` (`summed`: the elements that are not). A float32,
// float16 or bfloat16 square is a double; a float64 square is two, x * x
// and its error by FMA (exact unless the error underflows: |x| below about
// 2^-485), given the block's range pass `r` (the one its elements' exact
// sum takes). A narrow block's squares take one extraction each
// (NarrowSquaresLanes), and a float64 block within 2^16 of its largest
// one each for x * x and its error (NarrowSquares64Lanes, or the range pass
// where its guess holds); other blocks one split pass (SplitSquaresLanes)
// where the squares lie within about 69 binades of the largest: about 1 ns
// an element on one core of this 2-vCPU host, where squaring into arrays and
// summing each through AddExactBlock took 4-6. Otherwise that: the squares
// and their errors in arrays, each through AddExactBlock. The errors are
// added as values only, so `into` counts the elements once. A square that
// overflows is an infinity, its error 0.
template <typename V>
void AddExactSquares(const V* x, std::size_t n, bool skip_nan, std::size_t summed, const BlockRange& r,
                     rules::ExactAccumulator& into) {
  constexpr bool kWide = std::is_same_v<V, double>;
  const double top_square = r.top * r.top;
  const auto any_other = [&] { return summed != 0; };  // a square is never -0.0
  if (!r.not_finite && top_square == 0.0) {
    into.AddBlock(0.0, 0.0, summed, any_other);
    return;
  }
  if (!r.not_finite && std::isfinite(top_square)) {
    int e_top = 0;
    std::frexp(r.top, &e_top);  // top < 2^e_top
    // Narrow blocks' grids: 2^(2e+11) finite and 2^(2e-80) not below the
    // least float64 for every e a 24-bit float has (at most 128, at least
    // -148).
    if (IsNarrowBlock<V>(r, e_top)) {
      if (r.has_split_squares && r.guess_e == e_top) {  // split in the range pass, at this grid
        into.AddBlock(r.split_squares[0], r.split_squares[1], summed, any_other);
        return;
      }
      double high = 0.0, low = 0.0;
      if (skip_nan) {
        NarrowSquaresLanes<true>(x, n, e_top, high, low);
      } else {
        NarrowSquaresLanes<false>(x, n, e_top, high, low);
      }
      into.AddBlock(high, low, summed, any_other);
      return;
    }
    if constexpr (kWide) {
      // One split a square: in the range pass at the guessed grids, else a
      // second pass at the block's own (NarrowSquares64Lanes).
      double parts[4] = {};
      const bool guessed = r.has_split_squares && IsNarrowFloat64Squares(r, r.guess_e);
      if (guessed || IsNarrowFloat64Squares(r, e_top)) {
        if (guessed) {
          std::copy_n(r.split_squares, 4, parts);
        } else if (skip_nan) {
          NarrowSquares64Lanes<true>(x, n, e_top, parts);
        } else {
          NarrowSquares64Lanes<false>(x, n, e_top, parts);
        }
        into.AddBlock(parts[0], parts[1], summed, any_other);
        into.AddBlock(parts[2], parts[3], 0, any_other);  // the errors, as values
        return;
      }
    }
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

template <typename V>
void AddExactSquares(const V* x, std::size_t n, bool skip_nan, std::size_t summed, rules::ExactAccumulator& into) {
  AddExactSquares(x, n, skip_nan, summed, RangeOfBlock(x, n, skip_nan), into);
}

}  // namespace tally::cpu
