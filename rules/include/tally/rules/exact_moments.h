// The second moment about the mean from exact sums: M2 = sum (x - mean)^2
// with mean = S / n exactly, from S = sum x and Q = sum x^2 (ExactSum, each
// exact), as M2 = (n Q - S^2) / n, rounded once to float64. Integer
// arithmetic on the sums' digits, so the same S, Q and n give the same bits
// on every path: variance and stddev inherit exact sums' independence of
// order, chunking, shards and merges. Then (partial.h) var = M2 / (n -
// ddof) and std = sqrt(var) in float64, as numpy divides: within an ulp or
// two of the true variance, where a float64 pass over the data (numpy's
// two-pass variance, Welford's merge) drifts by its rounding per element.
//
// Q is exact where every square is: x^2 of a float32, float16 or bfloat16
// is a double, and of a float64 the sum of two (x * x and its FMA error),
// whenever neither underflows (|x| above about 2^-485) nor overflows (|x|
// below 2^512; past it the square is an infinity, as numpy's is).
//
// Host code: the sums' digits as arbitrary-precision integers.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tally/rules/exact_sum.h"

namespace tally::rules {

namespace exact_detail {

// Unsigned integers as 32-bit digits, lowest first, none zero at the top.
using Digits = std::vector<std::uint32_t>;

inline void Trim(Digits& a) {
  while (!a.empty() && a.back() == 0) a.pop_back();
}

inline int BitLength(const Digits& a) {
  if (a.empty()) return 0;
  return static_cast<int>(32 * (a.size() - 1)) + std::bit_width(a.back());
}

inline Digits Multiply(const Digits& a, const Digits& b) {
  if (a.empty() || b.empty()) return {};
  Digits out(a.size() + b.size(), 0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::uint64_t carry = 0;
    for (std::size_t j = 0; j < b.size(); ++j) {
      const std::uint64_t t = std::uint64_t{a[i]} * b[j] + out[i + j] + carry;
      out[i + j] = static_cast<std::uint32_t>(t);
      carry = t >> 32;
    }
    for (std::size_t k = i + b.size(); carry != 0; ++k) {
      const std::uint64_t t = std::uint64_t{out[k]} + carry;
      out[k] = static_cast<std::uint32_t>(t);
      carry = t >> 32;
    }
  }
  Trim(out);
  return out;
}

inline Digits FromUInt64(std::uint64_t v) {
  Digits out{static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32)};
  Trim(out);
  return out;
}

inline Digits ShiftLeft(const Digits& a, int bits) {
  if (a.empty()) return {};
  const std::size_t words = static_cast<std::size_t>(bits / 32);
  const int rest = bits % 32;
  Digits out(a.size() + words + 1, 0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::uint64_t v = std::uint64_t{a[i]} << rest;
    out[i + words] |= static_cast<std::uint32_t>(v);
    out[i + words + 1] |= static_cast<std::uint32_t>(v >> 32);
  }
  Trim(out);
  return out;
}

inline int Compare(const Digits& a, const Digits& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (std::size_t i = a.size(); i-- > 0;) {
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  }
  return 0;
}

// a - b for a >= b.
inline Digits Subtract(const Digits& a, const Digits& b) {
  Digits out = a;
  std::int64_t borrow = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t t = std::int64_t{out[i]} - borrow - (i < b.size() ? std::int64_t{b[i]} : 0);
    borrow = t < 0 ? 1 : 0;
    out[i] = static_cast<std::uint32_t>(t + (borrow << 32));
  }
  Trim(out);
  return out;
}

// a := floor(a / d); returns a mod d (d > 0).
inline std::uint64_t DivideInPlace(Digits& a, std::uint64_t d) {
  unsigned __int128 rest = 0;
  for (std::size_t i = a.size(); i-- > 0;) {
    const unsigned __int128 v = (rest << 32) | a[i];
    a[i] = static_cast<std::uint32_t>(v / d);
    rest = v % d;
  }
  Trim(a);
  return static_cast<std::uint64_t>(rest);
}

inline bool Bit(const Digits& a, int b) {
  if (b < 0 || static_cast<std::size_t>(b / 32) >= a.size()) return false;
  return ((a[static_cast<std::size_t>(b / 32)] >> (b % 32)) & 1u) != 0;
}

inline bool AnyBelow(const Digits& a, int b) {
  for (int k = 0; k < b; ++k) {
    if (Bit(a, k)) return true;
  }
  return false;
}

// (a / d) * 2^exponent rounded once to float64, to nearest with ties to
// even (a > 0, d > 0): the quotient is taken to at least 66 bits with the
// remainder as a sticky bit, then rounded as ExactSum::Rounded rounds.
inline double RoundQuotient(Digits a, std::uint64_t d, int exponent) {
  const int shift = std::max(0, 66 + static_cast<int>(std::bit_width(d)) - BitLength(a));
  a = ShiftLeft(a, shift);
  exponent -= shift;
  const bool inexact = DivideInPlace(a, d) != 0;
  const int top = BitLength(a) - 1;
  // The last bit kept: 53 from the top, but none below 2^-1074.
  const int lsb = std::max(top - 52, -1074 - exponent);
  std::uint64_t kept = 0;
  for (int b = top; b >= lsb; --b) kept = (kept << 1) | (Bit(a, b) ? 1u : 0u);
  if (Bit(a, lsb - 1) && ((kept & 1) != 0 || inexact || AnyBelow(a, lsb - 1))) ++kept;
  return std::ldexp(static_cast<double>(kept), lsb + exponent);  // exact, or an infinity past float64
}

}  // namespace exact_detail

// M2 = (n Q - S^2) / n rounded once to float64, for n > 0 elements whose
// exact sum is `s` and exact sum of squares `q`. NaN where either saw a NaN
// or an infinity (numpy's variance of such data is NaN). A negative
// difference (possible only where squares underflowed) is 0.
inline double ExactSecondMoment(const ExactSum& s, const ExactSum& q, std::uint64_t n) {
  if (s.HasSpecials() || q.HasSpecials() || n == 0) return std::numeric_limits<double>::quiet_NaN();
  using namespace exact_detail;
  bool s_negative = false, q_negative = false;
  int s_first = 0, q_first = 0;  // each value is its digits times 2^(32 first - 1074)
  const Digits sd = s.MagnitudeDigits(s_negative, s_first);
  const Digits qd = q.MagnitudeDigits(q_negative, q_first);
  if (q_negative) return 0.0;  // only from underflowed squares' errors
  // In units of 2^(-2148 + 32 low): n Q is n qd 2^(1074 + 32 (q_first - low)),
  // S^2 is sd^2 2^(64 s_first - 32 low). Digits below both are zero, so
  // the products stay as short as the values' significant digits.
  const int low = std::min(q_first, 2 * s_first);
  const Digits nq = ShiftLeft(Multiply(qd, FromUInt64(n)), 1074 + 32 * (q_first - low));
  const Digits s2 = ShiftLeft(Multiply(sd, sd), 32 * (2 * s_first - low));
  if (Compare(nq, s2) <= 0) return 0.0;
  return RoundQuotient(Subtract(nq, s2), n, -2148 + 32 * low);
}

}  // namespace tally::rules
