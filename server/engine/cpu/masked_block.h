// A block's valid elements under a validity mask (tally/rules/validity.h):
// how many there are, and the valid ones gathered in order with their
// positions, so that the dense block loops (block_kernels.h) reduce them as
// they reduce any block. The gather depends only on the block's bytes and
// bits, so masked results stay bitwise deterministic.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "server/engine/cpu/tuning.h"

namespace tally::cpu {

// The mask's bits from element `first` on, 64 at a time.
class MaskBits {
 public:
  MaskBits(const std::uint32_t* words, std::uint64_t length) : words_(words), words_count_((length + 31) / 32) {}

  // Bits of elements [first, first + 64); those past the mask's end are 0.
  std::uint64_t At(std::uint64_t first) const {
    const std::uint64_t w = first >> 5, shift = first & 31;
    std::uint64_t bits = Word(w) | (Word(w + 1) << 32);
    bits >>= shift;
    if (shift != 0) bits |= Word(w + 2) << (64 - shift);
    return bits;
  }

  // Valid elements in [first, first + n).
  std::size_t Count(std::uint64_t first, std::size_t n) const {
    std::size_t valid = 0;
    for (std::size_t i = 0; i < n; i += 64) {
      std::uint64_t bits = At(first + i);
      if (n - i < 64) bits &= (std::uint64_t{1} << (n - i)) - 1;
      valid += static_cast<std::size_t>(std::popcount(bits));
    }
    return valid;
  }

 private:
  std::uint64_t Word(std::uint64_t w) const { return w < words_count_ ? words_[w] : 0; }
  const std::uint32_t* words_;
  std::uint64_t words_count_;
};

// Room for one block's valid elements and their positions in the block,
// allocated on first use.
template <typename V>
struct Gathered {
  std::unique_ptr<V[]> values;
  std::unique_ptr<std::uint32_t[]> positions;

  // Gathers the valid elements of x[0, n) (element `first` of the array
  // at x[0]) and returns how many; positions[k] is values[k]'s index in x.
  std::size_t From(const V* x, std::size_t n, const MaskBits& mask, std::uint64_t first) {
    if (!values) {
      values = std::make_unique_for_overwrite<V[]>(CpuPolicy::kBlockElements);
      positions = std::make_unique_for_overwrite<std::uint32_t[]>(CpuPolicy::kBlockElements);
    }
    std::size_t k = 0;
    for (std::size_t i = 0; i < n; i += 64) {
      const std::uint64_t bits = mask.At(first + i);
      const std::size_t m = n - i < 64 ? n - i : 64;
      // Branch-free: every element is written, and kept by advancing k.
      for (std::size_t j = 0; j < m; ++j) {
        values[k] = x[i + j];
        positions[k] = static_cast<std::uint32_t>(i + j);
        k += static_cast<std::size_t>((bits >> j) & 1u);
      }
    }
    return k;
  }
};

}  // namespace tally::cpu
