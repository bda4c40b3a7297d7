// Variable-length segments: an array cut by CSR offsets (numpy's
// add.reduceat indices, Arrow's list offsets, CUB's segment offsets), one
// result per segment. The rule an offsets array must keep, shared by the
// server's validation and the clients, so that both refuse the same ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tally::rules {

// The first thing wrong with an offsets array, or kNone. `index` is the
// entry at fault.
struct OffsetsFault {
  enum Kind {
    kNone,
    kEmpty,          // no entries: even zero segments take one (offsets = [0])
    kFirstNotZero,   // offsets[0] != 0
    kDecreasing,     // offsets[index] < offsets[index - 1]
    kPastLength,     // offsets[index] > length
    kLastNotLength,  // the last entry != length: elements left in no segment
  };
  Kind kind = kNone;
  std::size_t index = 0;
};

// Segment s is [offsets[s], offsets[s + 1]); there are offsets.size() - 1
// segments. Entries must start at 0, never decrease and end at `length`;
// segments may be empty. `I` is the wire's int64 or a checked copy's
// uint64; negative entries are caught as kFirstNotZero or kDecreasing (the
// first is 0 and none decreases).
template <typename I>
constexpr OffsetsFault CheckOffsets(std::span<const I> offsets, std::uint64_t length) {
  if (offsets.empty()) return {OffsetsFault::kEmpty, 0};
  if (offsets[0] != 0) return {OffsetsFault::kFirstNotZero, 0};
  for (std::size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1]) return {OffsetsFault::kDecreasing, i};
    if (static_cast<std::uint64_t>(offsets[i]) > length) return {OffsetsFault::kPastLength, i};
  }
  if (static_cast<std::uint64_t>(offsets.back()) != length) {
    return {OffsetsFault::kLastNotLength, offsets.size() - 1};
  }
  return {};
}

}  // namespace tally::rules
