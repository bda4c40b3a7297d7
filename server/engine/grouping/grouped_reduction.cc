#include "server/engine/grouping/grouped_reduction.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <numeric>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "server/core/validate.h"
#include "server/engine/cpu/thread_pool.h"
#include "server/engine/finish.h"
#include "server/engine/huge_pages.h"
#include "server/engine/grouping/combined_keys.h"
#include "server/engine/grouping/device_steps.h"
#include "server/engine/grouping/direct_grouping.h"
#include "server/engine/grouping/group_reduce.h"
#include "tally/rules/agg/registry.h"

namespace tally::grouping {
namespace {

// Where each group starts when the rows are laid out group after group,
// each group's rows in table order (CSR offsets: groups + 1 entries).
Offsets GroupStarts(const Groups& groups) {
  std::vector<std::uint64_t> start(groups.count + 1, 0);
  for (const std::uint32_t g : groups.of_row) {
    if (g != kNoGroup) ++start[g + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  return std::make_shared<const std::vector<std::uint64_t>>(std::move(start));
}

// Calls place(row, position) for every grouped row with its position in
// group order: a stable counting sort that reads the rows once, in order.
template <typename Place>
void ForEachInGroupOrder(const Groups& groups, const std::vector<std::uint64_t>& start, Place place) {
  std::vector<std::uint64_t> next(start.begin(), start.end() - 1);
  for (std::uint64_t r = 0; r < groups.of_row.size(); ++r) {
    const std::uint32_t g = groups.of_row[r];
    if (g != kNoGroup) place(r, next[g]++);
  }
}

template <std::size_t kSize>
void ScatterFixed(const std::byte* from, const Groups& groups, const std::vector<std::uint64_t>& start,
                  std::byte* to) {
  ForEachInGroupOrder(groups, start,
                      [&](std::uint64_t r, std::uint64_t at) { std::memcpy(to + at * kSize, from + r * kSize, kSize); });
}

// A column's elements laid out group after group.
std::vector<std::byte> ByGroup(std::span<const std::byte> data, std::size_t size, const Groups& groups,
                               const std::vector<std::uint64_t>& start) {
  std::vector<std::byte> out;
  ReserveHuge(out, start.back() * size);
  out.resize(start.back() * size);
  switch (size) {
    case 1: ScatterFixed<1>(data.data(), groups, start, out.data()); break;
    case 2: ScatterFixed<2>(data.data(), groups, start, out.data()); break;
    case 4: ScatterFixed<4>(data.data(), groups, start, out.data()); break;
    default: ScatterFixed<8>(data.data(), groups, start, out.data()); break;
  }
  return out;
}

// A column's validity bits laid out group after group; null for a null mask.
Validity ValidityByGroup(const Validity& mask, const Groups& groups, const std::vector<std::uint64_t>& start) {
  if (mask == nullptr) return nullptr;
  std::vector<std::uint32_t> out((start.back() + 31) / 32, 0);
  const std::vector<std::uint32_t>& from = *mask;
  ForEachInGroupOrder(groups, start, [&](std::uint64_t r, std::uint64_t at) {
    out[at >> 5] |= ((from[r >> 5] >> (r & 31)) & 1u) << (at & 31);
  });
  return std::make_shared<const std::vector<std::uint32_t>>(std::move(out));
}

// The table's rows in group order, for mapping indices back.
std::vector<std::uint64_t> RowsByGroup(const Groups& groups, const std::vector<std::uint64_t>& start) {
  std::vector<std::uint64_t> rows;
  ReserveHuge(rows, start.back());
  rows.resize(start.back());
  ForEachInGroupOrder(groups, start, [&](std::uint64_t r, std::uint64_t at) { rows[at] = r; });
  return rows;
}

template <std::size_t kSize>
void GatherFixed(const std::byte* from, std::span<const std::uint64_t> rows, std::byte* to) {
  for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(to + i * kSize, from + rows[i] * kSize, kSize);
}

// Groups a participant gathers the keys of at a time.
constexpr std::size_t kGatheredGroups = std::size_t{1} << 16;

// The elements at `rows` (the keys of each group's first row), a copy of
// the element's fixed size each (a copy of a size known only at run time
// was a call each), runs of rows on the idle participants of `workers`
// (random reads: 10M groups' six keys took 0.5-1.0 s on one thread of a
// 2-core host).
std::vector<std::byte> Gather(std::span<const std::byte> data, std::size_t size, const std::vector<std::uint64_t>& rows,
                              cpu::ThreadPool* workers) {
  std::vector<std::byte> out;
  ReserveHuge(out, rows.size() * size);
  out.resize(rows.size() * size);
  const auto run = [&](std::size_t item, int) {
    const std::size_t first = item * kGatheredGroups, n = std::min(kGatheredGroups, rows.size() - first);
    const std::span<const std::uint64_t> part(rows.data() + first, n);
    std::byte* to = out.data() + first * size;
    switch (size) {
      case 1: GatherFixed<1>(data.data(), part, to); break;
      case 2: GatherFixed<2>(data.data(), part, to); break;
      case 4: GatherFixed<4>(data.data(), part, to); break;
      default: GatherFixed<8>(data.data(), part, to); break;
    }
  };
  const std::size_t items = (rows.size() + kGatheredGroups - 1) / kGatheredGroups;
  if (workers == nullptr || items < 2) {
    for (std::size_t i = 0; i < items; ++i) run(i, 0);
  } else {
    workers->ParallelFor(items, run);
  }
  return out;
}

// The validity bits at `rows`; null for a null mask.
Validity GatherValidity(const Validity& mask, const std::vector<std::uint64_t>& rows) {
  if (mask == nullptr) return nullptr;
  std::vector<std::uint32_t> out((rows.size() + 31) / 32, 0);
  const std::vector<std::uint32_t>& from = *mask;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::uint64_t r = rows[i];
    out[i >> 5] |= ((from[r >> 5] >> (r & 31)) & 1u) << (i & 31);
  }
  return std::make_shared<const std::vector<std::uint32_t>>(std::move(out));
}

// Whether every op of `p` is a count of elements over a column without a
// mask: then each group's answer is its size, and the column need not be
// laid out by group nor read (pandas' size and count of a column without
// missing values: h2o's q10 spent 150-240 ms of its 1.2 s laying out and
// reducing the column its size was counted over, for 1M groups).
bool OnlyCounts(const AggregationPlan& p) {
  return p.array.validity == nullptr && !p.ops.empty() &&
         std::all_of(p.ops.begin(), p.ops.end(), [](const OpSpec& op) { return op.kind == OpKind::kCount; });
}

// `p`'s counts from the groups' starts, stored as a backend stores them
// (a count's state is its count alone, as the backends' are).
AggregationResult CountsOfGroups(const AggregationPlan& p, const std::vector<std::uint64_t>& start) {
  const std::uint64_t groups = start.size() - 1;
  AggregationResult out;
  for (const OpSpec& op : p.ops) {
    OpValues values = EmptyValues(op, p.array.dtype, groups);
    std::visit(
        [&](auto& v) {
          using E = typename std::decay_t<decltype(v)>::value_type;
          if constexpr (std::is_arithmetic_v<E>) {
            // One state, its count set per group: a fresh PartialState
            // (296 bytes) a group took 40 ms for h2o q10's 10M groups on
            // a 2-core host, this 7-10 ms.
            rules::PartialState state;
            for (std::uint64_t g = 0; g < groups; ++g) {
              state.count = start[g + 1] - start[g];
              v[g] = FinishScalar<E>(op, p.array.dtype, state);
            }
          } else {
            StoreRows(
                op, p.array.dtype, groups,
                [&](std::uint64_t g) {
                  rules::PartialState state;
                  state.count = start[g + 1] - start[g];
                  return state;
                },
                values);
          }
        },
        values);
    out.values.push_back(std::move(values));
  }
  return out;
}

absl::StatusOr<GroupedResult> RunOnHost(const GroupByPlan& plan, Backend& backend, std::uint64_t max_groups,
                                        const Note& note);

}  // namespace

absl::StatusOr<GroupedResult> RunGroupBy(const GroupByPlan& plan, Backend& backend, std::uint64_t max_groups,
                                         const std::function<void(const char*)>& phase) {
  const Note note = [&](const char* what) {
    if (phase) phase(what);
  };
  const bool on_device = std::any_of(plan.columns.begin(), plan.columns.end(),
                                     [](const GroupColumn& c) { return !c.placement.host(); });
  if (!on_device) {
    absl::StatusOr<std::optional<GroupedResult>> copied = RunCopiedToDevice(plan, backend, max_groups, note);
    if (!copied.ok()) return copied.status();
    if (copied->has_value()) return **std::move(copied);
    return RunOnHost(plan, backend, max_groups, note);
  }
  absl::StatusOr<std::optional<GroupedResult>> device = plan.keys.size() > 1
                                                              ? RunCombinedOnDevice(plan, backend, max_groups, note)
                                                              : RunOnDevice(plan, backend, max_groups, note);
  if (!device.ok()) return device.status();
  if (device->has_value()) return **std::move(device);
  // The host's steps over copies of the device's columns.
  GroupByPlan host = plan;
  std::vector<std::vector<std::byte>> copies;
  for (GroupColumn& c : host.columns) {
    if (c.placement.host()) continue;
    std::vector<std::byte>& copy = copies.emplace_back(c.data.size());
    if (absl::Status s = backend.CopyToHost(Extent{c.data, c.placement}, copy); !s.ok()) return s;
    c.data = copy;
    c.placement = Placement::PageableHost();
  }
  note("columns copied to the host");
  return RunOnHost(host, backend, max_groups, note);
}

namespace {

absl::StatusOr<GroupedResult> RunOnHost(const GroupByPlan& plan, Backend& backend, std::uint64_t max_groups,
                                        const Note& note) {
  // Composite integer keys as one combined key, as the device combines
  // them, where a column takes the direct pass by key: the bits one key of
  // that range gets, on either backend. (Otherwise FindGroups codes the
  // tuples itself, in one pass fewer: h2o's q2, sum of an int64 column by
  // two keys, 1e7 rows, took 0.14 s combined against 0.11.)
  const bool direct_column = std::any_of(plan.values.begin(), plan.values.end(), [&](const ColumnAggregations& c) {
    return plan.columns[c.column].validity == nullptr && TakesDirect(plan, c);
  });
  if (CombinableKeys(plan) && direct_column) {
    std::vector<std::uint64_t> combined, lowest, range;
    if (CombineKeysOnHost(plan, combined, lowest, range)) {
      note("key columns combined on the host");
      absl::StatusOr<GroupedResult> result = RunOnHost(
          WithCombinedKey(plan, Extent::PageableHost(std::as_bytes(std::span<const std::uint64_t>(combined)))),
          backend, max_groups, note);
      if (!result.ok()) return result.status();
      SplitCombinedKeys(plan, lowest, range, *result);
      return result;
    }
  }
  absl::StatusOr<std::optional<GroupedResult>> direct = RunDirectOnHost(plan, backend, max_groups, note);
  if (!direct.ok()) return direct.status();
  if (direct->has_value()) return **std::move(direct);
  std::vector<KeyColumn> keys;
  for (const std::size_t k : plan.keys) {
    const GroupColumn& c = plan.columns[k];
    keys.push_back(KeyColumn{.dtype = c.dtype, .data = c.data, .validity = c.validity});
  }
  absl::StatusOr<Groups> groups =
      FindGroups(keys, plan.rows, GroupOptions{.sort = plan.sort, .dropna = plan.dropna, .max_groups = max_groups});
  if (!groups.ok()) return groups.status();
  note("groups found");
  const Offsets start = GroupStarts(*groups);
  // With no key column, or keys that put every row in one group in table
  // order, the columns are already laid out by group.
  const bool in_place = start->back() == plan.rows && groups->count <= 1;

  GroupedResult out;
  out.groups = groups->count;
  out.rows_grouped = start->back();
  for (const KeyColumn& k : keys) {
    Validity validity = GatherValidity(k.validity, groups->first_row);
    if (validity != nullptr) {
      const ArraySpec bits{.dtype = k.dtype, .length = groups->count, .validity = validity};
      bool missing = false;
      for (std::uint64_t g = 0; g < groups->count && !missing; ++g) missing = !bits.Valid(g);
      if (!missing) validity = nullptr;  // no group's key is missing
    }
    out.keys.push_back(KeyValues{.dtype = k.dtype,
                                 .data = Gather(k.data, rules::SizeOf(k.dtype), groups->first_row,
                                                backend.HostWorkers()),
                                 .validity = std::move(validity)});
  }
  note("each group's keys gathered");
  out.backend = backend.name();
  out.device = backend.device();
  std::vector<std::uint64_t> rows;  // the table's rows in group order, once an index needs them
  for (const ColumnAggregations& c : plan.values) {
    const GroupColumn& column = plan.columns[c.column];
    AggregationPlan p = c.plan;
    p.array.length = start->back();
    p.array.row_length = 0;
    p.array.offsets = start;
    p.array.validity = in_place ? column.validity : ValidityByGroup(column.validity, *groups, *start);
    // A float column asking only the direct pass's ops takes it beside the
    // general path's other columns, as on the device (RunOnDevice), so that
    // both backends answer such a column with the same bits.
    if (HostDirectKeys(plan) && TakesDirect(plan, c)) {
      absl::StatusOr<std::optional<KeyedSums>> sums =
          HostSumsByKey(plan, plan.columns[plan.keys[0]], column, backend, max_groups);
      if (!sums.ok()) return sums.status();
      if (sums->has_value() && (*sums)->groups == groups->count) {
        std::optional<std::pair<AggregationPlan, AggregationResult>> answered =
            DirectColumn(plan, c, *std::move(*sums), backend);
        if (answered.has_value()) {
          note("column summed by key on the host");
          out.plans.push_back(std::move(answered->first));
          out.results.push_back(std::move(answered->second));
          continue;
        }
      }
    }
    if (OnlyCounts(p)) {
      AggregationResult counted = CountsOfGroups(p, *start);
      counted.backend = backend.name();
      counted.device = backend.device();
      out.plans.push_back(p);
      out.results.push_back(std::move(counted));
      note("column counted");
      continue;
    }
    std::vector<std::byte> laid_out;
    if (!in_place) laid_out = ByGroup(column.data, rules::SizeOf(column.dtype), *groups, *start);
    const std::span<const std::byte> bytes = in_place ? column.data : std::span<const std::byte>(laid_out);
    absl::StatusOr<AggregationResult> result = ReduceByGroups(backend, p, Extent::PageableHost(bytes), note);
    if (!result.ok()) return result.status();
    note("column reduced");
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      if (!rules::agg::Of(p.ops[i].kind).answers_index || in_place) continue;
      if (rows.empty()) rows = RowsByGroup(*groups, *start);
      MapIndices(p.ops[i], rows, *start, result->values[i]);
    }
    out.backend = result->backend;
    out.device = result->device;
    out.plans.push_back(std::move(p));
    out.results.push_back(*std::move(result));
  }
  return out;
}

}  // namespace
}  // namespace tally::grouping
