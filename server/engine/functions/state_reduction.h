// The aggregations of a plan whose state the registry keeps itself
// (quantiles, medians, top-k, sketches, distinct counts: rules/agg/state.h),
// computed on the host by the functions' own steps, whatever backend serves
// the rest of the plan. Rows are walked in order: a row's states are made
// when its first element arrives and finished (or serialised, for a partial
// request) when its last has, so only the row in progress holds memory.
// What holistic states hold is charged to the server's HolisticBudget.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/functions/holistic_budget.h"

namespace tally {

// Copies `from` (device bytes) into `to` (host memory of the same size).
using CopyToHost = std::function<absl::Status(const Extent& from, std::span<std::byte> to)>;

// A Reduction of plan.ops[i] for each i in `ops` (each a state function),
// whose result holds their values in that order. Device extents are copied
// to the host in steps through `copy` (null: refused). `budget` must
// outlive the reduction.
std::unique_ptr<Reduction> MakeStateReduction(const AggregationPlan& plan, std::vector<std::size_t> ops,
                                              HolisticBudget* budget, CopyToHost copy);

}  // namespace tally
