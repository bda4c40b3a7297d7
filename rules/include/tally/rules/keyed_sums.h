// The arithmetic of group-by's direct pass (sum, count, min and max of
// float values per integer key in a small range), shared by the GPU's
// (kernels/src/group/dense_groups.cu) and the host's
// (server/engine/grouping/keyed_sums.cc), so that both give the same bits:
// every accumulation is an integer one, whose result does not depend on
// the order the elements are added in.
//   - keys as unsigned numbers that order as the keys do (OrderedKey);
//   - extremes as order-preserving integers of the doubles (OrderedDouble);
//   - sums in fixed point: each finite element v x 2^scale rounded to an
//     integer (ties to even), kept as a signed high word (the value /
//     2^32, floored) and an unsigned low word (its last 32 bits), which
//     n elements can sum in 64 bits each when every |v| x 2^scale is below
//     2^(92 - bits of n) (FixedScale); the total is rounded to a double once
//     and scaled exactly (FixedSum).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tally/rules/hd.h"

namespace tally::rules::keyed {

// An integer key (bool as 0 or 1) as an unsigned number in the key's order.
template <typename K>
TALLY_HD std::uint64_t OrderedKey(K k) {
  if constexpr (std::is_signed_v<K>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(k)) ^ (std::uint64_t{1} << 63);
  } else {
    return static_cast<std::uint64_t>(k);
  }
}
// The key back from its ordered form.
template <typename K>
TALLY_HD K KeyOf(std::uint64_t o) {
  if constexpr (std::is_signed_v<K>) {
    return static_cast<K>(static_cast<std::int64_t>(o ^ (std::uint64_t{1} << 63)));
  } else {
    return static_cast<K>(o);
  }
}

// A double's bits as an unsigned number that orders as the double does
// (-0.0 as +0.0: numpy's min of equal zeros depends on their order). Not
// for NaN.
TALLY_HD std::uint64_t OrderedDouble(double v) {
  std::uint64_t b = 0;
  if (v == 0) v = 0.0;
  std::memcpy(&b, &v, 8);
  return (b >> 63) != 0 ? ~b : (b | (std::uint64_t{1} << 63));
}
TALLY_HD double FromOrdered(std::uint64_t o) {
  const std::uint64_t b = (o >> 63) != 0 ? (o & ~(std::uint64_t{1} << 63)) : ~o;
  double v;
  std::memcpy(&v, &b, 8);
  return v;
}

// Slots for no element: the extremes' starting values.
inline constexpr std::uint64_t kNoLow = ~std::uint64_t{0};
inline constexpr std::uint64_t kNoHigh = 0;

// v x 2^scale rounded to an integer (ties to even). v finite.
TALLY_HD __int128 ToFixed128(double v, int scale) {
  std::uint64_t b;
  std::memcpy(&b, &v, 8);
  const int e = static_cast<int>((b >> 52) & 0x7ff);
  std::uint64_t m = b & ((std::uint64_t{1} << 52) - 1);
  if (e != 0) m |= std::uint64_t{1} << 52;
  const int shift = (e == 0 ? 1 : e) - 1075 + scale;  // v = m x 2^(e - 1075)
  unsigned __int128 t = 0;
  if (shift >= 0) {
    t = static_cast<unsigned __int128>(m) << shift;
  } else if (shift > -64) {
    const int r = -shift;
    const std::uint64_t q = m >> r, rem = m & ((std::uint64_t{1} << r) - 1), half = std::uint64_t{1} << (r - 1);
    t = q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
  }
  const __int128 s = static_cast<__int128>(t);
  return (b >> 63) != 0 ? -s : s;
}
// The same as its high (signed, floor of the value / 2^32) and low (the
// last 32 bits) words, which sum in 64 bits each.
TALLY_HD void ToFixed(double v, int scale, long long* hi, unsigned long long* lo) {
  const __int128 s = ToFixed128(v, scale);
  *hi = static_cast<long long>(s >> 32);
  *lo = static_cast<unsigned long long>(static_cast<std::uint64_t>(s) & 0xffffffffull);
}

// ToFixed128's value as two integers from float64 arithmetic, for the
// host: v x 2^scale = high x 2^32 + low, high its truncated value / 2^32
// and low the rest, rounded to an integer (ties to even; |low| <= 2^32).
// Both sum in 64 bits over fewer than 2^31 elements within FixedScale's
// bound (|high| < 2^60 / n). Each step is exact but the rounding of the
// rest: d = v x 2^(scale - 32), by two powers of two (FixedUnit: one
// would pass float64's range for the scales of tiny values; a product
// below float64's normal range is one that rounds to 0 either way), the
// truncation, the rest d - high (a double's fraction), its scaling by
// 2^32, and adding and taking away 1.5 x 2^52, which rounds a magnitude
// below 2^51 to an integer as round-to-nearest does (the host's mode:
// nothing in tally changes it). Rounding the rest rounds the whole as
// ToFixed128 does: high x 2^32 is even and of the rest's sign. About 4x
// fewer cycles than ToFixed128 on the host (docs/performance.md,
// "Group-by"). `inexact` is set when the rest was rounded (the fixed-point
// value is not v's).
struct FixedUnit {
  double first = 1.0, second = 1.0;
  // 2^(scale - 32) as two normal doubles (FixedScale's scales: from about
  // -960 to 1170).
  static FixedUnit Of(int scale) {
    const int e = scale - 32;
    const int first = e < 1000 ? e : 1000;
    return {std::ldexp(1.0, first), std::ldexp(1.0, e - first)};
  }
};
struct FixedParts {
  std::int64_t high;
  std::int64_t low;
};
inline FixedParts SplitFixed(double v, const FixedUnit& unit, bool& inexact) {
  const double d = v * unit.first * unit.second;
  const auto high = static_cast<std::int64_t>(d);
  const double rest = (d - static_cast<double>(high)) * 0x1p32;
  const double rounded = (rest + 0x1.8p52) - 0x1.8p52;
  inexact = rounded != rest;
  return {high, static_cast<std::int64_t>(rounded)};
}
// The fixed-point total of sums of SplitFixed's parts.
inline __int128 FixedTotal(std::int64_t high, std::int64_t low) {
  return static_cast<__int128>(high) * (std::int64_t{1} << 32) + low;
}

// The scale for `rows` elements whose largest finite magnitude has the
// bits `largest` (of a non-negative double; 0 for none).
inline int FixedScale(std::uint64_t largest, std::uint64_t rows) {
  double v = 0;
  std::memcpy(&v, &largest, 8);
  int exponent = 0;
  (void)std::frexp(v, &exponent);  // v < 2^exponent
  return 92 - std::bit_width(rows) - exponent;
}

// A slot's words (ToFixed's high and low, each summed) as FixedSumOf's
// total.
TALLY_HD __int128 FixedWords(unsigned long long hi, unsigned long long lo) {
  return (static_cast<__int128>(static_cast<long long>(hi)) << 32) + static_cast<__int128>(lo);
}

// The sum of a slot's words: one rounding, then exact scaling.
inline double FixedSum(unsigned long long hi, unsigned long long lo, int scale) {
  return std::ldexp(static_cast<double>(FixedWords(hi, lo)), -scale);
}

// FixedSum of a total kept as one integer, for the host and the GPU's
// wider direct pass, with the same bits: the total rounded once to a
// double (nearest, ties to even), then scaled by 2^-scale, by a
// multiplication where that power is a normal double (the product's one
// rounding is ldexp's). Without the library's __int128 conversion and
// ldexp, a tenth of the partitioned pass's time at 1M keys (perf,
// docs/performance.md "Group-by").
TALLY_HD double DoubleOfBits(std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  return std::bit_cast<double>(b);
#endif
}
TALLY_HD int LeadingZeros(std::uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#else
  return std::countl_zero(x);
#endif
}
TALLY_HD double RoundedToDouble(__int128 t) {
  const auto small = static_cast<std::int64_t>(t);
  if (small == t) return static_cast<double>(small);
  // |t| >= 2^63: its top 62 bits, and a 1 in the lowest of them where any
  // bit below is set, round as t does (the rounding bit is the 9th).
  const bool negative = t < 0;
  const unsigned __int128 m = negative ? -static_cast<unsigned __int128>(t) : static_cast<unsigned __int128>(t);
  const auto top = static_cast<std::uint64_t>(m >> 64);
  const int bits = top != 0 ? 128 - LeadingZeros(top) : 64;
  const int drop = bits - 62;
  std::uint64_t q = static_cast<std::uint64_t>(m >> drop);
  if ((m & ((static_cast<unsigned __int128>(1) << drop) - 1)) != 0) q |= 1;
  const double d =
      static_cast<double>(static_cast<std::int64_t>(q)) * DoubleOfBits(static_cast<std::uint64_t>(1023 + drop) << 52);
  return negative ? -d : d;
}
TALLY_HD double FixedSumOf(__int128 total, int scale) {
  const double rounded = RoundedToDouble(total);
  if (scale >= -1023 && scale <= 1022) {
    return rounded * DoubleOfBits(static_cast<std::uint64_t>(1023 - scale) << 52);
  }
#if defined(__CUDA_ARCH__)
  return ::ldexp(rounded, -scale);
#else
  return std::ldexp(rounded, -scale);
#endif
}

}  // namespace tally::rules::keyed
