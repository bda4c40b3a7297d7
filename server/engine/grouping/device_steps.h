// Group-by's steps on a device (Backend::NumberKeysOnDevice,
// OrderByKeyOnDevice, SumByKeyOnDevice, CombineKeysOnDevice, CopyToDevice):
// the plans they take, grouped where the columns lie, each answering as
// the host's steps would (grouped_reduction.h).
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "server/core/group_request.h"
#include "server/engine/backend.h"
#include "server/engine/grouping/direct_grouping.h"
#include "server/engine/grouping/grouped_reduction.h"

namespace tally::grouping {

// The plan on the device holding its columns, when the backend groups
// there and the plan is one it takes (one key column, ascending keys, no
// masks, every column on one GPU); nullopt otherwise.
[[nodiscard]] absl::StatusOr<std::optional<GroupedResult>> RunOnDevice(const GroupByPlan& plan, Backend& backend,
                                                                       std::uint64_t max_groups, const Note& note);

// A plan of several key columns (CombinableKeys) on one device: the keys
// combined into one column there (Backend::CombineKeysOnDevice), the plan
// run on it as one key, and each group's tuple read back from its
// combined key; nullopt where the backend does not combine these keys.
[[nodiscard]] absl::StatusOr<std::optional<GroupedResult>> RunCombinedOnDevice(const GroupByPlan& plan,
                                                                               Backend& backend,
                                                                               std::uint64_t max_groups,
                                                                               const Note& note);

// A table in host memory whose plan RunOnDevice takes (one key column or
// several combinable ones, ascending keys, no masks), copied to a device
// where the backend groups there (Backend::CopyToDevice) and grouped as if
// it were resident there; nullopt where it is not copied or the device's
// steps do not take it.
[[nodiscard]] absl::StatusOr<std::optional<GroupedResult>> RunCopiedToDevice(const GroupByPlan& plan, Backend& backend,
                                                                             std::uint64_t max_groups,
                                                                             const Note& note);

}  // namespace tally::grouping
