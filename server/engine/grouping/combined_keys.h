// Composite keys grouped as one: integer key columns combined into one
// uint64 key per row in mixed radix (on a device, Backend::
// CombineKeysOnDevice; in host memory, CombineKeysOnHost), so that the
// one-key steps group them, and each group's key tuple read back from its
// combined key. Both backends combine alike, so a composite key takes the
// paths (and gives the bits) one key of that range would.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "server/core/group_request.h"
#include "server/engine/device_grouping.h"
#include "server/engine/grouping/grouped_reduction.h"

namespace tally::grouping {

// Whether the plan's keys may be combined: two or more key columns, every
// one of an integer or bool dtype and without a mask, asked in ascending
// order (sort=True; the combined keys order as the tuples do, and no key
// is missing, so dropna has nothing to drop).
[[nodiscard]] bool CombinableKeys(const GroupByPlan& plan);

// The ranges' product past which keys are not combined: the one-key
// steps' widest (the device's order by key takes ranges up to 2^32).
inline constexpr std::uint64_t kMaxCombinedRange = std::uint64_t{1} << 32;

// The plan's key columns (CombinableKeys, in host memory) combined as
// CombinedKeyColumn describes, the combined keys in `combined`; false
// (nothing written) where the ranges multiply past kMaxCombinedRange.
[[nodiscard]] bool CombineKeysOnHost(const GroupByPlan& plan, std::vector<std::uint64_t>& combined,
                                     std::vector<std::uint64_t>& lowest, std::vector<std::uint64_t>& range);

// `plan` grouped by one key instead of its key columns: the combined keys
// at `combined` (uint64, one a row), the value columns as they were.
[[nodiscard]] GroupByPlan WithCombinedKey(const GroupByPlan& plan, const Extent& combined);

// `result`, the answer of WithCombinedKey(plan, ...), with plan's key
// columns in place of the combined key: each group's tuple by division,
// from each column's least key (as a 64-bit integer, sign-extended if
// signed) and range, in the columns' dtypes.
void SplitCombinedKeys(const GroupByPlan& plan, std::span<const std::uint64_t> lowest,
                       std::span<const std::uint64_t> range, GroupedResult& result);

}  // namespace tally::grouping
