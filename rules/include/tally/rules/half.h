// The two 16-bit float element types: IEEE 754 binary16 (numpy.float16)
// and bfloat16 (ml_dtypes.bfloat16: float32's sign and exponent, 7 bits of
// mantissa). Both are storage types: every value they hold is exact in
// float32, so arithmetic reads them as float (the implicit conversion) and
// only the rules that numpy states in the input's dtype (histogram edges,
// ptp's difference) round back to them (RoundTo).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tally/rules/hd.h"

namespace tally::rules {

namespace detail {

TALLY_HD float FloatFromBits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

TALLY_HD std::uint64_t BitsOfDouble(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(d));
#else
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}

// binary16 bits to float, exactly and without branches, so that the CPU
// backend's loops still vectorize: the 5-bit exponent is rebased by adding
// 224 (0xE0) to float's and the value scaled by 2^-112 (which also carries
// infinities and NaNs over), and subnormals, whose exponent field is 0, are
// built as (0.5 + m * 2^-24) - 0.5 with the mantissa below float's 0.5.
TALLY_HD float HalfBitsToFloat(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;  // drops the sign
  const float normal = FloatFromBits((two_w >> 4) + (0xE0u << 23)) * 1.92592994e-34f;  // 2^-112
  const float subnormal = FloatFromBits((two_w >> 17) | (126u << 23)) - 0.5f;
  std::uint32_t bits;
  const float chosen = two_w < (1u << 27) ? subnormal : normal;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(chosen);
#else
  std::memcpy(&bits, &chosen, sizeof bits);
#endif
  return FloatFromBits(sign | bits);
}

// x rounded to nearest, ties to even (x >= 0, and a whole number times 0.5
// at most: the scaled values below are exact in float64).
TALLY_HD double RoundHalfEven(double x) {
  double r = static_cast<double>(static_cast<std::uint64_t>(x));
  const double rest = x - r;
  if (rest > 0.5 || (rest == 0.5 && (static_cast<std::uint64_t>(r) & 1u) != 0)) r += 1.0;
  return r;
}

TALLY_HD double DoubleFromBits(std::uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}

// 2^k as a double, for |k| <= 1022: its exponent field alone.
TALLY_HD double PowerOfTwo(int k) { return DoubleFromBits(static_cast<std::uint64_t>(1023 + k) << 52); }

// d rounded once, to nearest even, to a binary format with kExpBits of
// exponent and kManBits of mantissa (subnormals, overflow to infinity, NaN
// kept), returned as its bits. Rounding float64 straight to the 16-bit
// format, not through float32, avoids double rounding. Straight-line code
// (one exact multiplication by a power of two, no loops): the kernels'
// histogram edges inline it per element, and loops there multiplied the
// kernels' compile time for the 16-bit types by eight.
template <int kExpBits, int kManBits>
TALLY_HD std::uint16_t RoundDoubleToBits(double d) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr std::uint16_t kInf = static_cast<std::uint16_t>(((1u << kExpBits) - 1) << kManBits);
  const std::uint64_t u = BitsOfDouble(d);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 48) & 0x8000u);
  const std::uint64_t mag = u & 0x7FFFFFFFFFFFFFFFull;
  if (mag > 0x7FF0000000000000ull) return static_cast<std::uint16_t>(sign | kInf | (1u << (kManBits - 1)));
  if (mag == 0x7FF0000000000000ull) return static_cast<std::uint16_t>(sign | kInf);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // sm_90 rounds float64 to both formats once, to nearest even, in one
  // instruction (the kernels' histogram edges call this per element).
  std::uint16_t h;
  if constexpr (kExpBits == 5 && kManBits == 10) {
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
    return h;
  } else if constexpr (kExpBits == 8 && kManBits == 7) {
    asm("cvt.rn.bf16.f64 %0, %1;" : "=h"(h) : "d"(d));
    return h;
  }
#endif
  const double a = d < 0 ? -d : d;
  const int e = static_cast<int>(mag >> 52) - 1023;  // a in [2^e, 2^(e+1)) for normal doubles
  constexpr int kMinExp = 1 - kBias;
  if (e < kMinExp) {
    // Subnormal in the target (or zero): units of 2^(kMinExp - kManBits).
    // Exact: a < 2^kMinExp, so the product stays below 2^kManBits.
    const double q = RoundHalfEven(a * PowerOfTwo(kManBits - kMinExp));  // may reach 2^kManBits: the smallest normal, which the bits then encode
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(q));
  }
  if (e > kBias) return static_cast<std::uint16_t>(sign | kInf);
  // a / 2^e * 2^kManBits, in [2^kManBits, 2^(kManBits+1)), exact
  // (kManBits - e is within [kManBits - kBias, kManBits - kMinExp]).
  std::uint64_t q = static_cast<std::uint64_t>(RoundHalfEven(a * PowerOfTwo(kManBits - e)));
  int exp = e;
  if (q == (std::uint64_t{2} << kManBits)) {
    q >>= 1;
    ++exp;
  }
  if (exp > kBias) return static_cast<std::uint16_t>(sign | kInf);
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp + kBias) << kManBits) |
                                    (static_cast<std::uint32_t>(q) & ((1u << kManBits) - 1)));
}

}  // namespace detail

// Both convert from double by rounding once to nearest even, as numpy
// casts (implicitly, so numbers in code and tests read as they do for
// float), and to float exactly.
// numpy.float16.
struct Float16 {
  std::uint16_t bits;
  Float16() = default;
  TALLY_HD Float16(double d) : bits(detail::RoundDoubleToBits<5, 10>(d)) {}
  static constexpr Float16 FromBits(std::uint16_t b) {
    Float16 h{};
    h.bits = b;
    return h;
  }
  TALLY_HD operator float() const {
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
#else
    return detail::HalfBitsToFloat(bits);
#endif
  }
};

// bfloat16 as ml_dtypes defines it: the top half of a float32.
struct BFloat16 {
  std::uint16_t bits;
  BFloat16() = default;
  TALLY_HD BFloat16(double d) : bits(detail::RoundDoubleToBits<8, 7>(d)) {}
  static constexpr BFloat16 FromBits(std::uint16_t b) {
    BFloat16 h{};
    h.bits = b;
    return h;
  }
  TALLY_HD operator float() const { return detail::FloatFromBits(static_cast<std::uint32_t>(bits) << 16); }
};

// Negation flips the sign bit, as numpy's does (NaNs included).
TALLY_HD constexpr Float16 operator-(Float16 x) { return Float16::FromBits(static_cast<std::uint16_t>(x.bits ^ 0x8000u)); }
TALLY_HD constexpr BFloat16 operator-(BFloat16 x) { return BFloat16::FromBits(static_cast<std::uint16_t>(x.bits ^ 0x8000u)); }

static_assert(sizeof(Float16) == 2 && std::is_trivially_copyable_v<Float16>);
static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);

// Element types that are floating point: the language's and the two above.
template <typename V>
inline constexpr bool kIsFloatValue =
    std::is_floating_point_v<V> || std::is_same_v<V, Float16> || std::is_same_v<V, BFloat16>;

// d rounded to T once (to nearest, ties to even), as numpy casts float64.
template <typename T>
TALLY_HD T RoundTo(double d) {
  return static_cast<T>(d);
}

}  // namespace tally::rules

// The limits numpy.finfo gives, so that code written for float and double
// (identities of min and max, range checks) reads them the same way.
template <>
struct std::numeric_limits<tally::rules::Float16> {
  using T = tally::rules::Float16;
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 11;
  static constexpr tally::rules::Float16 infinity() { return T::FromBits(0x7C00); }
  static constexpr tally::rules::Float16 quiet_NaN() { return T::FromBits(0x7E00); }
  static constexpr tally::rules::Float16 max() { return T::FromBits(0x7BFF); }     // 65504
  static constexpr tally::rules::Float16 lowest() { return T::FromBits(0xFBFF); }  // -65504
  static constexpr tally::rules::Float16 min() { return T::FromBits(0x0400); }     // 2^-14
  static constexpr tally::rules::Float16 epsilon() { return T::FromBits(0x1400); } // 2^-10
};

template <>
struct std::numeric_limits<tally::rules::BFloat16> {
  using T = tally::rules::BFloat16;
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 8;
  static constexpr tally::rules::BFloat16 infinity() { return T::FromBits(0x7F80); }
  static constexpr tally::rules::BFloat16 quiet_NaN() { return T::FromBits(0x7FC0); }
  static constexpr tally::rules::BFloat16 max() { return T::FromBits(0x7F7F); }     // 3.3895314e38
  static constexpr tally::rules::BFloat16 lowest() { return T::FromBits(0xFF7F); }
  static constexpr tally::rules::BFloat16 min() { return T::FromBits(0x0080); }     // 2^-126
  static constexpr tally::rules::BFloat16 epsilon() { return T::FromBits(0x3C00); } // 2^-7
};
