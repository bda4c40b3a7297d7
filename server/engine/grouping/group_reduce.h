// Group-by's last step, shared by the host's and the device's steps: a
// value column laid out group after group (its plan's offsets the groups'
// starts) reduced by a backend's segmented passes, and the indices those
// answer (argmin, argmax, topk's) mapped back to rows of the table.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/grouping/direct_grouping.h"

namespace tally::grouping {

// Indices a segment's reduction answered (argmin and argmax, topk's),
// counting from the group's first row in group order, as the rows of the
// table they name (`rows`: the table's rows in group order, `start` the
// groups' starts). -1 (no element) stays.
void MapIndices(const OpSpec& op, const std::vector<std::uint64_t>& rows, const std::vector<std::uint64_t>& start,
                OpValues& values);

// Runs `p` (a value column's aggregations; its array the whole column in
// group order, its offsets the groups' starts) over `bytes` on `backend`,
// in batches of groups whose results fit one plan's limit (a group-by may
// have far more groups than a request has rows: --max_groups against
// RequestLimits::max_result_values). Device bytes whose ops the device's
// segment passes do not compute are copied to the host, already in group
// order, and read there.
[[nodiscard]] absl::StatusOr<AggregationResult> ReduceByGroups(Backend& backend, const AggregationPlan& p,
                                                               const Extent& bytes, const Note& note);

}  // namespace tally::grouping
