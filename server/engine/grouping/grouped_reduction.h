// Runs a group-by plan on a backend: finds the groups (group_keys.h),
// orders the rows group after group, gathers each value column in that
// order and runs the column's aggregations over the groups as segments.
// Every function of the registry that answers per segment answers per
// group this way, and indices (argmin, argmax, topk's) are mapped back to
// the rows of the table.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/group_request.h"
#include "server/engine/backend.h"
#include "server/engine/grouping/group_keys.h"

namespace tally::grouping {

// One key column of the answer: the key of each group (the bytes of the
// group's first row), and its validity (null when no group's key is
// missing; NaN keys keep their NaN).
struct KeyValues {
  DType dtype = DType::kInt64;
  std::vector<std::byte> data;
  Validity validity;
};

struct GroupedResult {
  std::uint64_t groups = 0;
  std::uint64_t rows_grouped = 0;  // rows in some group (not dropped)
  bool on_device = false;          // grouped on a GPU (Backend::OrderByKeyOnDevice)
  std::vector<KeyValues> keys;     // per key column of the plan
  // Per value column of the plan (GroupByPlan::values): its plan with the
  // groups as segments, and its result, one entry per group.
  std::vector<AggregationPlan> plans;
  std::vector<AggregationResult> results;
  std::string backend;
  std::string device;
};

// `phase`, when set, is told as each step ends ("groups found", "column
// reduced", ...), for the server's request trace.
[[nodiscard]] absl::StatusOr<GroupedResult> RunGroupBy(const GroupByPlan& plan, Backend& backend,
                                                       std::uint64_t max_groups,
                                                       const std::function<void(const char*)>& phase = {});

}  // namespace tally::grouping
