// Order-preserving keys of numbers: an unsigned integer of the element's
// width whose unsigned order is numeric order, -0.0 taken as 0.0 (numpy
// compares them equal). The GPU's radix selections (kernels/src/select)
// and the host's (the quantile state) both take order statistics by these
// keys, so both answer the same element, and 0.0 for a zero.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tally/rules/hd.h"

namespace tally::rules {

template <typename T>
using KeyOf = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;

template <typename K>
inline constexpr int kKeyBits = static_cast<int>(sizeof(K) * 8);

template <typename T>
TALLY_HD KeyOf<T> BitsOf(T v) {
  KeyOf<T> b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// The key of a number (never NaN): floats sign-folded so that unsigned order
// is numeric order, with -0.0 taken as 0.0; signed integers with the sign bit
// flipped; unsigned ones as they are.
template <typename T>
TALLY_HD KeyOf<T> NumberKey(T v) {
  using K = KeyOf<T>;
  constexpr K kSign = K{1} << (kKeyBits<K> - 1);
  if constexpr (std::is_floating_point_v<T>) {
    K b = BitsOf(v);
    if ((b << 1) == 0) b = 0;
    return (b & kSign) ? static_cast<K>(~b) : static_cast<K>(b | kSign);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<K>(static_cast<K>(v) ^ kSign);
  } else {
    return static_cast<K>(v);
  }
}

// The element bits of the number whose NumberKey is `key` (0.0 for the
// key of zero): the inverse of NumberKey.
template <typename T>
TALLY_HD KeyOf<T> NumberBits(KeyOf<T> key) {
  using K = KeyOf<T>;
  constexpr K kSign = K{1} << (kKeyBits<K> - 1);
  if constexpr (std::is_floating_point_v<T>) {
    return (key & kSign) ? static_cast<K>(key & ~kSign) : static_cast<K>(~key);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<K>(key ^ kSign);
  } else {
    return key;
  }
}

// The number whose NumberKey is `key`.
template <typename T>
TALLY_HD T NumberOfKey(KeyOf<T> key) {
  const KeyOf<T> bits = NumberBits<T>(key);
  T v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace tally::rules
