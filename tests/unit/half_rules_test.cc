// float16 and bfloat16 (tally/rules/half.h): every bit pattern converts to
// the float it encodes, and float64 rounds to them once, to nearest even,
// checked against values built independently with std::ldexp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tally/rules/half.h"

namespace tally::rules {
namespace {

// What bits encode in a binary format with kExp exponent and kMan mantissa
// bits, from the definition.
template <int kExp, int kMan>
double Decode(std::uint16_t bits) {
  const int bias = (1 << (kExp - 1)) - 1;
  const bool negative = (bits >> (kExp + kMan)) & 1;
  const int e = (bits >> kMan) & ((1 << kExp) - 1);
  const int m = bits & ((1 << kMan) - 1);
  double v;
  if (e == (1 << kExp) - 1) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - kMan);
  } else {
    v = std::ldexp(static_cast<double>(m + (1 << kMan)), e - bias - kMan);
  }
  return negative ? -v : v;
}

template <typename H, int kExp, int kMan>
void CheckEveryPattern() {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const double want = Decode<kExp, kMan>(bits);
    const float got = H::FromBits(bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << std::hex << b;
    EXPECT_EQ(std::signbit(got), std::signbit(want)) << std::hex << b;
    // Each value rounds to itself.
    EXPECT_EQ(H(want).bits, bits) << std::hex << b;
  }
}

TEST(HalfRules, EveryFloat16PatternIsTheValueItEncodes) { CheckEveryPattern<Float16, 5, 10>(); }
TEST(HalfRules, EveryBFloat16PatternIsTheValueItEncodes) { CheckEveryPattern<BFloat16, 8, 7>(); }

// Between neighbours a < b: the midpoint goes to the one with an even
// mantissa, anything off it to the nearer; past the largest finite value by
// half an ulp or more, to infinity.
template <typename H, int kExp, int kMan>
void CheckRounding() {
  const std::uint16_t inf_bits = static_cast<std::uint16_t>(((1u << kExp) - 1) << kMan);
  for (std::uint32_t b = 0; b + 1 < inf_bits; ++b) {
    const double a = Decode<kExp, kMan>(static_cast<std::uint16_t>(b));
    const double c = Decode<kExp, kMan>(static_cast<std::uint16_t>(b + 1));
    const double mid = a + (c - a) / 2;  // exact in float64
    const std::uint16_t even = (b & 1) == 0 ? static_cast<std::uint16_t>(b) : static_cast<std::uint16_t>(b + 1);
    ASSERT_EQ(H(mid).bits, even) << std::hex << b;
    EXPECT_EQ(H(std::nextafter(mid, 0.0)).bits, b) << std::hex << b;
    EXPECT_EQ(H(std::nextafter(mid, 1e300)).bits, b + 1) << std::hex << b;
    EXPECT_EQ(H(-mid).bits, even | (1u << (kExp + kMan))) << std::hex << b;
  }
  const double max = Decode<kExp, kMan>(static_cast<std::uint16_t>(inf_bits - 1));
  const double half_ulp = (max - Decode<kExp, kMan>(static_cast<std::uint16_t>(inf_bits - 2))) / 2;
  EXPECT_EQ(H(max + half_ulp).bits, inf_bits);
  EXPECT_EQ(H(std::nextafter(max + half_ulp, 0.0)).bits, inf_bits - 1);
  EXPECT_EQ(H(1e300).bits, inf_bits);
  EXPECT_EQ(H(-std::numeric_limits<double>::infinity()).bits, inf_bits | (1u << (kExp + kMan)));
  EXPECT_TRUE(std::isnan(static_cast<float>(H(std::nan("")))));
  EXPECT_EQ(H(1e-300).bits, 0u);
  EXPECT_EQ(H(-1e-300).bits, 1u << (kExp + kMan));  // -0
}

TEST(HalfRules, Float64RoundsToFloat16OnceToNearestEven) { CheckRounding<Float16, 5, 10>(); }
TEST(HalfRules, Float64RoundsToBFloat16OnceToNearestEven) { CheckRounding<BFloat16, 8, 7>(); }

TEST(HalfRules, LimitsAndNegation) {
  EXPECT_EQ(static_cast<float>(std::numeric_limits<Float16>::max()), 65504.0f);
  EXPECT_EQ(static_cast<float>(std::numeric_limits<Float16>::lowest()), -65504.0f);
  EXPECT_EQ(static_cast<float>(std::numeric_limits<Float16>::epsilon()), 0x1p-10f);
  EXPECT_EQ(static_cast<float>(std::numeric_limits<BFloat16>::max()), 0x1.FEp127f);
  EXPECT_EQ(static_cast<float>(std::numeric_limits<BFloat16>::epsilon()), 0x1p-7f);
  EXPECT_EQ(static_cast<float>(-std::numeric_limits<Float16>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(static_cast<float>(-Float16(2.5)), -2.5f);
  EXPECT_EQ(static_cast<float>(-BFloat16(-3.0)), 3.0f);
}

}  // namespace
}  // namespace tally::rules
