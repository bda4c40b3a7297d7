#include "server/frontend/group_convert.h"

#include <algorithm>
#include <string>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/frontend/convert.h"

namespace tally {
namespace {

constexpr std::size_t kMaxColumnName = 256;

// The request's aggregations of one value column, as FinishPlan takes them.
AggregationList AggregationsOf(const v1::GroupByRequest& request, const ColumnAggregations& c) {
  AggregationList list;
  for (const std::size_t i : c.positions) *list.Add() = request.aggregations(static_cast<int>(i)).aggregation();
  return list;
}

// A FinishPlan error about a one-aggregation list, as the request's
// aggregations[i] (its messages name "aggregations[0]").
absl::Status AsAggregation(const absl::Status& status, int i) {
  return absl::Status(status.code(), absl::StrReplaceAll(status.message(),
                                                         {{"aggregations[0]", absl::StrCat("aggregations[", i, "].aggregation")}}));
}

// A mask's bits as the wire's bytes (bit i % 8 of byte i / 8).
std::string MaskBytes(const std::vector<std::uint32_t>& words, std::uint64_t first, std::uint64_t count) {
  std::string out((count + 7) / 8, '\0');
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t b = first + i;
    if ((words[b >> 5] >> (b & 31)) & 1u) out[i >> 3] = static_cast<char>(out[i >> 3] | (1 << (i & 7)));
  }
  return out;
}

OpValues Slice(const OpValues& values, std::uint64_t first, std::uint64_t count) {
  return std::visit(
      [&](const auto& v) -> OpValues {
        using V = std::decay_t<decltype(v)>;
        const auto begin = v.begin() + static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(first, v.size()));
        const auto end = v.begin() + static_cast<std::ptrdiff_t>(std::min<std::uint64_t>(first + count, v.size()));
        return V(begin, end);
      },
      values);
}

}  // namespace

absl::StatusOr<GroupByPlan> GroupByPlanFromProto(const v1::GroupByRequest& request,
                                                 const std::vector<std::optional<ColumnBytes>>& from_datasets,
                                                 const RequestLimits& limits) {
  GroupByPlan plan;
  if (request.columns().empty()) return absl::InvalidArgumentError("columns: at least one column is required.");
  absl::flat_hash_map<std::string, std::size_t> by_name;
  for (int i = 0; i < request.columns_size(); ++i) {
    const v1::Column& c = request.columns(i);
    if (c.name().empty() || c.name().size() > kMaxColumnName) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "].name: 1 to ", kMaxColumnName,
                                                     " bytes, got ", c.name().size(), "."));
    }
    if (!by_name.try_emplace(c.name(), static_cast<std::size_t>(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "].name: '", c.name(), "' names two columns."));
    }
    const std::optional<ColumnBytes>* stored =
        static_cast<std::size_t>(i) < from_datasets.size() && from_datasets[static_cast<std::size_t>(i)]
            ? &from_datasets[static_cast<std::size_t>(i)]
            : nullptr;
    if ((!c.dataset().empty() || c.has_region()) && stored == nullptr) {
      return absl::InternalError(absl::StrCat("columns[", i, "]: the stored column was not read"));
    }
    if (static_cast<int>(!c.data().empty()) + static_cast<int>(!c.dataset().empty()) + static_cast<int>(c.has_region()) > 1) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "]: give one of data, dataset and region."));
    }
    absl::StatusOr<DType> dtype = stored != nullptr && c.dtype() == v1::DTYPE_UNSPECIFIED
                                      ? absl::StatusOr<DType>((*stored)->dtype)
                                      : DTypeFromProto(c.dtype());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "].dtype: ", dtype.status().message()));
    }
    if (stored != nullptr && *dtype != (*stored)->dtype) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "].dtype: ", rules::Name(*dtype), ", but dataset '",
                                                     c.dataset(), "' holds ", rules::Name((*stored)->dtype), "."));
    }
    const std::span<const std::byte> bytes =
        stored != nullptr ? (*stored)->data : std::as_bytes(std::span<const char>(c.data().data(), c.data().size()));
    const std::uint64_t size = rules::SizeOf(*dtype);
    if (bytes.size() % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "].data: ", bytes.size(),
                                                     " bytes is not a whole number of ", rules::Name(*dtype),
                                                     " elements (", size, " bytes each)."));
    }
    const std::uint64_t rows = bytes.size() / size;
    if (i == 0) {
      plan.rows = rows;
    } else if (rows != plan.rows) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "] '", c.name(), "': ", rows, " rows, but columns[0] '",
                                                     request.columns(0).name(), "' has ", plan.rows,
                                                     "; every column must have the same length."));
    }
    const std::string field = absl::StrCat("columns[", i, "].validity");
    absl::StatusOr<Validity> validity = ValidityFromProto(c.validity(), rows, field.c_str());
    if (!validity.ok()) return validity.status();
    plan.columns.push_back(GroupColumn{.name = c.name(),
                                       .dtype = *dtype,
                                       .data = bytes,
                                       .validity = *std::move(validity),
                                       .placement = stored != nullptr ? (*stored)->placement : Placement::PageableHost(),
                                       .facts = stored != nullptr ? (*stored)->facts : nullptr});
  }
  if (static_cast<std::size_t>(request.keys_size()) > kMaxKeyColumns) {
    return absl::InvalidArgumentError(absl::StrCat("keys: at most ", kMaxKeyColumns, " key columns, got ",
                                                   request.keys_size(), "."));
  }
  for (int i = 0; i < request.keys_size(); ++i) {
    const auto at = by_name.find(request.keys(i));
    if (at == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "]: no column is named '", request.keys(i), "'."));
    }
    if (std::find(plan.keys.begin(), plan.keys.end(), at->second) != plan.keys.end()) {
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "]: '", request.keys(i), "' is a key twice."));
    }
    plan.keys.push_back(at->second);
  }
  if (request.aggregations().empty()) {
    return absl::InvalidArgumentError("aggregations: at least one aggregation is required.");
  }
  if (static_cast<std::uint64_t>(request.aggregations_size()) > limits.max_aggregations) {
    return absl::InvalidArgumentError(absl::StrCat("aggregations: at most ", limits.max_aggregations,
                                                   " aggregations per request, got ", request.aggregations_size(), "."));
  }
  plan.aggregations = static_cast<std::size_t>(request.aggregations_size());
  for (int i = 0; i < request.aggregations_size(); ++i) {
    const v1::GroupAggregation& a = request.aggregations(i);
    const auto at = by_name.find(a.column());
    if (at == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("aggregations[", i, "].column: no column is named '",
                                                     a.column(), "'."));
    }
    if (a.aggregation().has_partial() && (a.aggregation().op() == v1::OP_TOPK || a.aggregation().op() == v1::OP_BOTTOMK)) {
      // Their indices are inside the serialised state, counted within the
      // group; a row of the table would have to be written into it.
      return absl::InvalidArgumentError(absl::StrCat("aggregations[", i,
                                                     "].aggregation.partial: topk and bottomk give no partial state "
                                                     "per group yet; ask for their values."));
    }
    // Each aggregation checked alone first, so that an error names it.
    const GroupColumn& column = plan.columns[at->second];
    AggregationPlan one;
    one.array = ArraySpec{.dtype = column.dtype, .length = plan.rows};
    AggregationList single;
    *single.Add() = a.aggregation();
    if (absl::StatusOr<AggregationPlan> checked = FinishPlan(one, single, limits); !checked.ok()) {
      return AsAggregation(checked.status(), i);
    }
    auto same = std::find_if(plan.values.begin(), plan.values.end(),
                             [&](const ColumnAggregations& c) { return c.column == at->second; });
    if (same == plan.values.end()) {
      plan.values.push_back(ColumnAggregations{.column = at->second});
      same = plan.values.end() - 1;
    }
    same->positions.push_back(static_cast<std::size_t>(i));
  }
  for (ColumnAggregations& c : plan.values) {
    AggregationPlan whole;
    whole.array = ArraySpec{.dtype = plan.columns[c.column].dtype, .length = plan.rows};
    absl::StatusOr<AggregationPlan> checked = FinishPlan(whole, AggregationsOf(request, c), limits);
    if (!checked.ok()) return checked.status();
    c.plan = *std::move(checked);
  }
  plan.sort = !request.first_seen_order();
  plan.dropna = !request.keep_na_keys();
  return plan;
}

std::uint64_t GroupsPerMessage(const v1::GroupByRequest& request, const grouping::GroupedResult& result) {
  if (request.groups_per_message() != 0) return request.groups_per_message();
  std::uint64_t per_group = 0;
  for (const grouping::KeyValues& k : result.keys) per_group += rules::SizeOf(k.dtype) + 1;
  // A value on the wire is at most 10 bytes (a varint or a double and its
  // share of the field's header).
  for (const AggregationPlan& p : result.plans) per_group += 10 * ResultValuesPerRow(p) + 16;
  constexpr std::uint64_t kMessageBytes = std::uint64_t{7} << 19;  // 3.5 MiB
  return std::max<std::uint64_t>(1, kMessageBytes / std::max<std::uint64_t>(per_group, 1));
}

void GroupPageToProto(const v1::GroupByRequest& request, const GroupByPlan& plan,
                      const grouping::GroupedResult& result, std::uint64_t first, std::uint64_t count,
                      v1::GroupByResponse* out) {
  out->set_groups(result.groups);
  out->set_first_group(first);
  for (std::size_t k = 0; k < result.keys.size(); ++k) {
    const grouping::KeyValues& key = result.keys[k];
    v1::Column* c = out->add_keys();
    c->set_name(plan.columns[plan.keys[k]].name);
    c->set_dtype(DTypeToProto(key.dtype));
    const std::size_t size = rules::SizeOf(key.dtype);
    c->set_data(reinterpret_cast<const char*>(key.data.data()) + first * size, count * size);
    if (key.validity != nullptr) *c->mutable_validity() = MaskBytes(*key.validity, first, count);
  }
  // Each value column's answers, placed at their aggregations' positions.
  std::vector<v1::AggregationResult> placed(plan.aggregations);
  for (std::size_t v = 0; v < result.plans.size(); ++v) {
    AggregationResult page{.values = {}, .backend = result.backend, .device = result.device};
    for (const OpValues& values : result.results[v].values) page.values.push_back(Slice(values, first, count));
    v1::AggregateResponse answers;
    ResultToProto(result.plans[v], AggregationsOf(request, plan.values[v]), std::move(page), 0, &answers);
    for (std::size_t j = 0; j < plan.values[v].positions.size(); ++j) {
      placed[plan.values[v].positions[j]] = std::move(*answers.mutable_results(static_cast<int>(j)));
    }
  }
  for (v1::AggregationResult& r : placed) *out->add_results() = std::move(r);
}

}  // namespace tally
