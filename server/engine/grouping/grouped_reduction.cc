#include "server/engine/grouping/grouped_reduction.h"

#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "server/core/validate.h"
#include "tally/rules/agg/registry.h"

namespace tally::grouping {
namespace {

// The rows of every group, group after group, each group's rows in table
// order (a stable counting sort), and where each group starts.
struct RowsByGroup {
  std::vector<std::uint64_t> rows;
  Offsets offsets;
};

RowsByGroup OrderRows(const Groups& groups) {
  std::vector<std::uint64_t> start(groups.count + 1, 0);
  for (const std::uint32_t g : groups.of_row) {
    if (g != kNoGroup) ++start[g + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<std::uint64_t> next(start.begin(), start.end() - 1);
  RowsByGroup out;
  out.rows.resize(start.back());
  for (std::uint64_t r = 0; r < groups.of_row.size(); ++r) {
    const std::uint32_t g = groups.of_row[r];
    if (g != kNoGroup) out.rows[next[g]++] = r;
  }
  out.offsets = std::make_shared<const std::vector<std::uint64_t>>(std::move(start));
  return out;
}

template <std::size_t kSize>
void GatherFixed(const std::byte* from, const std::vector<std::uint64_t>& rows, std::byte* to) {
  for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(to + i * kSize, from + rows[i] * kSize, kSize);
}

// The elements of `data` at `rows`, in that order.
std::vector<std::byte> Gather(std::span<const std::byte> data, std::size_t size, const std::vector<std::uint64_t>& rows) {
  std::vector<std::byte> out(rows.size() * size);
  switch (size) {
    case 1: GatherFixed<1>(data.data(), rows, out.data()); break;
    case 2: GatherFixed<2>(data.data(), rows, out.data()); break;
    case 4: GatherFixed<4>(data.data(), rows, out.data()); break;
    default: GatherFixed<8>(data.data(), rows, out.data()); break;
  }
  return out;
}

// The validity bits at `rows`, in that order; null for a null mask.
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
void MapIndices(const OpSpec& op, const RowsByGroup& order, OpValues& values) {
  if (!rules::agg::Of(op.kind).answers_index) return;
  const std::vector<std::uint64_t>& start = *order.offsets;
  const auto row = [&](std::uint64_t group, std::int64_t index) -> std::int64_t {
    if (index < 0) return index;
    return static_cast<std::int64_t>(order.rows[start[group] + static_cast<std::uint64_t>(index)]);
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

}  // namespace

absl::StatusOr<GroupedResult> RunGroupBy(const GroupByPlan& plan, Backend& backend, std::uint64_t max_groups) {
  std::vector<KeyColumn> keys;
  for (const std::size_t k : plan.keys) {
    const GroupColumn& c = plan.columns[k];
    keys.push_back(KeyColumn{.dtype = c.dtype, .data = c.data, .validity = c.validity});
  }
  absl::StatusOr<Groups> groups =
      FindGroups(keys, plan.rows, GroupOptions{.sort = plan.sort, .dropna = plan.dropna, .max_groups = max_groups});
  if (!groups.ok()) return groups.status();
  const RowsByGroup order = OrderRows(*groups);

  GroupedResult out;
  out.groups = groups->count;
  out.rows_grouped = order.rows.size();
  for (const KeyColumn& k : keys) {
    Validity validity = GatherValidity(k.validity, groups->first_row);
    if (validity != nullptr) {
      const ArraySpec bits{.dtype = k.dtype, .length = groups->count, .validity = validity};
      bool missing = false;
      for (std::uint64_t g = 0; g < groups->count && !missing; ++g) missing = !bits.Valid(g);
      if (!missing) validity = nullptr;  // no group's key is missing
    }
    out.keys.push_back(KeyValues{.dtype = k.dtype,
                                 .data = Gather(k.data, rules::SizeOf(k.dtype), groups->first_row),
                                 .validity = std::move(validity)});
  }
  out.backend = backend.name();
  out.device = backend.device();
  for (const ColumnAggregations& c : plan.values) {
    const GroupColumn& column = plan.columns[c.column];
    AggregationPlan p = c.plan;
    p.array.length = order.rows.size();
    p.array.row_length = 0;
    p.array.offsets = order.offsets;
    p.array.validity = GatherValidity(column.validity, order.rows);
    const std::vector<std::byte> bytes = Gather(column.data, rules::SizeOf(column.dtype), order.rows);
    absl::StatusOr<std::unique_ptr<Reduction>> reduction = backend.Start(p);
    if (!reduction.ok()) return reduction.status();
    if (!bytes.empty()) {
      if (absl::Status s = (*reduction)->Consume(std::span<const std::byte>(bytes)); !s.ok()) return s;
    }
    absl::StatusOr<AggregationResult> result = (*reduction)->Finish();
    if (!result.ok()) return result.status();
    for (std::size_t i = 0; i < p.ops.size(); ++i) MapIndices(p.ops[i], order, result->values[i]);
    out.backend = result->backend;
    out.device = result->device;
    out.plans.push_back(std::move(p));
    out.results.push_back(*std::move(result));
  }
  return out;
}

}  // namespace tally::grouping
