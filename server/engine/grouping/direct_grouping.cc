// Group-by's direct pass over value columns (direct_grouping.h): per key,
// what sums, counts, extremes and means need, in one read of keys and
// values, on the GPU holding them or on the host.
#include "server/engine/grouping/direct_grouping.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "server/engine/grouping/direct_answers.h"
#include "server/engine/grouping/keyed_sums.h"
#include "server/engine/huge_pages.h"

namespace tally::grouping {
namespace {

// A value column's sums by key (the direct pass's), nullopt when the pass
// does not take it.
using SumByKey = std::function<absl::StatusOr<std::optional<KeyedSums>>(const GroupColumn& key,
                                                                          const ColumnAggregations& c)>;

// The plan answered by a direct pass (one read of keys and values per
// column, `sum_by_key`), when every value column is float and asks only
// direct ops; nullopt otherwise, or for keys spread too wide.
absl::StatusOr<std::optional<GroupedResult>> RunDirect(const GroupByPlan& plan, Backend& backend, bool on_device,
                                                       const SumByKey& sum_by_key, const Note& note) {
  if (plan.values.empty()) return std::nullopt;
  const GroupColumn& key = plan.columns[plan.keys[0]];
  for (const ColumnAggregations& c : plan.values) {
    if (!TakesDirect(plan, c)) return std::nullopt;
  }
  GroupedResult out;
  out.on_device = on_device;
  out.rows_grouped = plan.rows;
  out.backend = backend.name();
  out.device = backend.device();
  for (const ColumnAggregations& c : plan.values) {
    absl::StatusOr<std::optional<KeyedSums>> sums = sum_by_key(key, c);
    if (!sums.ok()) return sums.status();
    if (!sums->has_value()) return std::nullopt;
    NoteSummed(note, on_device, (*sums)->spread_known);
    if (out.keys.empty()) {
      out.groups = (*sums)->groups;
      out.keys.push_back(KeyValues{.dtype = key.dtype, .data = std::move((*sums)->keys), .validity = nullptr});
    }
    std::optional<std::pair<AggregationPlan, AggregationResult>> answered =
        DirectColumn(plan, c, *std::move(*sums), backend);
    if (!answered.has_value()) return std::nullopt;
    out.plans.push_back(std::move(answered->first));
    out.results.push_back(std::move(answered->second));
  }
  return out;
}

}  // namespace

// The key bytes of each group from the device's 64-bit words: each word's
// low `size` bytes (little-endian), narrowed as a whole array per width (a
// memcpy of `size` bytes per group took 4.4-4.9 ms for 1M groups on an
// H200 host).
std::vector<std::byte> KeyBytes(const std::vector<std::uint64_t>& words, std::size_t size) {
  std::vector<std::byte> out;
  ReserveHuge(out, words.size() * size);
  out.resize(words.size() * size);
  const auto narrow = [&](auto t) {
    using T = decltype(t);
    for (std::size_t g = 0; g < words.size(); ++g) {
      const T key = static_cast<T>(words[g]);
      std::memcpy(out.data() + g * sizeof(T), &key, sizeof(T));
    }
  };
  switch (size) {
    case 1: narrow(std::uint8_t{}); break;
    case 2: narrow(std::uint16_t{}); break;
    case 4: narrow(std::uint32_t{}); break;
    default: std::memcpy(out.data(), words.data(), out.size()); break;
  }
  return out;
}

// Whether the direct pass takes a value column: float values asking only
// the ops it answers.
bool TakesDirect(const GroupByPlan& plan, const ColumnAggregations& c) {
  const DType dt = plan.columns[c.column].dtype;
  return (dt == DType::kFloat32 || dt == DType::kFloat64) && std::all_of(c.plan.ops.begin(), c.plan.ops.end(), IsDirect);
}

// A value column's plan over its groups and its answers, from the direct
// pass's sums by key; nullopt for a result type this path does not give.
std::optional<std::pair<AggregationPlan, AggregationResult>> DirectColumn(const GroupByPlan& plan,
                                                                          const ColumnAggregations& c,
                                                                          KeyedSums sums, Backend& backend) {
  AggregationPlan p = c.plan;
  // Each group's first row in group order: the pass's where it gave them,
  // else the counts' running sum, written once (no zeros first).
  std::vector<std::uint64_t> start = std::move(sums.starts);
  if (start.size() != sums.groups + 1) {
    start.clear();
    ReserveHuge(start, sums.groups + 1);
    std::uint64_t at = 0;
    start.push_back(0);
    for (std::uint64_t g = 0; g < sums.groups; ++g) start.push_back(at += sums.count[g]);
  }
  p.array.length = plan.rows;
  p.array.row_length = 0;
  p.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(std::move(start));
  std::optional<std::vector<OpValues>> answers = DirectAnswers(p.ops, plan.columns[c.column].dtype, std::move(sums));
  if (!answers.has_value()) return std::nullopt;
  return std::make_pair(std::move(p), AggregationResult{.values = *std::move(answers), .backend = backend.name(),
                                                        .device = backend.device()});
}

absl::StatusOr<KeyedSums> DeviceSumsByKey(const GroupByPlan& plan, const GroupColumn& key, const ColumnAggregations& c,
                                          Backend& backend, std::uint64_t max_groups) {
  const GroupColumn& column = plan.columns[c.column];
  return backend.SumByKeyOnDevice(Extent{key.data, key.placement}, key.dtype, Extent{column.data, column.placement},
                                  column.dtype, plan.rows, max_groups,
                                  DirectFacts{.keys = key.facts, .values = column.facts}, ArraysFor(c.plan.ops));
}

void NoteSummed(const Note& note, bool on_device, bool spread_known) {
  if (spread_known) note("the keys' range and the values' magnitude known from an earlier request");
  note(on_device ? "column summed by key on the device" : "column summed by key on the host");
}

// The direct pass on the GPU that holds the columns.
absl::StatusOr<std::optional<GroupedResult>> RunDirectOnDevice(const GroupByPlan& plan, Backend& backend,
                                                               std::uint64_t max_groups, const Note& note) {
  return RunDirect(plan, backend, /*on_device=*/true,
                   [&](const GroupColumn& key, const ColumnAggregations& c) -> absl::StatusOr<std::optional<KeyedSums>> {
                     absl::StatusOr<KeyedSums> sums = DeviceSumsByKey(plan, key, c, backend, max_groups);
                     if (absl::IsUnimplemented(sums.status())) return std::nullopt;
                     if (!sums.ok()) return sums.status();
                     return std::optional<KeyedSums>(*std::move(sums));
                   },
                   note);
}

bool OneUnmaskedKey(const GroupByPlan& plan) {
  return plan.keys.size() == 1 && plan.sort && plan.columns[plan.keys[0]].validity == nullptr;
}

bool ValuesUnmasked(const GroupByPlan& plan) {
  return std::all_of(plan.values.begin(), plan.values.end(),
                     [&](const ColumnAggregations& c) { return plan.columns[c.column].validity == nullptr; });
}

bool HostDirectKeys(const GroupByPlan& plan) {
  return OneUnmaskedKey(plan) && !rules::IsFloat(plan.columns[plan.keys[0]].dtype);
}

// The host's direct pass over one value column (keys within
// kMaxHostDirectRange): nullopt where it does not take them.
absl::StatusOr<std::optional<KeyedSums>> HostSumsByKey(const GroupByPlan& plan, const GroupColumn& key,
                                                       const GroupColumn& column, Backend& backend,
                                                       std::uint64_t max_groups) {
  if (column.validity != nullptr) return std::nullopt;
  return SumByKeyOnHost(key.data, key.dtype, column.data, column.dtype, plan.rows,
                        std::min(kMaxHostDirectRange, max_groups), backend.HostWorkers(),
                        std::min(kMaxHostExactRange, max_groups));
}

// The direct pass on the host, for host columns the pass takes
// (HostDirectKeys; the rest is RunDirect's to check). Its answers are the
// GPU direct pass's, bit for bit.
absl::StatusOr<std::optional<GroupedResult>> RunDirectOnHost(const GroupByPlan& plan, Backend& backend,
                                                             std::uint64_t max_groups, const Note& note) {
  if (!HostDirectKeys(plan) || !ValuesUnmasked(plan)) return std::nullopt;
  return RunDirect(plan, backend, /*on_device=*/false,
                   [&](const GroupColumn& k, const ColumnAggregations& c) -> absl::StatusOr<std::optional<KeyedSums>> {
                     return HostSumsByKey(plan, k, plan.columns[c.column], backend, max_groups);
                   },
                   note);
}

}  // namespace tally::grouping
