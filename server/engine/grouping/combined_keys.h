// Composite keys grouped on a device as one (Backend::CombineKeysOnDevice):
// which plans take that path, and each group's key tuple read back from
// its combined key.
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

// The key columns of the groups whose combined keys are `combined`
// (uint64 elements, as the one-key steps answer them): each group's tuple
// by division, in the columns' dtypes.
[[nodiscard]] std::vector<KeyValues> SplitCombinedKeys(const KeyValues& combined, const CombinedKeyColumn& how,
                                                       std::span<const DType> dtypes);

}  // namespace tally::grouping
