// rules::IntegerSums (tally/rules/exact_integers.h): an integer dtype's
// sums in 128 and 192 bits, put into an ExactSum as exact doubles, against
// values whose exact sums are a few doubles by algebra: the dtypes' ends,
// sums past 2^64 and squares' sums past 2^128, in any order.
#include "tally/rules/exact_integers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tally/rules/exact_sum.h"

namespace tally::rules {
namespace {

ExactSum SumOf(const IntegerSums& s) {
  ExactSum out;
  s.PutSum([&](double part) { out.AddValue(part); });
  return out;
}
ExactSum SquaresOf(const IntegerSums& s) {
  ExactSum out;
  s.PutSquares([&](double part) { out.AddValue(part); });
  return out;
}
ExactSum Of(std::initializer_list<double> parts) {
  ExactSum out;
  for (const double p : parts) out.AddValue(p);
  return out;
}

TEST(IntegerSums, TheEndsOfInt64SumAndSquareExactly) {
  // k copies of INT64_MIN and m of INT64_MAX: S = -k 2^63 + m (2^63 - 1),
  // Q = k 2^126 + m (2^126 - 2^64 + 1).
  for (const std::uint64_t k : {1u, 3u, 1000u}) {
    for (const std::uint64_t m : {0u, 2u, 999u}) {
      std::vector<std::int64_t> v(k, std::numeric_limits<std::int64_t>::min());
      v.insert(v.end(), m, std::numeric_limits<std::int64_t>::max());
      std::shuffle(v.begin(), v.end(), std::mt19937_64(k * 31 + m));
      IntegerSums s;
      for (const std::int64_t x : v) {
        s.AddSum(x);
        s.AddSquare(x);
      }
      const double dk = static_cast<double>(k), dm = static_cast<double>(m);
      EXPECT_EQ(SumOf(s).Bytes(), Of({-dk * 0x1p63, dm * 0x1p63, -dm}).Bytes()) << k << " " << m;
      EXPECT_EQ(SquaresOf(s).Bytes(), Of({(dk + dm) * 0x1p126, -dm * 0x1p64, dm}).Bytes()) << k << " " << m;
    }
  }
}

TEST(IntegerSums, SquaresOfUint64MaxCarryPast2To128) {
  // (2^64 - 1)^2 = 2^128 - 2^65 + 1: n of them carry into the high word.
  for (const std::uint64_t n : {1u, 2u, 3u, 1u << 20}) {
    IntegerSums s;
    for (std::uint64_t i = 0; i < n; ++i) {
      s.AddSum(std::numeric_limits<std::uint64_t>::max());
      s.AddSquare(std::numeric_limits<std::uint64_t>::max());
    }
    const double dn = static_cast<double>(n);
    EXPECT_EQ(s.squares_high, n - 1) << "n (2^128 - 2^65 + 1) lies between (n - 1) 2^128 and n 2^128";
    EXPECT_EQ(SquaresOf(s).Bytes(), Of({dn * 0x1p128, -dn * 0x1p65, dn}).Bytes()) << n;
    EXPECT_EQ(SumOf(s).Bytes(), Of({dn * 0x1p64, -dn}).Bytes()) << n;
  }
}

TEST(IntegerSums, EveryBitOfTheWordsReachesTheParts) {
  // A bit on each side of every cut between the parts (52, 104, 128, 156),
  // and the top of each word.
  IntegerSums s;
  const unsigned __int128 one = 1;
  s.AddSquares((one << 127) | (one << 104) | (one << 103) | (one << 52) | (one << 51) | 1u,
               (std::uint64_t{1} << 63) | (std::uint64_t{1} << 28) | (std::uint64_t{1} << 27) | 1u);
  EXPECT_EQ(SquaresOf(s).Bytes(), Of({0x1p191, 0x1p156, 0x1p155, 0x1p128, 0x1p127, 0x1p104, 0x1p103, 0x1p52, 0x1p51,
                                      1.0})
                                      .Bytes());
  for (const bool negative : {false, true}) {
    IntegerSums t;
    const __int128 v = (static_cast<__int128>(1) << 126) + (static_cast<__int128>(1) << 104) +
                       (static_cast<__int128>(1) << 103) + (static_cast<__int128>(1) << 52) +
                       (static_cast<__int128>(1) << 51) + 1;
    t.sum = negative ? -v : v;
    const double sign = negative ? -1.0 : 1.0;
    EXPECT_EQ(SumOf(t).Bytes(),
              Of({sign * 0x1p126, sign * 0x1p104, sign * 0x1p103, sign * 0x1p52, sign * 0x1p51, sign}).Bytes())
        << negative;
  }
}

TEST(IntegerSums, NarrowDtypesAndABlocksSumsTakenElsewhereAgree) {
  // int32 and uint8 element by element against the same values' sums taken
  // as a block (AddSquares), as the cpu backend's lanes give them.
  std::mt19937_64 rng(7);
  std::vector<std::int32_t> v(5000);
  for (std::int32_t& x : v) x = static_cast<std::int32_t>(rng());
  v[0] = std::numeric_limits<std::int32_t>::min();
  IntegerSums one, block;
  __int128 sum = 0;
  unsigned __int128 squares = 0;
  for (const std::int32_t x : v) {
    one.AddSum(x);
    one.AddSquare(x);
    sum += x;
    squares += static_cast<unsigned __int128>(static_cast<__int128>(x) * x);
  }
  block.sum = sum;
  block.AddSquares(squares, 0);
  EXPECT_EQ(SumOf(one).Bytes(), SumOf(block).Bytes());
  EXPECT_EQ(SquaresOf(one).Bytes(), SquaresOf(block).Bytes());
  EXPECT_EQ(SumOf(one).ToDouble(), static_cast<double>(sum));  // below 2^53: exact
}

}  // namespace
}  // namespace tally::rules
