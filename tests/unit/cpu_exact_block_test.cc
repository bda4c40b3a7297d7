// The CPU's exact block sums (server/engine/cpu/exact_block.h) and the
// compact accumulator (rules::ExactAccumulator) against rules::ExactSum of
// the same elements: the same bytes, however the blocks are cut and merged,
// on the fast path and on the element-by-element one; and so of the
// blocks' squares (AddExactSquares).
#include "server/engine/cpu/exact_block.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "tally/rules/half.h"
#include "tests/unit/test_seed.h"

namespace tally::cpu {
namespace {

using rules::ExactAccumulator;
using rules::ExactSum;

enum class Data { kNormal, kUniform, kWide, kNegativeZeros, kTinyAndHuge, kWithNan, kWithInf };

template <typename V>
std::vector<V> Make(Data d, std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::lognormal_distribution<double> wide(0.0, 12.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<V> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    double x = 0.0;
    switch (d) {
      case Data::kNormal: x = normal(rng); break;
      case Data::kUniform: x = uniform(rng); break;
      case Data::kWide: x = wide(rng) * ((rng() & 1) != 0 ? 1 : -1); break;
      case Data::kNegativeZeros: x = -0.0; break;
      case Data::kTinyAndHuge:
        x = (rng() % 3 == 0) ? std::ldexp(normal(rng), -1030) : std::ldexp(normal(rng), (rng() & 1) != 0 ? 1015 : -900);
        break;
      case Data::kWithNan: x = rng() % 17 == 0 ? std::numeric_limits<double>::quiet_NaN() : normal(rng); break;
      case Data::kWithInf: x = rng() % 501 == 0 ? std::numeric_limits<double>::infinity() : normal(rng); break;
    }
    v[i] = static_cast<V>(x);
  }
  return v;
}

// `squares`: AddExactSquares against the rules' squares (x * x, and for
// float64 its FMA error as a value), else AddExactBlock against the values.
template <typename V>
void CheckEveryCut(Data d, bool skip_nan, bool squares = false) {
  TALLY_SEEDED_RNG(rng);
  for (const std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{2048}, std::size_t{2048 * 5 + 77}}) {
    const std::vector<V> x = Make<V>(d, n, rng);
    ExactSum want;
    std::size_t summed_all = 0;
    for (const V& v : x) {
      const double e = static_cast<double>(v);
      if (skip_nan && std::isnan(e)) continue;
      ++summed_all;
      if (!squares) {
        want.Add(e);
        continue;
      }
      const double high = e * e;
      want.Add(high);
      if (std::is_same_v<V, double> && std::isfinite(high)) want.AddValue(std::fma(e, e, -high));
    }
    // Random cuts into blocks of at most 2048, each block its own
    // accumulator, merged in a random order.
    std::vector<ExactAccumulator> parts;
    for (std::size_t at = 0; at < n;) {
      const std::size_t len = std::min<std::size_t>(n - at, 1 + rng() % 2048);
      std::size_t summed = 0;
      for (std::size_t i = at; i < at + len; ++i) summed += skip_nan && std::isnan(static_cast<double>(x[i])) ? 0 : 1;
      ExactAccumulator a;
      // The range pass may split float32's squares and float64's elements
      // at a guessed grid (RangeOfBlock's guess_e): none, the block's own,
      // or a wrong one; for the squares, with the elements' split or
      // without it (sum_squares alone takes no element sum).
      int e = 0;
      std::frexp(RangeOfBlock(x.data() + at, len, skip_nan).top, &e);
      const int pick = static_cast<int>(rng() % 4);
      const int guess = pick == 0 ? kNoRangeGuess : e + (pick == 1 ? 0 : (pick == 2 ? 1 : -1));
      const unsigned splits = squares && rng() % 2 == 0 ? kSplitSquares : kSplitElements | kSplitSquares;
      const BlockRange range = RangeOfBlock(x.data() + at, len, skip_nan, nullptr, guess, splits);
      if (squares) {
        AddExactSquares(x.data() + at, len, skip_nan, summed, range, a);
      } else {
        AddExactBlock(x.data() + at, len, skip_nan, summed, range, a);
      }
      parts.push_back(std::move(a));
      at += len;
    }
    std::shuffle(parts.begin(), parts.end(), rng);
    ExactAccumulator got;
    for (const ExactAccumulator& p : parts) got.Merge(p);
    const std::string what = std::string(squares ? "squares, " : "") + "n=" + std::to_string(n) + " data " +
                             std::to_string(static_cast<int>(d));
    EXPECT_EQ(got.count(), summed_all) << what;
    EXPECT_EQ(want.Bytes(), got.ToExactSum().Bytes()) << what;
    for (const rules::FloatFormat f : {rules::kFloat64Format, rules::kFloat32Format, rules::kFloat16Format}) {
      const double a = want.Rounded(f), b = got.Rounded(f);
      if (std::isnan(a)) {
        EXPECT_TRUE(std::isnan(b)) << what;
      } else {
        EXPECT_EQ(0, std::memcmp(&a, &b, sizeof a)) << what << " precision " << f.precision << ": " << a << " " << b;
      }
    }
  }
}

TEST(ExactBlock, Float64EqualsExactSumForEveryDataAndCut) {
  for (const Data d : {Data::kNormal, Data::kUniform, Data::kWide, Data::kNegativeZeros, Data::kTinyAndHuge,
                       Data::kWithInf}) {
    CheckEveryCut<double>(d, false);
  }
  CheckEveryCut<double>(Data::kWithNan, true);
  CheckEveryCut<double>(Data::kWithNan, false);
}

TEST(ExactBlock, Float32EqualsExactSumForEveryDataAndCut) {
  for (const Data d : {Data::kNormal, Data::kUniform, Data::kWide, Data::kNegativeZeros, Data::kWithInf}) {
    CheckEveryCut<float>(d, false);
  }
  CheckEveryCut<float>(Data::kWithNan, true);
}

TEST(ExactBlock, Float16EqualsExactSum) {
  CheckEveryCut<rules::Float16>(Data::kNormal, false);
  CheckEveryCut<rules::Float16>(Data::kWithNan, true);
}

// The squares' split (three levels, errors beside) and the arrays' path
// for blocks it cannot take (wide, tiny and huge, infinities) alike.
TEST(ExactSquares, EqualExactSumsOfTheSquaresForEveryDataAndCut) {
  for (const Data d : {Data::kNormal, Data::kUniform, Data::kWide, Data::kNegativeZeros, Data::kTinyAndHuge,
                       Data::kWithInf}) {
    CheckEveryCut<double>(d, false, true);
    CheckEveryCut<float>(d, false, true);
  }
  CheckEveryCut<double>(Data::kWithNan, true, true);
  CheckEveryCut<double>(Data::kWithNan, false, true);
  CheckEveryCut<float>(Data::kWithNan, true, true);
  CheckEveryCut<rules::Float16>(Data::kNormal, false, true);
  CheckEveryCut<rules::BFloat16>(Data::kNormal, false, true);
  CheckEveryCut<rules::BFloat16>(Data::kWithNan, true, true);
}

// A narrow block's squares take one grid and no check (NarrowSquaresLanes):
// exact at the limits that proof rests on. Full blocks of float32 whose
// magnitudes fill [2^(e-17), 2^e) with every significand bit set or random,
// for e from float32's largest binade down to where the elements are
// subnormal, and the block is narrow.
TEST(ExactSquares, NarrowBlocksAreExactAtTheirLimits) {
  TALLY_SEEDED_RNG(rng);
  for (const int e : {128, 127, 64, 1, 0, -60, -108, -111, -131}) {
    for (const bool all_ones : {true, false}) {
      std::vector<float> x(kExactBlockElements);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const int k = i == 0 ? e - 1 : (i == 1 ? e - 17 : e - 17 + static_cast<int>(rng() % 17));
        const std::uint32_t frac = all_ones ? 0x7fffffu : static_cast<std::uint32_t>(rng() & 0x7fffffu);
        const double m = 1.0 + std::ldexp(static_cast<double>(i == 1 ? 0u : frac), -23);
        x[i] = static_cast<float>(std::ldexp((rng() & 1) != 0 ? m : -m, k));  // subnormals round
      }
      const BlockRange range = RangeOfBlock(x.data(), x.size(), false);
      int top_e = 0;
      std::frexp(range.top, &top_e);
      if (e - 1 >= -126) {  // a subnormal largest may round into the next binade
        ASSERT_EQ(e, top_e);
      }
      if (!IsNarrowBlock<float>(range, top_e)) {
        // Below float32's normals the rounding of the least elements may
        // leave the range; only those cases may be wide.
        ASSERT_LT(e - 17, -126) << e;
        continue;
      }
      ExactSum want;
      for (const float v : x) want.Add(static_cast<double>(v) * static_cast<double>(v));
      ExactAccumulator got, split_in_range_pass;
      AddExactSquares(x.data(), x.size(), false, x.size(), range, got);
      EXPECT_EQ(want.Bytes(), got.ToExactSum().Bytes()) << "e=" << e << " all_ones=" << all_ones;
      const BlockRange guessed = RangeOfBlock(x.data(), x.size(), false, nullptr, top_e);
      ASSERT_TRUE(guessed.has_split_squares);
      AddExactSquares(x.data(), x.size(), false, x.size(), guessed, split_in_range_pass);
      EXPECT_EQ(want.Bytes(), split_in_range_pass.ToExactSum().Bytes()) << "guessed, e=" << e;
    }
  }
}

// A narrow float64 block splits once, with no check (NarrowSplitLanes, or
// the range pass at a guessed grid): exact at the limits that proof rests
// on. Full blocks whose magnitudes lie in [2^(e-33), 2^e), most of them
// near the top and of one sign (the high parts' sum near 2^(e+11)), the
// rest spread down to the least magnitude with every significand bit set
// (the low parts' sum at its grid's limit).
TEST(ExactBlock, NarrowFloat64BlocksAreExactAtTheirLimits) {
  TALLY_SEEDED_RNG(rng);
  for (const int e : {1010, 300, 1, 0, -1, -500, -1000}) {
    for (const bool one_sign : {true, false}) {
      std::vector<double> x(kExactBlockElements);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const bool near_top = i % 8 != 0;
        const int k = i == 1 ? e - 33 : (near_top ? e - 1 : e - 33 + static_cast<int>(rng() % 33));
        const std::uint64_t frac = (i % 3 == 0 ? ~std::uint64_t{0} : rng()) & ((std::uint64_t{1} << 52) - 1);
        const double m = 1.0 + std::ldexp(static_cast<double>(frac), -52);
        const bool negative = !one_sign && (rng() & 1) != 0;
        x[i] = std::ldexp(negative ? -m : m, k);
      }
      const BlockRange range = RangeOfBlock(x.data(), x.size(), false);
      int top_e = 0;
      std::frexp(range.top, &top_e);
      ASSERT_EQ(e, top_e);
      ASSERT_TRUE(IsNarrowFloat64Block(range.bottom, top_e));
      ExactSum want;
      for (const double v : x) want.Add(v);
      ExactAccumulator plain, guessed;
      AddExactBlock(x.data(), x.size(), false, x.size(), range, plain);
      EXPECT_EQ(want.Bytes(), plain.ToExactSum().Bytes()) << "e=" << e << " one_sign=" << one_sign;
      const BlockRange with_guess = RangeOfBlock(x.data(), x.size(), false, nullptr, top_e);
      ASSERT_TRUE(with_guess.has_split);
      AddExactBlock(x.data(), x.size(), false, x.size(), with_guess, guessed);
      EXPECT_EQ(want.Bytes(), guessed.ToExactSum().Bytes()) << "guessed, e=" << e << " one_sign=" << one_sign;
    }
  }
}

// The exact sum of float64 squares, by integers alone (no FMA, no
// ExactSum): each x = m 2^(p-53) with m an integer below 2^53, so x^2 =
// m^2 2^(2p-106), m^2 an unsigned __int128, added in 32-bit digits of
// 2^-1074 (digit k worth 2^(32k - 1074)). For |x| at least 2^-485, where
// every square and its FMA error are exact. The digits from the lowest
// non-zero one, and its index (ExactSum::MagnitudeDigits' form).
std::vector<std::uint32_t> SquaresByIntegers(const std::vector<double>& x, int& first) {
  std::vector<std::uint64_t> digits(80, 0);
  for (const double v : x) {
    if (v == 0.0) continue;
    int p = 0;
    const double f = std::frexp(std::fabs(v), &p);  // |v| = f 2^p, f in [0.5, 1)
    const auto m = static_cast<std::uint64_t>(std::ldexp(f, 53));
    const unsigned __int128 square = static_cast<unsigned __int128>(m) * m;
    const int shift = 2 * p + 968;  // 2p - 106 + 1074
    EXPECT_GE(shift, 0) << v;
    for (int c = 0; c < 4; ++c) {  // the square's 32-bit chunks, each shifted into two digits
      const auto chunk = static_cast<std::uint64_t>(square >> (32 * c)) & 0xffffffffu;
      const int bit = shift + 32 * c;
      const std::uint64_t placed = chunk << (bit % 32);  // below 2^63
      digits[bit / 32] += placed & 0xffffffffu;
      digits[bit / 32 + 1] += placed >> 32;
    }
  }
  for (std::size_t k = 0; k + 1 < digits.size(); ++k) {
    digits[k + 1] += digits[k] >> 32;
    digits[k] &= 0xffffffffu;
  }
  std::size_t last = digits.size();
  while (last > 0 && digits[last - 1] == 0) --last;
  std::size_t lowest = 0;
  while (lowest < last && digits[lowest] == 0) ++lowest;
  first = static_cast<int>(lowest);
  return std::vector<std::uint32_t>(digits.begin() + static_cast<std::ptrdiff_t>(lowest),
                                    digits.begin() + static_cast<std::ptrdiff_t>(last));
}

// Significands f in [0.5, 1) whose square's part below the grid
// 2^-42 and whose FMA error both lie near half their limit and are
// positive: f 2^e's squares, summed, push the low parts' and the errors'
// sums to their bounds (NarrowSquares64Lanes).
std::vector<double> SquaresAtTheirLimits(std::mt19937_64& rng) {
  std::vector<double> out;
  const double grid = std::ldexp(1.0, -42);
  while (out.size() < 64) {
    const double f = std::ldexp(static_cast<double>((rng() >> 11) | (std::uint64_t{1} << 52)), -53);
    const double q = f * f;
    const double err = std::fma(f, f, -q);
    const double low = q - std::nearbyint(q / grid) * grid;
    const double ulp = std::ldexp(1.0, std::ilogb(q) - 52);
    if (low >= 0.45 * grid && low < 0.5 * grid && err >= 0.45 * ulp) out.push_back(f);
  }
  return out;
}

// A float64 block within 2^16 of its largest magnitude splits each square
// and its FMA error once, with no check (NarrowSquares64Lanes, or the
// range pass at a guessed grid): exact at the limits that proof rests on,
// against the squares' sum by integers. Full blocks whose magnitudes lie
// in [2^(e-16), 2^e) (or [2^(e-15), 2^e)), the least at that limit, seven
// in eight in the top binade (the high parts' sums near 2^(2e+11)) with
// squares whose low parts and errors push their sums to their bounds
// (SquaresAtTheirLimits) or random ones, the rest spread down with every
// significand bit set, for e from the largest binade the grids allow to
// the least; with no guess, the block's own, one above (taken where the
// least magnitude allows it) and one below (refused). A block reaching
// 2^(e-17) is not narrow, and is exact too.
TEST(ExactSquares, NarrowFloat64BlocksAreExactAtTheirLimits) {
  TALLY_SEEDED_RNG(rng);
  const std::vector<double> at_limits = SquaresAtTheirLimits(rng);
  for (const int e : {506, 505, 300, 1, 0, -1, -300, -468, -469}) {
    for (const bool pushed : {true, false}) {
      for (const int least : {16, 15, 17}) {  // the least magnitude: 2^(e - least)
        if (e - least < -485) continue;  // SquaresByIntegers' reach
        std::vector<double> x(kExactBlockElements);
        for (std::size_t i = 0; i < x.size(); ++i) {
          if (i % 8 != 0) {
            const double f = pushed ? at_limits[rng() % at_limits.size()]
                                    : std::ldexp(static_cast<double>((rng() >> 11) | (std::uint64_t{1} << 52)), -53);
            x[i] = std::ldexp((rng() & 1) != 0 ? f : -f, e);
            continue;
          }
          // The largest double below 2^k, k in [e - spread + 1, e]: every
          // significand bit set.
          const int spread = std::min(least, 16);
          const int k = e - spread + 1 + static_cast<int>(rng() % static_cast<unsigned>(spread));
          x[i] = std::ldexp(2.0 - std::ldexp(1.0, -52), k - 1);
        }
        x[1] = std::ldexp(1.0, e - least);
        int first = 0;
        const std::vector<std::uint32_t> want = SquaresByIntegers(x, first);
        const BlockRange own = RangeOfBlock(x.data(), x.size(), false);
        ASSERT_EQ(least <= 16, IsNarrowFloat64Squares(own, e)) << "e=" << e << " least=" << least;
        for (const int guess : {kNoRangeGuess, e, e + 1, e - 1}) {
          const BlockRange range = RangeOfBlock(x.data(), x.size(), false, nullptr, guess);
          const bool takes_guess = range.has_split_squares && IsNarrowFloat64Squares(range, guess);
          if (guess == e || (guess == e + 1 && e + 1 <= 506)) {
            ASSERT_EQ(least <= 16 - (guess - e), takes_guess) << "e=" << e << " least=" << least;
          } else {
            ASSERT_FALSE(takes_guess) << "e=" << e;
          }
          ExactAccumulator got;
          AddExactSquares(x.data(), x.size(), false, x.size(), range, got);
          bool negative = true;
          int got_first = -1;
          const std::vector<std::uint32_t> digits = got.ToExactSum().MagnitudeDigits(negative, got_first);
          const std::string what = "e=" + std::to_string(e) + " pushed=" + std::to_string(pushed) +
                                   " least=" + std::to_string(least) +
                                   " guess=" + (guess == kNoRangeGuess ? "none" : std::to_string(guess));
          EXPECT_FALSE(negative) << what;
          EXPECT_EQ(first, got_first) << what;
          EXPECT_EQ(want, digits) << what;
        }
      }
    }
  }
}

// Just outside the binades NarrowSquares64Lanes takes (its grids would
// pass float64's largest, or its elements' FMA errors underflow): such
// blocks are not narrow, and their squares are the rules' (x * x plus its
// FMA error as float64 computes it) all the same.
TEST(ExactSquares, Float64BlocksPastTheNarrowBinadesTakeTheGeneralPaths) {
  TALLY_SEEDED_RNG(rng);
  for (const int e : {507, 508, 512, -470, -471, -500}) {
    std::vector<double> x(kExactBlockElements);
    for (double& v : x) {
      const double f = std::ldexp(static_cast<double>((rng() >> 11) | (std::uint64_t{1} << 52)), -53);
      v = std::ldexp((rng() & 1) != 0 ? f : -f, e - static_cast<int>(rng() % 16));
    }
    ExactSum want;
    for (const double v : x) {
      want.Add(v * v);
      if (std::isfinite(v * v)) want.AddValue(std::fma(v, v, -(v * v)));
    }
    const BlockRange own = RangeOfBlock(x.data(), x.size(), false);
    ASSERT_FALSE(IsNarrowFloat64Squares(own, e)) << "e=" << e;
    for (const int guess : {kNoRangeGuess, e, e - 1}) {
      ExactAccumulator got;
      AddExactSquares(x.data(), x.size(), false, x.size(), RangeOfBlock(x.data(), x.size(), false, nullptr, guess),
                      got);
      EXPECT_EQ(want.Bytes(), got.ToExactSum().Bytes()) << "e=" << e << " guess=" << guess;
    }
  }
}

// Blocks whose exact sums lie near float64's largest, merged in a random
// order: elements whose running sum passes 2^1024 and stays there or comes
// back, squares that pass it or stay just below. The answer is the
// ExactSum's: an infinity only where the exact sum rounds to one.
TEST(ExactAccumulator, SumsNearFloat64OverflowStayExact) {
  TALLY_SEEDED_RNG(rng);
  for (const bool squares : {false, true}) {
    for (const bool overflows : {false, true}) {
      const int e = squares ? 506 : 1010;  // the largest binade each one-grid path takes
      // Elements: 24 blocks, alternating in sign unless they overflow;
      // squares: 24 blocks, or 3 (below 2^1023).
      const int blocks_of = squares && !overflows ? 3 : 24;
      std::vector<std::vector<double>> blocks;
      for (int b = 0; b < blocks_of; ++b) {
        std::vector<double> x(kExactBlockElements);
        const bool negative = !squares && !overflows && b % 2 == 1;
        for (double& v : x) {
          const std::uint64_t frac = rng() & ((std::uint64_t{1} << 52) - 1);
          const double m = 1.0 + std::ldexp(static_cast<double>(frac), -52);
          v = std::ldexp(negative ? -m : m, e - 1 - static_cast<int>(rng() % 3));
        }
        blocks.push_back(std::move(x));
      }
      ExactSum want;
      for (const auto& x : blocks) {
        for (const double v : x) {
          if (!squares) {
            want.Add(v);
            continue;
          }
          want.Add(v * v);
          want.AddValue(std::fma(v, v, -(v * v)));
        }
      }
      std::shuffle(blocks.begin(), blocks.end(), rng);
      ExactAccumulator got;
      for (const auto& x : blocks) {
        ExactAccumulator a;
        const BlockRange range = RangeOfBlock(x.data(), x.size(), false, nullptr, e);
        if (squares) {
          AddExactSquares(x.data(), x.size(), false, x.size(), range, a);
        } else {
          AddExactBlock(x.data(), x.size(), false, x.size(), range, a);
        }
        got.Merge(a);
      }
      const std::string what = std::string(squares ? "squares" : "elements") + (overflows ? ", overflows" : "");
      EXPECT_EQ(want.Bytes(), got.ToExactSum().Bytes()) << what;
      const double a = want.Rounded(rules::kFloat64Format), b = got.Rounded(rules::kFloat64Format);
      EXPECT_EQ(0, std::memcmp(&a, &b, sizeof a)) << what << ": " << a << " " << b;
      EXPECT_EQ(overflows, std::isinf(b)) << what << ": " << b;
    }
  }
}

TEST(ExactAccumulator, CopiesOwnTheirSpill) {
  ExactAccumulator a;
  a.AddElement(std::numeric_limits<double>::infinity());
  ExactAccumulator b = a;  // a deep copy: b's spill is its own
  b.AddElement(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::numeric_limits<double>::infinity(), a.Rounded(rules::kFloat64Format));
  EXPECT_TRUE(std::isnan(b.Rounded(rules::kFloat64Format)));
}

}  // namespace
}  // namespace tally::cpu
