// What group-by's passes on the host keep per key, and how they fill it
// (keyed_sums.cc's direct pass, keyed_partitions.h's partitioned pass):
// the GPU direct pass's integer arithmetic (tally/rules/keyed_sums.h), so
// the sums do not depend on which rows a thread took or in what order.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "server/engine/device_grouping.h"
#include "server/engine/huge_pages.h"
#include "tally/rules/keyed_sums.h"

namespace tally::grouping::keyed_host {

namespace keyed = rules::keyed;

// Rows a part of a row pass holds at least: below that, handing parts out
// costs more than it saves.
inline constexpr std::uint64_t kRowsPerPart = std::uint64_t{1} << 20;

// A key's slot: the fixed-point sum as SplitFixed's two parts, the counts
// (fewer than 2^31 rows), and the extremes in the values' type with -0.0
// read as +0.0 (what the GPU's order-preserving integers give). 32 bytes
// for float32 values, so that an element updates one line; float64's take
// a line. Infinities and zeros' signs are rare and kept apart
// (Table::marks). With a
// 64-byte slot of a 128-bit sum and float64 extremes, and ToFixed128 per
// element, the pass took 8.5-10.5 ns a row on one core; 1.9-2.1 ns like
// this (16 and 65,536 keys, docs/performance.md, "Group-by").
template <typename V>
struct alignas(sizeof(V) == 4 ? 32 : 64) Slot {
  std::int64_t high = 0, low = 0;
  std::uint32_t count = 0, nan = 0;
  V min = std::numeric_limits<V>::infinity(), max = -std::numeric_limits<V>::infinity();

  void Add(const Slot& o) {
    high += o.high;
    low += o.low;
    count += o.count;
    nan += o.nan;
    min = std::min(min, o.min);
    max = std::max(max, o.max);
  }
};

// What a key's elements held besides finite values: KeyedSums'
// infinities (the low two bits), and the zeros' signs, which the
// partitioned pass keeps (WriteGroups).
enum : std::uint8_t {
  kPlusInfinity = 1,
  kMinusInfinity = 2,
  kPlusZero = 4,
  kMinusZero = 8,
};

// A run of slots, one per key offset, and their marks, null when no key
// can have one (no infinity in the column, nor a zero where zeros are
// kept).
template <typename V>
struct Table {
  Slot<V>* slots = nullptr;
  std::uint8_t* marks = nullptr;

  void Add(const Table& o, std::uint64_t n) const {
    for (std::uint64_t j = 0; j < n; ++j) slots[j].Add(o.slots[j]);
    if (marks != nullptr) {
      for (std::uint64_t j = 0; j < n; ++j) marks[j] |= o.marks[j];
    }
  }
};

// A bool key's byte: any nonzero byte is True (as the GPU reads it).
struct BoolByte {
  std::uint8_t byte;
};

template <typename K>
std::uint64_t Ordered(K k) {
  if constexpr (std::is_same_v<K, BoolByte>) {
    return k.byte != 0 ? 1 : 0;
  } else {
    return keyed::OrderedKey(k);
  }
}

// Rows [begin, end): the smallest and largest ordered key, the bits of the
// largest finite |value|, and whether any value is NaN, infinite or zero.
struct Extremes {
  std::uint64_t lo = ~std::uint64_t{0}, hi = 0, magnitude = 0;
  bool nan = false, infinity = false, zero = false;

  void Add(const Extremes& e) {
    lo = std::min(lo, e.lo);
    hi = std::max(hi, e.hi);
    magnitude = std::max(magnitude, e.magnitude);
    nan = nan || e.nan;
    infinity = infinity || e.infinity;
    zero = zero || e.zero;
  }
};
template <typename K, typename V>
Extremes RangeAndMagnitude(const K* keys, const V* values, std::uint64_t begin, std::uint64_t end) {
  Extremes e;
  for (std::uint64_t i = begin; i < end; ++i) {
    const std::uint64_t k = Ordered(keys[i]);
    e.lo = std::min(e.lo, k);
    e.hi = std::max(e.hi, k);
    const double v = std::fabs(static_cast<double>(values[i]));
    if (std::isfinite(v)) {
      std::uint64_t b;
      std::memcpy(&b, &v, 8);
      e.magnitude = std::max(e.magnitude, b);
      e.zero = e.zero || b == 0;
    } else if (v == v) {
      e.infinity = true;
    } else {
      e.nan = true;
    }
  }
  return e;
}

// Values [begin, end): the exponent of the lowest bit set in any finite
// one (v = m x 2^e with m odd: the smallest e; INT_MAX for none).
template <typename V>
int LowestBit(const V* values, std::uint64_t begin, std::uint64_t end) {
  int lowest = std::numeric_limits<int>::max();
  for (std::uint64_t i = begin; i < end; ++i) {
    const double v = static_cast<double>(values[i]);
    std::uint64_t b;
    std::memcpy(&b, &v, 8);
    b &= ~(std::uint64_t{1} << 63);
    const int exponent = static_cast<int>(b >> 52);
    if (b == 0 || exponent == 0x7ff) continue;
    const std::uint64_t m = (b & ((std::uint64_t{1} << 52) - 1)) | (exponent != 0 ? std::uint64_t{1} << 52 : 0);
    lowest = std::min(lowest, (exponent != 0 ? exponent : 1) - 1075 + std::countr_zero(m));
  }
  return lowest;
}

// Whether every finite value whose lowest bit set is at least 2^lowest_bit
// is exact on the fixed-point grid of `scale` (a multiple of 2^-scale).
inline bool ExactOnGrid(int lowest_bit, int scale) {
  return lowest_bit == std::numeric_limits<int>::max() || lowest_bit + scale >= 0;
}

// Rows [begin, end) into `table`, as the GPU's AddTo adds them: row i is
// the value row_at(i).value at slot row_at(i).key. `unit` is the scale's
// (SplitFixed). kGeneral: for the general path's answers,
// mark zeros' signs (the pass takes only columns exact on the grid:
// ExactOnGrid).
template <bool kGeneral, typename V, typename RowAt>
void Accumulate(RowAt row_at, std::uint64_t begin, std::uint64_t end, const keyed::FixedUnit& unit,
                const Table<V>& table) {
  Slot<V>* const s = table.slots;
  for (std::uint64_t i = begin; i < end; ++i) {
    const auto [j, v] = row_at(i);
    Slot<V>& slot = s[j];
    ++slot.count;
    if (!std::isfinite(v)) [[unlikely]] {
      if (std::isnan(v)) {
        ++slot.nan;
        continue;
      }
      table.marks[j] |= v > 0 ? kPlusInfinity : kMinusInfinity;
      slot.min = std::min(slot.min, v);
      slot.max = std::max(slot.max, v);
      continue;
    }
    bool rounded = false;  // no pass needs it: see ExactOnGrid
    const keyed::FixedParts f = keyed::SplitFixed(static_cast<double>(v), unit, rounded);
    slot.high += f.high;
    slot.low += f.low;
    const V x = v + V{0};  // -0.0 as +0.0
    slot.min = x < slot.min ? x : slot.min;
    slot.max = x > slot.max ? x : slot.max;
    if constexpr (kGeneral) {
      if (v == 0) [[unlikely]] table.marks[j] |= std::signbit(v) ? kMinusZero : kPlusZero;
    }
  }
}

// A row as Accumulate reads it: its slot and its value.
template <typename V>
struct KeyedValue {
  std::uint64_t key;
  V value;
};

// How many of `table`'s first n keys hold an element.
template <typename V>
std::uint64_t GroupsIn(const Table<V>& table, std::uint64_t n) {
  std::uint64_t groups = 0;
  for (std::uint64_t j = 0; j < n; ++j) groups += table.slots[j].count != 0 ? 1 : 0;
  return groups;
}

// `out`'s vectors sized for `groups` groups (keys of `key_size` bytes),
// with room for `room` (buffers of several huge pages advised first), but
// for NaN counts and infinities where the column holds none (`column`'s
// flags: left empty, as KeyedSums allows).
inline void SizeGroups(std::uint64_t groups, std::uint64_t room, std::size_t key_size, const Extremes& column,
                       KeyedSums& out) {
  const auto size = [&](auto& v, std::size_t per_group) {
    ReserveHuge(v, std::max(groups, room) * per_group);
    v.resize(groups * per_group);
  };
  size(out.keys, key_size);
  size(out.count, 1);
  if (column.nan) size(out.nan, 1);
  if (column.infinity) size(out.infinities, 1);
  size(out.sum, 1);
  size(out.min, 1);
  size(out.max, 1);
  size(out.mean, 1);
  out.groups = groups;
}

// `table`'s first n keys that hold an element (key offset j is the
// ordered key base + j), written to `out` (sized by SizeGroups) from group
// `at` on, in ascending key order. kGeneral: with the general path's zeros
// (its extremes keep a zero's sign as they meet it, and a sum of only -0.0
// is -0.0), from the marks: false where a key's extreme is a zero and the
// key holds zeros of both signs, whose sign depends on the order the
// general path meets them in.
template <bool kGeneral, typename K, typename V>
bool WriteGroups(const Table<V>& table, std::uint64_t n, std::uint64_t base, bool signed_key, int scale,
                 std::uint64_t at, KeyedSums& out) {
  const bool nan = !out.nan.empty(), infinity = !out.infinities.empty();
  for (std::uint64_t j = 0; j < n; ++j) {
    const Slot<V>& s = table.slots[j];
    if (s.count == 0) continue;
    std::uint64_t key = base + j;
    if (signed_key) key ^= std::uint64_t{1} << 63;  // back from the ordered form
    const std::uint8_t marks = table.marks != nullptr ? table.marks[j] : 0;
    // The key's low bytes: the key dtype's (a bool key's byte 0 or 1).
    using Bytes = std::conditional_t<std::is_same_v<K, BoolByte>, std::uint8_t, K>;
    const auto narrow = static_cast<Bytes>(key);
    std::memcpy(out.keys.data() + at * sizeof(Bytes), &narrow, sizeof(Bytes));
    out.count[at] = s.count;
    if (nan) out.nan[at] = s.nan;
    if (infinity) out.infinities[at] = marks & (kPlusInfinity | kMinusInfinity);
    // The finite elements' sum, as FixedSum gives it from the GPU's words.
    double sum = keyed::FixedSumOf(keyed::FixedTotal(s.high, s.low), scale);
    // A key of only NaN: the GPU's untouched extremes.
    const bool some = s.count > s.nan;
    double min = some ? static_cast<double>(s.min) : keyed::FromOrdered(keyed::kNoLow);
    double max = some ? static_cast<double>(s.max) : keyed::FromOrdered(keyed::kNoHigh);
    if constexpr (kGeneral) {
      if ((marks & kMinusZero) != 0 && (min == 0 || max == 0)) {
        if ((marks & kPlusZero) != 0) return false;
        // Every zero is -0.0; with min and max both zero, so is every
        // finite element.
        if (min == 0) min = -0.0;
        if (max == 0) max = -0.0;
        if (min == 0 && max == 0) sum = -0.0;
      }
    }
    out.sum[at] = sum;
    out.min[at] = min;
    out.max[at] = max;
    out.mean[at] = sum / static_cast<double>(s.count);
    ++at;
  }
  return true;
}

}  // namespace tally::grouping::keyed_host
