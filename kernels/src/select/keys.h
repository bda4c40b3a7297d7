// Order-preserving keys of elements for the radix passes, and the bucket
// table the passes count in. Shared by the kernels and the host code that
// plans them (plain C++ when not compiled by nvcc).
//
// A key is an unsigned integer of the element's width whose unsigned order is
// the order the function needs: numbers ascending with -0.0 equal to 0.0
// (numpy compares them equal, so topk breaks their tie by index), NaN either
// left out (quantiles count it apart), above every number (numpy.sort's
// order), or, for the smallest k taken as a largest k, every key flipped.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tally/rules/order_key.h"

#if defined(__CUDACC__)
#define TALLY_SELECT_HD __host__ __device__ __forceinline__
#else
#define TALLY_SELECT_HD inline
#endif

namespace tally::kernels::select {

enum class KeyMode : std::uint8_t {
  kNumbers,  // ascending numbers; NaN has no key (the passes count it apart)
  kNanHigh,  // ascending, NaN above every number: topk takes the largest keys
  kFlipped,  // kNanHigh's keys complemented: bottomk takes the largest of these
};

using rules::BitsOf;
using rules::KeyOf;
using rules::kKeyBits;
using rules::NumberBits;
using rules::NumberKey;

template <typename T>
TALLY_SELECT_HD bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    (void)v;
    return false;
  }
}

// The key of any element in mode M (kNumbers: the caller has left NaN out).
template <KeyMode M, typename T>
TALLY_SELECT_HD KeyOf<T> KeyIn(T v) {
  using K = KeyOf<T>;
  const K high = IsNan(v) ? static_cast<K>(~K{0}) : NumberKey(v);
  if constexpr (M == KeyMode::kFlipped) return static_cast<K>(~high);
  return high;
}

// The bucket table. The top kLevelBits of a key pick a bin; a bin splits
// [lo, lo + nsub << shift) into nsub equal sub-ranges, with one bucket below
// lo and one for the rest of the bin above. Bucket numbers rise with the
// key, so counts summed in bucket order are counts below a key.
//
// A bin is read once per element of the counting and gathering passes, so
// it packs into one shared-memory load (8 bytes for 32-bit keys, 16 for
// 64-bit ones): `meta` holds the first sub-range's bucket (14 bits: at most
// 16384 buckets), nsub (13 bits: at most 8191) and, for 32-bit keys, the
// shift (5 bits); 64-bit keys keep their shift apart.
inline constexpr int kLevelBits = 10;
inline constexpr int kLevelBins = 1 << kLevelBits;
inline constexpr std::uint32_t kMaxSubRanges = (1u << 13) - 1;

template <typename K>
struct Bin;
template <>
struct alignas(8) Bin<std::uint32_t> {
  std::uint32_t lo;
  std::uint32_t meta;
};
template <>
struct alignas(16) Bin<std::uint64_t> {
  std::uint64_t lo;
  std::uint32_t meta;
  std::uint32_t shift;
};

template <typename K>
TALLY_SELECT_HD Bin<K> MakeBin(K lo, std::uint32_t base, std::uint32_t nsub, std::uint32_t shift) {
  Bin<K> b{};
  b.lo = lo;
  b.meta = (base + 1) | (nsub << 14);
  if constexpr (sizeof(K) == 4) {
    b.meta |= shift << 27;
  } else {
    b.shift = shift;
  }
  return b;
}
template <typename K>
TALLY_SELECT_HD std::uint32_t BaseOf(const Bin<K>& b) {
  return (b.meta & 0x3fffu) - 1;
}
template <typename K>
TALLY_SELECT_HD std::uint32_t SubRangesOf(const Bin<K>& b) {
  return (b.meta >> 14) & kMaxSubRanges;
}
template <typename K>
TALLY_SELECT_HD std::uint32_t ShiftOf(const Bin<K>& b) {
  if constexpr (sizeof(K) == 4) {
    return b.meta >> 27;
  } else {
    return b.shift;
  }
}

template <typename K>
TALLY_SELECT_HD std::uint32_t LevelOf(K key) {
  return static_cast<std::uint32_t>(key >> (kKeyBits<K> - kLevelBits));
}

// Without branches: key and lo lie in one bin, so their difference fits the
// signed type; below lo it shifts to -1 or less, clamped to the bucket below.
template <typename K>
TALLY_SELECT_HD std::uint32_t BucketIn(const Bin<K>& b, K key) {
  using S = std::make_signed_t<K>;
  S d = static_cast<S>(static_cast<K>(key - b.lo)) >> ShiftOf(b);
  d = d < S{-1} ? S{-1} : d;
  const auto top = static_cast<S>(SubRangesOf(b));
  d = d > top ? top : d;
  return (b.meta & 0x3fffu) + static_cast<std::int32_t>(d);
}

// A key range [lo, hi] within one bucket, holding ranks still to narrow:
// the gathering pass keeps its elements, the refining pass counts them in
// nsub sub-ranges of 2^shift keys from `base` on (the last one takes the
// rest). The buckets' segments are listed in key order; map[bucket] says
// where its own start and how many there are: first | count << 16.
template <typename K>
struct Segment {
  K lo;
  K hi;
  std::uint32_t base;
  std::uint32_t nsub;
  std::uint32_t shift;
};

TALLY_SELECT_HD std::uint32_t MapEntry(std::uint32_t first, std::uint32_t count) { return first | (count << 16); }

}  // namespace tally::kernels::select
