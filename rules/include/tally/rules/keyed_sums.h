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

// The scale for `rows` elements whose largest finite magnitude has the
// bits `largest` (of a non-negative double; 0 for none).
inline int FixedScale(std::uint64_t largest, std::uint64_t rows) {
  double v = 0;
  std::memcpy(&v, &largest, 8);
  int exponent = 0;
  (void)std::frexp(v, &exponent);  // v < 2^exponent
  return 92 - std::bit_width(rows) - exponent;
}

// The sum of a slot's words: one rounding, then exact scaling.
inline double FixedSum(unsigned long long hi, unsigned long long lo, int scale) {
  const __int128 total = (static_cast<__int128>(static_cast<long long>(hi)) << 32) + static_cast<__int128>(lo);
  return std::ldexp(static_cast<double>(total), -scale);
}

}  // namespace tally::rules::keyed
