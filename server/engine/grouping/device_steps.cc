#include "server/engine/grouping/device_steps.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/grouping/combined_keys.h"
#include "server/engine/grouping/group_reduce.h"
#include "tally/rules/agg/registry.h"

namespace tally::grouping {
namespace {

// `o` without its last group (the NaN keys' rows, for dropna): their rows
// stay at the end of the order, past every group's.
void DropLastGroup(DeviceGroupOrder& o) {
  --o.groups;
  o.keys.pop_back();
  o.offsets = std::make_shared<const std::vector<std::uint64_t>>(o.offsets->begin(), o.offsets->end() - 1);
  o.nan_group = false;
}

// `s` without its last group (the NaN keys' rows, for dropna).
void DropLastGroup(KeyedSums& s, std::size_t key_size) {
  const std::uint64_t n = --s.groups;
  s.keys.resize(n * key_size);
  for (std::vector<std::uint64_t>* v : {&s.count, &s.nan}) {
    if (!v->empty()) v->resize(n);
  }
  for (std::vector<double>* v : {&s.sum, &s.min, &s.max, &s.mean}) {
    if (!v->empty()) v->resize(n);
  }
  if (!s.infinities.empty()) s.infinities.resize(n);
  if (!s.starts.empty()) s.starts.resize(n + 1);  // the dropped group's rows lie past the last start
}

// The direct pass over `o`'s group numbers (DeviceGroupOrder::GroupNumbers,
// made once into `numbers`) in place of keys it does not take: float keys,
// integers spread past its range. The same groups in the same order; the
// rows of a dropped NaN group, numbered past the last, summed as one group
// more and dropped.
absl::StatusOr<KeyedSums> SumsByGroupNumber(const GroupByPlan& plan, DeviceGroupOrder& o,
                                            std::unique_ptr<DeviceColumn>& numbers, const ColumnAggregations& c,
                                            Backend& backend, std::uint64_t max_groups) {
  if (numbers == nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceColumn>> made = o.GroupNumbers();
    if (!made.ok()) return made.status();
    numbers = *std::move(made);
  }
  const Extent e = numbers->extent();
  const GroupColumn key{.name = "group numbers", .dtype = DType::kUInt32, .data = e.bytes, .placement = e.placement};
  absl::StatusOr<KeyedSums> sums = DeviceSumsByKey(plan, key, c, backend, max_groups + 1);
  if (sums.ok() && sums->groups == o.groups + 1) DropLastGroup(*sums, sizeof(std::uint32_t));
  return sums;
}

// `plan` (one integer key on a device) with its keys numbered by group on
// the device (Backend::NumberKeysOnDevice: sparse keys, a hash table's),
// run on the numbers as its key, and answered with the keys; nullopt where
// the backend does not number these keys.
absl::StatusOr<std::optional<GroupedResult>> RunNumberedOnDevice(const GroupByPlan& plan, Backend& backend,
                                                                 std::uint64_t max_groups, const Note& note) {
  const GroupColumn& key = plan.columns[plan.keys[0]];
  absl::StatusOr<NumberedKeyColumn> numbered =
      backend.NumberKeysOnDevice(Extent{key.data, key.placement}, key.dtype, plan.rows, max_groups);
  if (absl::IsUnimplemented(numbered.status())) return std::nullopt;
  if (!numbered.ok()) return numbered.status();
  note("keys numbered by a hash table on the device");
  const Extent e = numbered->column->extent();
  GroupByPlan by_number = plan;
  by_number.columns.push_back(
      GroupColumn{.name = "group numbers", .dtype = DType::kUInt32, .data = e.bytes, .placement = e.placement});
  by_number.keys = {by_number.columns.size() - 1};
  absl::StatusOr<std::optional<GroupedResult>> result = RunOnDevice(by_number, backend, max_groups, note);
  if (!result.ok() || !result->has_value()) return result;
  GroupedResult& out = **result;
  if (out.groups != numbered->keys.size()) {
    return absl::InternalError(
        absl::StrCat("group-by numbered ", numbered->keys.size(), " keys but found ", out.groups, " groups."));
  }
  out.keys[0] =
      KeyValues{.dtype = key.dtype, .data = KeyBytes(numbered->keys, rules::SizeOf(key.dtype)), .validity = nullptr};
  return result;
}

}  // namespace

absl::StatusOr<std::optional<GroupedResult>> RunOnDevice(const GroupByPlan& plan, Backend& backend,
                                                         std::uint64_t max_groups, const Note& note) {
  if (!OneUnmaskedKey(plan) || !ValuesUnmasked(plan)) return std::nullopt;
  const GroupColumn& key = plan.columns[plan.keys[0]];
  if (key.placement.host()) return std::nullopt;
  for (const ColumnAggregations& c : plan.values) {
    if (plan.columns[c.column].placement != key.placement) return std::nullopt;
  }
  absl::StatusOr<std::optional<GroupedResult>> direct = RunDirectOnDevice(plan, backend, max_groups, note);
  if (!direct.ok()) return direct.status();
  if (direct->has_value()) return direct;
  absl::StatusOr<std::optional<GroupedResult>> numbered = RunNumberedOnDevice(plan, backend, max_groups, note);
  if (!numbered.ok()) return numbered.status();
  if (numbered->has_value()) return numbered;
  absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> order =
      backend.OrderByKeyOnDevice(Extent{key.data, key.placement}, key.dtype, plan.rows, max_groups);
  if (absl::IsUnimplemented(order.status())) return std::nullopt;
  if (!order.ok()) return order.status();
  note("rows ordered by key on the device");
  DeviceGroupOrder& o = **order;
  if (o.nan_group) {
    if (plan.dropna) {
      DropLastGroup(o);
    } else if (o.groups > max_groups) {
      return TooManyGroups(max_groups);
    }
  }
  GroupedResult out;
  out.groups = o.groups;
  out.rows_grouped = o.offsets->back();
  out.on_device = true;
  out.keys.push_back(
      KeyValues{.dtype = key.dtype, .data = KeyBytes(o.keys, rules::SizeOf(key.dtype)), .validity = nullptr});
  out.backend = backend.name();
  out.device = backend.device();
  std::vector<std::uint64_t> rows;        // once an index needs them
  std::unique_ptr<DeviceColumn> numbers;  // once a column takes the direct pass over them
  for (const ColumnAggregations& c : plan.values) {
    const GroupColumn& column = plan.columns[c.column];
    // A float column asking only the direct pass's ops takes it beside the
    // order (one read, no gather): the segmented kernels have no
    // NaN-skipping ops, pandas' sum and mean of floats, which would take
    // the gathered column to the host. Keys it does not take reach it as
    // their group numbers.
    if (TakesDirect(plan, c)) {
      absl::StatusOr<KeyedSums> sums = DeviceSumsByKey(plan, key, c, backend, max_groups);
      if (absl::IsUnimplemented(sums.status())) {
        sums = SumsByGroupNumber(plan, o, numbers, c, backend, max_groups);
      }
      if (!sums.ok() && !absl::IsUnimplemented(sums.status())) return sums.status();
      if (sums.ok() && sums->groups == o.groups) {
        const bool known = sums->spread_known;
        std::optional<std::pair<AggregationPlan, AggregationResult>> answered =
            DirectColumn(plan, c, *std::move(sums), backend);
        if (answered.has_value()) {
          NoteSummed(note, /*on_device=*/true, known);
          out.plans.push_back(std::move(answered->first));
          out.results.push_back(std::move(answered->second));
          continue;
        }
      }
    }
    absl::StatusOr<std::unique_ptr<DeviceColumn>> laid_out =
        o.Gather(Extent{column.data, column.placement}, column.dtype);
    if (!laid_out.ok()) return laid_out.status();
    note("column gathered on the device");
    const Extent bytes = (*laid_out)->extent();
    AggregationPlan p = c.plan;
    p.array.length = o.offsets->back();  // the rows of a dropped NaN group lie past the last group
    p.array.row_length = 0;
    p.array.offsets = o.offsets;
    p.array.validity = nullptr;
    absl::StatusOr<AggregationResult> result = ReduceByGroups(backend, p, bytes, note);
    if (!result.ok()) return result.status();
    note("column reduced");
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      if (!rules::agg::Of(p.ops[i].kind).answers_index) continue;
      if (rows.empty()) {
        absl::StatusOr<std::vector<std::uint64_t>> r = o.Rows();
        if (!r.ok()) return r.status();
        rows = *std::move(r);
      }
      MapIndices(p.ops[i], rows, *o.offsets, result->values[i]);
    }
    out.backend = result->backend;
    out.device = result->device;
    out.plans.push_back(std::move(p));
    out.results.push_back(*std::move(result));
  }
  return out;
}

absl::StatusOr<std::optional<GroupedResult>> RunCombinedOnDevice(const GroupByPlan& plan, Backend& backend,
                                                                 std::uint64_t max_groups, const Note& note) {
  if (!CombinableKeys(plan) || !ValuesUnmasked(plan)) return std::nullopt;
  std::vector<Extent> keys;
  std::vector<DType> dtypes;
  for (const std::size_t k : plan.keys) {
    const GroupColumn& c = plan.columns[k];
    if (c.placement.host()) return std::nullopt;
    keys.push_back(Extent{c.data, c.placement});
    dtypes.push_back(c.dtype);
  }
  absl::StatusOr<CombinedKeyColumn> combined = backend.CombineKeysOnDevice(keys, dtypes, plan.rows);
  if (absl::IsUnimplemented(combined.status())) return std::nullopt;
  if (!combined.ok()) return combined.status();
  note("key columns combined on the device");
  absl::StatusOr<std::optional<GroupedResult>> result =
      RunOnDevice(WithCombinedKey(plan, combined->column->extent()), backend, max_groups, note);
  if (!result.ok() || !result->has_value()) return result;
  SplitCombinedKeys(plan, combined->lowest, combined->range, **result);
  return result;
}

absl::StatusOr<std::optional<GroupedResult>> RunCopiedToDevice(const GroupByPlan& plan, Backend& backend,
                                                               std::uint64_t max_groups, const Note& note) {
  if (!(OneUnmaskedKey(plan) || CombinableKeys(plan)) || !ValuesUnmasked(plan)) return std::nullopt;
  std::vector<std::size_t> used(plan.keys.begin(), plan.keys.end());
  for (const ColumnAggregations& c : plan.values) used.push_back(c.column);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::vector<std::span<const std::byte>> bytes;
  for (const std::size_t i : used) bytes.push_back(plan.columns[i].data);
  absl::StatusOr<std::vector<std::unique_ptr<DeviceColumn>>> copies = backend.CopyToDevice(bytes, plan.rows);
  if (!copies.ok()) return std::nullopt;  // the host groups it (no device, too small, no room)
  note("columns copied to the device");
  GroupByPlan device = plan;
  for (std::size_t j = 0; j < used.size(); ++j) {
    const Extent e = (*copies)[j]->extent();
    device.columns[used[j]].data = e.bytes;
    device.columns[used[j]].placement = e.placement;
  }
  absl::StatusOr<std::optional<GroupedResult>> result = plan.keys.size() > 1
                                                            ? RunCombinedOnDevice(device, backend, max_groups, note)
                                                            : RunOnDevice(device, backend, max_groups, note);
  // A failure there (the device's scratch, say) leaves the table to the
  // host, which answers it or names its own limit.
  if (!result.ok()) return std::nullopt;
  return result;
}

}  // namespace tally::grouping
