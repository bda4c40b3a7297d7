// Group-by's direct pass (Backend::SumByKeyOnDevice, SumByKeyOnHost): a
// value column of floats asking only sums, counts, extremes and means is
// answered per key in one read of keys and values, without laying the
// column out by group. grouped_reduction.cc takes it for a whole plan, or
// for such columns beside those that take the general path; a column's
// answers are the same either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/group_request.h"
#include "server/engine/backend.h"
#include "server/engine/grouping/grouped_reduction.h"

namespace tally::grouping {

// Told as each step ends (RunGroupBy's `phase`).
using Note = std::function<void(const char*)>;

// The key bytes of each group from the passes' 64-bit words.
std::vector<std::byte> KeyBytes(const std::vector<std::uint64_t>& words, std::size_t size);

// Whether the direct pass takes a value column: float values asking only
// the ops it answers.
bool TakesDirect(const GroupByPlan& plan, const ColumnAggregations& c);

// A value column's plan over its groups and its answers, from the direct
// pass's sums by key; nullopt for a result type this path does not give.
std::optional<std::pair<AggregationPlan, AggregationResult>> DirectColumn(const GroupByPlan& plan,
                                                                          const ColumnAggregations& c,
                                                                          KeyedSums sums, Backend& backend);

// The GPU direct pass over one value column (Backend::SumByKeyOnDevice),
// given what the columns' ColumnFacts know and left what it reads, with
// the arrays its ops read (ArraysFor) brought back.
absl::StatusOr<KeyedSums> DeviceSumsByKey(const GroupByPlan& plan, const GroupColumn& key, const ColumnAggregations& c,
                                          Backend& backend, std::uint64_t max_groups);

// Tells `note` that a column was summed by key, on the device or the host,
// and whether the keys' range and the values' magnitude came from the
// columns' facts (KeyedSums::spread_known).
void NoteSummed(const Note& note, bool on_device, bool spread_known);

// The whole plan by the direct pass on the GPU that holds its columns;
// nullopt where a column or the keys are not the pass's.
absl::StatusOr<std::optional<GroupedResult>> RunDirectOnDevice(const GroupByPlan& plan, Backend& backend,
                                                               std::uint64_t max_groups, const Note& note);

// What the one-key passes take (the direct passes, the device's order, a
// host table copied to a device): one key column without a mask, ascending
// keys; and, for the passes over a whole plan, value columns without masks.
bool OneUnmaskedKey(const GroupByPlan& plan);
bool ValuesUnmasked(const GroupByPlan& plan);

// Whether the host's direct pass may take a plan's value columns
// (OneUnmaskedKey, an integer key; each column must also be unmasked and
// TakesDirect).
bool HostDirectKeys(const GroupByPlan& plan);

// The host's direct pass over one value column (keys within
// kMaxHostDirectRange, a column without a mask): nullopt where it does not
// take them.
absl::StatusOr<std::optional<KeyedSums>> HostSumsByKey(const GroupByPlan& plan, const GroupColumn& key,
                                                       const GroupColumn& column, Backend& backend,
                                                       std::uint64_t max_groups);

// The whole plan by the host's direct pass; its answers are the GPU direct
// pass's, bit for bit. nullopt where it does not take the plan.
absl::StatusOr<std::optional<GroupedResult>> RunDirectOnHost(const GroupByPlan& plan, Backend& backend,
                                                             std::uint64_t max_groups, const Note& note);

}  // namespace tally::grouping
