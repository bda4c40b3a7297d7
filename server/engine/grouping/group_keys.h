// Which group each row of a table belongs to: the distinct values of the
// key columns (GROUP BY a, b), numbered in the order the answer lists them.
// pandas' rules (DataFrame.groupby): ascending key order, or the order in
// which keys are first seen; -0.0 and 0.0 are one key and every NaN is one;
// a key that is NaN or missing (validity bit 0) is NA, and a row with an NA
// key is dropped, or, when NA groups are kept, NA is one more value that
// sorts after every other in its column.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/request.h"

namespace tally::grouping {

// A row that is in no group: one of its keys is NA and NA groups are dropped.
inline constexpr std::uint32_t kNoGroup = 0xffffffffu;

// One key column's elements as they arrived (host memory, little-endian),
// `rows` of them, with its validity mask (null: every key is present).
struct KeyColumn {
  DType dtype = DType::kInt64;
  std::span<const std::byte> data;
  Validity validity;
};

struct GroupOptions {
  bool sort = true;         // ascending key order; false: first-seen order
  bool dropna = true;       // drop rows whose key is NA; false: NA is a group
  std::uint64_t max_groups = std::uint64_t{1} << 24;
};

struct Groups {
  std::uint64_t count = 0;
  std::vector<std::uint32_t> of_row;     // per row: its group, or kNoGroup
  std::vector<std::uint64_t> first_row;  // per group: the first row that has its key
};

// The groups of `rows` rows keyed by `keys` (1 to kMaxKeyColumns columns of
// `rows` elements each; checked by the caller). RESOURCE_EXHAUSTED naming
// --max_groups when there are more than options.max_groups.
[[nodiscard]] absl::StatusOr<Groups> FindGroups(std::span<const KeyColumn> keys, std::uint64_t rows,
                                                const GroupOptions& options);

// Whether the key of row `row` in `column` is NA (missing, or NaN).
bool KeyIsMissing(const KeyColumn& column, std::uint64_t row);

}  // namespace tally::grouping
