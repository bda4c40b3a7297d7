// Conversion between GroupBy's messages and the engine's group-by plan and
// result, with the checks that need the wire form. Every error is
// INVALID_ARGUMENT naming the field (columns[i], keys[i],
// aggregations[i]) and the limit.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/group_request.h"
#include "server/core/validate.h"
#include "server/engine/grouping/grouped_reduction.h"
#include "tally/v1/tally.pb.h"

namespace tally {

// A column's elements that are not in the request (a resident dataset's or
// a region's, where they lie or copied to host memory), by the column's
// index in the request.
struct ColumnBytes {
  DType dtype = DType::kFloat64;
  std::span<const std::byte> data;
  Placement placement = Placement::PageableHost();
  ColumnFacts* facts = nullptr;  // a resident dataset's, read in place (GroupColumn::facts)
};

// The plan of `request`; its columns' spans point into `request` and into
// `from_datasets` (nullopt for inline columns; every column that names a
// dataset or a region has its bytes there), which must outlive the plan.
[[nodiscard]] absl::StatusOr<GroupByPlan> GroupByPlanFromProto(
    const v1::GroupByRequest& request, const std::vector<std::optional<ColumnBytes>>& from_datasets,
    const RequestLimits& limits);

// Groups per response message: the request's groups_per_message, or as
// many as keep a message under about 3.5 MiB (gRPC's default receive limit
// is 4 MiB).
std::uint64_t GroupsPerMessage(const v1::GroupByRequest& request, const grouping::GroupedResult& result);

// Groups [first, first + count) of `result` as one response message.
void GroupPageToProto(const v1::GroupByRequest& request, const GroupByPlan& plan,
                      const grouping::GroupedResult& result, std::uint64_t first, std::uint64_t count,
                      v1::GroupByResponse* out);

}  // namespace tally
