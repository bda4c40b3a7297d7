// What a read of an immutable column found, kept with the column so that
// later requests need not read it again. A resident dataset holds one per
// version (a replaced dataset is a new version with none yet); inline
// columns, regions (their owner may write to them) and copies hold none.
//
// Group-by's direct pass on the GPU reads its key column for the keys'
// range and its value column for the largest finite magnitude (the
// fixed-point scale) before it accumulates: one read of both columns, a
// third of its time at 16 groups over 2^28 resident rows on an H200
// (docs/performance.md). Both are facts of one column each, so each column
// keeps its own, whichever request found it.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

namespace tally {

class ColumnFacts {
 public:
  // The keys as tally/kernels/group.h's KeySpread has them: the smallest
  // as an order-preserving unsigned number, and largest - smallest + 1.
  struct KeyRange {
    std::uint64_t lowest = 0;
    std::uint64_t range = 0;
  };

  std::optional<KeyRange> key_range() const {
    std::lock_guard<std::mutex> hold(mu_);
    return key_range_;
  }
  void set_key_range(KeyRange r) {
    std::lock_guard<std::mutex> hold(mu_);
    key_range_ = r;
  }
  // The largest finite |value| as a float64's bits (0 for none), as
  // KeySpread::largest.
  std::optional<std::uint64_t> largest_magnitude() const {
    std::lock_guard<std::mutex> hold(mu_);
    return largest_;
  }
  void set_largest_magnitude(std::uint64_t bits) {
    std::lock_guard<std::mutex> hold(mu_);
    largest_ = bits;
  }

 private:
  mutable std::mutex mu_;
  std::optional<KeyRange> key_range_;
  std::optional<std::uint64_t> largest_;
};

}  // namespace tally
