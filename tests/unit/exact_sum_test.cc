// The exact sum (tally/rules/exact_sum.h): against sums computed with
// Python's fractions (data/exact_sums.txt, written by make_exact_sums.py),
// and the same bits and bytes whatever the order, the split and the merges.
#include "tally/rules/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
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

}  // namespace
}  // namespace tally::rules
