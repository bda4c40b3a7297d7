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
#include "server/engine/grouping/direct_grouping.h"
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

// Indices a segment's reduction answered (argmin and argmax, topk's),
// counting from the group's first row in group order, as the rows of the
// table they name. -1 (no element) stays.
void MapIndices(const OpSpec& op, const std::vector<std::uint64_t>& rows, const std::vector<std::uint64_t>& start,
                OpValues& values) {
  // A partial state's index is offset by base_index (the table's first row
  // in the caller's whole table); so is the row it becomes.
  const std::int64_t base = op.partial ? static_cast<std::int64_t>(op.base_index) : 0;
  const auto row = [&](std::uint64_t group, std::int64_t index) -> std::int64_t {
    if (index < 0) return index;
    return base + static_cast<std::int64_t>(rows[start[group] + static_cast<std::uint64_t>(index - base)]);
  };
  if (auto* indices = std::get_if<std::vector<std::int64_t>>(&values)) {
    for (std::uint64_t g = 0; g < indices->size(); ++g) (*indices)[g] = row(g, (*indices)[g]);
  } else if (auto* answers = std::get_if<std::vector<rules::agg::RowAnswer>>(&values)) {
    for (std::uint64_t g = 0; g < answers->size(); ++g) {
      for (std::int64_t& i : (*answers)[g].indices) i = row(g, i);
    }
  } else if (auto* states = std::get_if<std::vector<rules::PartialState>>(&values)) {
    for (std::uint64_t g = 0; g < states->size(); ++g) (*states)[g].index = row(g, (*states)[g].index);
  }
}

// `values`'s rows appended to `into` (the same op's alternative).
void AppendRows(OpValues& into, OpValues&& more) {
  std::visit(
      [&](auto& to) {
        auto& from = std::get<std::decay_t<decltype(to)>>(more);
        to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
      },
      into);
}

// Runs `p` (a value column's aggregations; its array the whole column in
// group order, `start` the groups' starts) over `bytes` on `backend`, in
// batches of groups whose results fit one plan's limit (a group-by may
// have far more groups than a request has rows: --max_groups against
// RequestLimits::max_result_values). Device bytes whose ops the device's
// segment passes do not compute are copied to the host, already in group
// order, and read there.
absl::StatusOr<AggregationResult> ReduceByGroups(Backend& backend, const AggregationPlan& p, const Extent& bytes,
                                                 const Note& note) {
  const std::vector<std::uint64_t>& start = *p.array.offsets;
  const std::uint64_t groups = start.size() - 1;
  const std::size_t size = rules::SizeOf(p.array.dtype);
  const std::uint64_t per_group = std::max<std::uint64_t>(1, ResultValuesPerRow(p));
  const std::uint64_t batch = std::max<std::uint64_t>(1, RequestLimits{}.max_result_values / per_group);
  AggregationResult out;
  if (groups == 0) {
    // No group (no rows, or every key NA and dropped): no row to answer,
    // and none whose emptiness an op could refuse.
    out.backend = backend.name();
    out.device = backend.device();
    for (const OpSpec& op : p.ops) out.values.push_back(EmptyValues(op, p.array.dtype, 0));
    return out;
  }
  for (std::uint64_t g0 = 0; g0 < groups; g0 += batch) {
    const std::uint64_t g1 = std::min(groups, g0 + batch);
    const std::uint64_t first = start[g0], count = start[g1] - first;
    AggregationPlan part = p;
    std::vector<std::uint64_t> rebased(start.begin() + static_cast<std::ptrdiff_t>(g0),
                                       start.begin() + static_cast<std::ptrdiff_t>(g1) + 1);
    for (std::uint64_t& o : rebased) o -= first;
    part.array.length = count;
    part.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(std::move(rebased));
    part.array.validity = SliceValidity(p.array.validity, first, count);
    Extent feed = bytes.Sub(first * size, count * size);
    absl::StatusOr<std::unique_ptr<Reduction>> reduction = backend.Start(part, feed.placement);
    std::vector<std::byte> host_copy;
    if (!feed.placement.host() && absl::IsFailedPrecondition(reduction.status())) {
      host_copy.resize(feed.size());
      if (absl::Status s = backend.CopyToHost(feed, host_copy); !s.ok()) return s;
      feed = Extent::PageableHost(host_copy);
      reduction = backend.Start(part);
    }
    if (!reduction.ok()) return reduction.status();
    if (feed.size() != 0) {
      if (absl::Status s = (*reduction)->Consume(feed); !s.ok()) return s;
    }
    absl::StatusOr<AggregationResult> result = (*reduction)->Finish();
    if (!result.ok()) return result.status();
    note("a batch of groups reduced");
    if (g0 == 0) {
      out = *std::move(result);
      // Room for every group's answers at once: appending batch after batch
      // to vectors that grow by doubling copied each answer about twice
      // (0.9 of 2.0 s at 16M groups on an H200, trace).
      if (g1 < groups) {
        for (OpValues& values : out.values) std::visit([&](auto& v) { ReserveHuge(v, groups); }, values);
      }
    } else {
      for (std::size_t i = 0; i < out.values.size(); ++i) AppendRows(out.values[i], std::move(result->values[i]));
      note("its answers appended");
    }
  }
  return out;
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
}

// The direct pass over `o`'s group numbers (DeviceGroupOrder::GroupNumbers,
// made once into `numbers`) in place of keys it does not take: float keys,
// integers spread past its range. The same groups in the same order; the
// rows of a dropped NaN group, numbered past the last, summed as one group
// more and dropped.
absl::StatusOr<KeyedSums> SumsByGroupNumber(const GroupByPlan& plan, DeviceGroupOrder& o,
                                            std::unique_ptr<DeviceColumn>& numbers, const GroupColumn& column,
                                            Backend& backend, std::uint64_t max_groups) {
  if (numbers == nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceColumn>> made = o.GroupNumbers();
    if (!made.ok()) return made.status();
    numbers = *std::move(made);
  }
  const Extent e = numbers->extent();
  const GroupColumn key{.name = "group numbers", .dtype = DType::kUInt32, .data = e.bytes, .placement = e.placement};
  absl::StatusOr<KeyedSums> sums = DeviceSumsByKey(plan, key, column, backend, max_groups + 1);
  if (sums.ok() && sums->groups == o.groups + 1) DropLastGroup(*sums, sizeof(std::uint32_t));
  return sums;
}

absl::StatusOr<std::optional<GroupedResult>> RunOnDevice(const GroupByPlan& plan, Backend& backend,
                                                         std::uint64_t max_groups, const Note& note);

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
    return absl::InternalError(absl::StrCat("group-by numbered ", numbered->keys.size(), " keys but found ",
                                            out.groups, " groups."));
  }
  out.keys[0] = KeyValues{.dtype = key.dtype, .data = KeyBytes(numbered->keys, rules::SizeOf(key.dtype)),
                          .validity = nullptr};
  return result;
}

// The plan on the device holding its columns, when the backend groups
// there and the plan is one it takes (one integer key column, ascending
// keys, no masks, every column on one GPU); nullopt otherwise.
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
  out.keys.push_back(KeyValues{.dtype = key.dtype, .data = KeyBytes(o.keys, rules::SizeOf(key.dtype)), .validity = nullptr});
  out.backend = backend.name();
  out.device = backend.device();
  std::vector<std::uint64_t> rows;          // once an index needs them
  std::unique_ptr<DeviceColumn> numbers;  // once a column takes the direct pass over them
  for (const ColumnAggregations& c : plan.values) {
    const GroupColumn& column = plan.columns[c.column];
    // A float column asking only the direct pass's ops takes it beside the
    // order (one read, no gather): the segmented kernels have no
    // NaN-skipping ops, pandas' sum and mean of floats, which would take
    // the gathered column to the host. Keys it does not take reach it as
    // their group numbers.
    if (TakesDirect(plan, c)) {
      absl::StatusOr<KeyedSums> sums = DeviceSumsByKey(plan, key, column, backend, max_groups);
      if (absl::IsUnimplemented(sums.status())) {
        sums = SumsByGroupNumber(plan, o, numbers, column, backend, max_groups);
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
    absl::StatusOr<std::unique_ptr<DeviceColumn>> laid_out = o.Gather(Extent{column.data, column.placement}, column.dtype);
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

// A plan of several key columns (CombinableKeys) on one device: the keys
// combined into one column there (Backend::CombineKeysOnDevice), the plan
// run on it as one key, and each group's tuple read back from its
// combined key; nullopt where the backend does not combine these keys.
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

// A table in host memory whose plan RunOnDevice takes (one key column or
// several combinable ones, ascending keys, no masks), copied to a device
// where the backend groups there (Backend::CopyToDevice) and grouped as if
// it were resident there; nullopt where it is not copied or the device's
// steps do not take it.
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
