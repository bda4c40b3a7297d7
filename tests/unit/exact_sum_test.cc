// The exact sum (tally/rules/exact_sum.h): against sums computed with
// Python's fractions (data/exact_sums.txt, written by make_exact_sums.py),
// and the same bits and bytes whatever the order, the split and the merges.
// The second moment from exact sums (tally/rules/exact_moments.h): against
// Python's fractions (data/exact_moments.txt, make_exact_moments.py).
#include "tally/rules/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tally/rules/exact_moments.h"
#include "tests/unit/test_seed.h"

namespace tally::rules {
namespace {

std::uint64_t Bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// Equal as bits, every NaN one value.
void ExpectSame(double want, double got, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got << ", not NaN";
  } else {
    EXPECT_EQ(Bits(want), Bits(got)) << what << ": want " << std::hexfloat << want << ", got " << got;
  }
}

struct Case {
  std::string name;
  double want[4];  // float64, float32, float16, bfloat16
  std::vector<double> values;
};

std::vector<Case> GoldenCases() {
  std::ifstream in(TALLY_EXACT_SUMS_FILE);
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    Case c;
    std::string word;
    words >> c.name;
    for (double& w : c.want) {
      words >> word;
      w = std::strtod(word.c_str(), nullptr);
    }
    while (words >> word) c.values.push_back(std::strtod(word.c_str(), nullptr));
    cases.push_back(std::move(c));
  }
  return cases;
}

ExactSum SumOf(const std::vector<double>& values) {
  ExactSum s;
  for (double v : values) s.Add(v);
  return s;
}

TEST(ExactSum, EqualsTheRoundedExactSumOfEveryGoldenCase) {
  const std::vector<Case> cases = GoldenCases();
  ASSERT_GE(cases.size(), 39u) << "read " << TALLY_EXACT_SUMS_FILE;
  const FloatFormat formats[] = {kFloat64Format, kFloat32Format, kFloat16Format, kBFloat16Format};
  const char* names[] = {"float64", "float32", "float16", "bfloat16"};
  for (const Case& c : cases) {
    const ExactSum s = SumOf(c.values);
    EXPECT_EQ(s.count(), c.values.size()) << c.name;
    for (int f = 0; f < 4; ++f) ExpectSame(c.want[f], s.Rounded(formats[f]), c.name + " as " + names[f]);
    ExpectSame(c.want[0], s.ToDouble(), c.name);
  }
}

TEST(ExactSum, TheSameBitsAndBytesInAnyOrderSplitAndMerge) {
  TALLY_SEEDED_RNG(rng);
  for (const Case& c : GoldenCases()) {
    const ExactSum whole = SumOf(c.values);
    const std::string bytes = whole.Bytes();
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<double> v = c.values;
      std::shuffle(v.begin(), v.end(), rng);
      // Random cuts, each part summed alone, merged in a random order.
      std::vector<ExactSum> parts(1 + rng() % 5);
      for (double x : v) parts[rng() % parts.size()].Add(x);
      std::shuffle(parts.begin(), parts.end(), rng);
      ExactSum merged;
      for (const ExactSum& p : parts) merged.Merge(p);
      ExpectSame(whole.ToDouble(), merged.ToDouble(), c.name);
      EXPECT_EQ(bytes, merged.Bytes()) << c.name;
    }
  }
}

// Sums of many values, against an independent exact reference: values that
// are integers times 2^-60 below 2^40 sum exactly in an __int128, and its
// conversion to double rounds once, to nearest even.
TEST(ExactSum, ManyValuesEqualAnInt128Reference) {
  TALLY_SEEDED_RNG(rng);
  for (const int n : {1000, 100000, 1000003}) {
    std::vector<double> values(n);
    __int128 units = 0;
    for (double& v : values) {
      // 53-bit integers scaled down by 2^0..2^47, either sign: wide exponents, many cancellations.
      const std::int64_t m = static_cast<std::int64_t>(rng() >> 11) * ((rng() & 1) != 0 ? 1 : -1);
      const int shift = static_cast<int>(rng() % 48);
      v = std::ldexp(static_cast<double>(m), -shift - 13);
      units += static_cast<__int128>(m) << (47 - shift);  // in units of 2^-60
    }
    const double want = std::ldexp(static_cast<double>(units), -60);
    ExactSum s = SumOf(values);
    ExpectSame(want, s.ToDouble(), "n=" + std::to_string(n));
    // The same after carries at arbitrary points.
    ExactSum carried;
    for (std::size_t i = 0; i < values.size(); ++i) {
      carried.Add(values[i]);
      if (rng() % 1000 == 0) carried.Carry();
    }
    EXPECT_EQ(s.Bytes(), carried.Bytes());
  }
}

TEST(ExactSum, BytesRoundTripAndRefuseWhatIsNotCanonical) {
  for (const Case& c : GoldenCases()) {
    const ExactSum s = SumOf(c.values);
    const std::optional<ExactSum> back = ExactSum::FromBytes(s.Bytes());
    ASSERT_TRUE(back.has_value()) << c.name;
    EXPECT_EQ(s.Bytes(), back->Bytes()) << c.name;
    ExpectSame(c.want[0], back->ToDouble(), c.name + " read back");
    EXPECT_EQ(back->count(), c.values.size());
  }
  const std::string one = SumOf({1.0, -3.5}).Bytes();
  EXPECT_FALSE(ExactSum::FromBytes("").has_value());
  EXPECT_FALSE(ExactSum::FromBytes(one.substr(0, one.size() - 1)).has_value()) << "cut short";
  EXPECT_FALSE(ExactSum::FromBytes(one + '\0').has_value()) << "a byte too many";
  std::string version = one;
  version[0] = 2;
  EXPECT_FALSE(ExactSum::FromBytes(version).has_value()) << "an unknown version";
  std::string zero_digit = one;  // a top digit of zero is not canonical
  zero_digit.replace(zero_digit.size() - 4, 4, std::string(4, '\0'));
  EXPECT_FALSE(ExactSum::FromBytes(zero_digit).has_value());
  std::string flags = one;
  flags[33] = 4;
  EXPECT_FALSE(ExactSum::FromBytes(flags).has_value()) << "an unknown flag";
}

TEST(ExactSum, FloatInputsAreExactDoubles) {
  // float32 sums of values that float32 arithmetic would round: 2^24 + 1 + 1.
  ExactSum s;
  for (const float f : {16777216.0f, 1.0f, 1.0f}) s.Add(static_cast<double>(f));
  ExpectSame(16777218.0, s.Rounded(kFloat32Format), "2^24 + 1 + 1");
  EXPECT_EQ(16777218.0f, static_cast<float>(s.Rounded(kFloat32Format)));
}

// x^2 as the rules hold it: x * x and its FMA error, both exact doubles.
void AddSquare(double x, ExactSum& q) {
  const double high = x * x;
  q.Add(high);
  q.AddValue(std::fma(x, x, -high));
}

TEST(ExactSecondMoment, EqualsTheRoundedExactMomentOfEveryGoldenCase) {
  std::ifstream in(TALLY_EXACT_MOMENTS_FILE);
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name, word;
    words >> name >> word;
    const double want = std::strtod(word.c_str(), nullptr);
    ExactSum s, q;
    std::uint64_t n = 0;
    while (words >> word) {
      const double x = std::strtod(word.c_str(), nullptr);
      s.Add(x);
      AddSquare(x, q);
      ++n;
    }
    ExpectSame(want, ExactSecondMoment(s, q, n), name);
    ++cases;
  }
  EXPECT_GE(cases, 30) << "read " << TALLY_EXACT_MOMENTS_FILE;
}

// Integers: M2 = sum(x^2) - sum(x)^2 / n exactly, in an __int128 over n;
// rounded once, as the integer division's quotient and remainder say.
TEST(ExactSecondMoment, IntegersEqualAnInt128Reference) {
  TALLY_SEEDED_RNG(rng);
  for (int trial = 0; trial < 200; ++trial) {
    const std::uint64_t n = 1 + rng() % 500;
    ExactSum s, q;
    __int128 sum = 0, squares = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto x = static_cast<std::int64_t>(rng() % (std::uint64_t{1} << 40)) - (std::int64_t{1} << 39);
      s.Add(static_cast<double>(x));
      AddSquare(static_cast<double>(x), q);
      sum += x;
      squares += static_cast<__int128>(x) * x;
    }
    // n M2 = n Q - S^2; M2 = that / n. Both below 2^120 for these sizes.
    const __int128 n_m2 = static_cast<__int128>(n) * squares - sum * sum;
    ASSERT_GE(n_m2, 0);
    const long double want = static_cast<long double>(n_m2) / static_cast<long double>(n);
    const double got = ExactSecondMoment(s, q, n);
    // long double's 64 bits round the quotient once more, so within half
    // an ulp of float64 the two may differ by that ulp; the float64
    // quotient of the exact integers must be the nearer.
    EXPECT_LE(std::fabs(static_cast<long double>(got) - want),
              std::ldexp(static_cast<long double>(1), std::ilogb(got) - 52) * 0.5L + 1e-30L * want)
        << "n " << n;
  }
}

TEST(ExactSecondMoment, NanAndInfinitiesGiveNanAndOrderNeverMatters) {
  ExactSum s, q;
  for (double x : {1.0, 2.0, std::numeric_limits<double>::infinity()}) {
    s.Add(x);
    AddSquare(x, q);
  }
  EXPECT_TRUE(std::isnan(ExactSecondMoment(s, q, 3)));
  TALLY_SEEDED_RNG(rng);
  std::vector<double> v(1000);
  std::uniform_real_distribution<double> u(-1, 1);
  for (double& x : v) x = 1e9 + u(rng);
  ExactSum s1, q1;
  for (double x : v) {
    s1.Add(x);
    AddSquare(x, q1);
  }
  const double once = ExactSecondMoment(s1, q1, v.size());
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(v.begin(), v.end(), rng);
    ExactSum a, b, qa, qb;
    for (std::size_t i = 0; i < v.size(); ++i) {
      (i % 3 == 0 ? a : b).Add(v[i]);
      AddSquare(v[i], i % 3 == 0 ? qa : qb);
    }
    b.Merge(a);
    qa.Merge(qb);
    EXPECT_EQ(Bits(once), Bits(ExactSecondMoment(b, qa, v.size())));
  }
}

}  // namespace
}  // namespace tally::rules
