// Group-by's steps on a device (Backend::OrderByKeyOnDevice): a key
// column's rows ordered by key on the GPU that holds it, and columns
// gathered in that order there, so that each group's elements reach the
// segmented kernels without leaving the device (server/engine/grouping).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/column_facts.h"
#include "server/core/request.h"
#include "server/engine/source.h"

namespace tally {

// A column's elements laid out by group, in device memory this owns.
class DeviceColumn {
 public:
  virtual ~DeviceColumn() = default;
  virtual Extent extent() const = 0;
};

class DeviceGroupOrder {
 public:
  virtual ~DeviceGroupOrder() = default;
  std::uint64_t groups = 0;
  // Each group's key: the key element's bytes in the low bytes, in
  // ascending key order.
  std::vector<std::uint64_t> keys;
  // Where each group's rows start in group order (groups + 1 entries).
  Offsets offsets;
  // Whether the last group holds the rows whose key is NaN (float keys;
  // the engine drops it for dropna).
  bool nan_group = false;
  // `column` (device bytes of `dtype`, one element per row) in group order.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<DeviceColumn>> Gather(const Extent& column, DType dtype) = 0;
  // The table's rows in group order, for mapping indices back.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::uint64_t>> Rows() = 0;
  // Each row's group number (uint32, one a row, on the keys' device): its
  // group's place in `offsets`, or `groups` for rows past the last group
  // (a dropped NaN group's). Keys the direct pass does not take (floats, a
  // range past its own) reach it as these.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<DeviceColumn>> GroupNumbers() = 0;
};

// A composite key's columns combined into one on the device
// (Backend::CombineKeysOnDevice; tally/kernels/group.h's CombineKeys): one
// uint64 key per row, whose value is the sum over key columns c of (key -
// lowest[c]) x the product of range[c'] for the columns c' after c, so
// that the combined keys order as the key tuples do (SplitCombinedKeys,
// server/engine/grouping/combined_keys.h, reads each tuple back).
struct CombinedKeyColumn {
  std::unique_ptr<DeviceColumn> column;  // uint64, one element per row
  std::vector<std::uint64_t> lowest;     // per key column, as a 64-bit integer (sign-extended if signed)
  std::vector<std::uint64_t> range;      // per key column, largest - lowest + 1
};

// A key column numbered by group on the device (Backend::NumberKeysOnDevice;
// tally/kernels/group.h's NumberKeysByHash): each row's group's place in
// ascending key order, which the device's steps take as a key in a range
// they read directly.
struct NumberedKeyColumn {
  std::unique_ptr<DeviceColumn> column;  // uint32, one element per row
  // Each group's key: the key element's bytes in the low bytes, ascending.
  std::vector<std::uint64_t> keys;
};

// What Backend::SumByKeyOnDevice gives per group (tally/kernels/group.h's
// DenseGroups): enough for sum, count, min, max, mean and their
// NaN-skipping forms, in ascending key order.
struct KeyedSums {
  std::uint64_t groups = 0;
  std::vector<std::byte> keys;           // each group's key: the key dtype's bytes, groups x its size
  // Elements and NaN elements; `nan` may be empty where no group holds a
  // NaN (the host's passes leave it so: at 1M groups an 8 MB vector costs
  // its first touch).
  std::vector<std::uint64_t> count, nan;
  // Bit 0: +inf seen, bit 1: -inf seen; may be empty where no group holds
  // an infinity.
  std::vector<std::uint8_t> infinities;
  std::vector<double> sum, min, max;     // finite elements' sum; non-NaN extremes
  // sum / count: each group's mean where no group holds a NaN or an
  // infinity, computed where the groups are written (on the GPU for its
  // pass: one array more over the bus instead of a pass over two on the
  // host).
  std::vector<double> mean;
  // Each group's first row in group order (groups + 1 entries, from 0),
  // where the pass gave them (the GPU's); empty: the counts' running sum
  // is the caller's.
  std::vector<std::uint64_t> starts;
  // Whether the keys' range and the values' largest magnitude came from
  // DirectFacts rather than a read of the columns.
  bool spread_known = false;
};

// Which of KeyedSums' per-group arrays a caller reads (DirectAnswers'
// ArraysFor): each is a copy over the bus, 128 MB at 16M groups. The keys,
// the groups' starts and any NaN and infinity counts always come; where
// some group holds a NaN or an infinity, the counts and sums come too (the
// answers are then made group by group from them). A pass may give more.
struct KeyedArrays {
  bool count = true;
  bool sum = true;
  bool min = true;
  bool max = true;
  bool mean = true;
};

// What Backend::SumByKeyOnDevice may know already of its key and value
// columns (their ColumnFacts: the keys' range, the values' largest
// magnitude), and where it leaves what it reads of them; null: nothing.
struct DirectFacts {
  ColumnFacts* keys = nullptr;
  ColumnFacts* values = nullptr;
};

}  // namespace tally
