#include "server/frontend/group_by_columns.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/frontend/convert.h"
#include "server/frontend/region_span.h"

namespace tally {

absl::Status StoredColumns::Intact() const {
  for (const auto& region : regions) {
    if (absl::Status s = region->Intact(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredColumns> HoldStoredColumns(const v1::GroupByRequest& request, DatasetStore& datasets,
                                                RegionRegistry& regions) {
  StoredColumns out;
  out.bytes.resize(static_cast<std::size_t>(request.columns_size()));
  for (int i = 0; i < request.columns_size(); ++i) {
    const v1::Column& c = request.columns(i);
    const auto at = static_cast<std::size_t>(i);
    if (c.has_region()) {
      absl::StatusOr<DType> dtype = DTypeFromProto(c.dtype());
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("columns[", i, "].dtype: ", dtype.status().message()));
      }
      const std::string field = absl::StrCat("columns[", i, "].region");
      absl::StatusOr<RegionSpan> span = LocateInRegion(regions, c.region().name(), c.region().offset(), *dtype,
                                                       c.region().length(), field + ".offset", field + ".length");
      if (!span.ok()) return absl::Status(span.status().code(), absl::StrCat(field, ": ", span.status().message()));
      out.bytes[at] = ColumnBytes{.dtype = *dtype, .data = span->bytes.bytes, .placement = span->bytes.placement};
      if (i == 0) out.first_rows = span->bytes.bytes.size() / rules::SizeOf(*dtype);
      out.regions.push_back(std::move(span->region));
      continue;
    }
    const std::string& name = c.dataset();
    if (name.empty()) continue;
    absl::StatusOr<std::shared_ptr<const Dataset>> dataset = datasets.Acquire(name);
    if (!dataset.ok()) {
      return absl::Status(dataset.status().code(), absl::StrCat("columns[", i, "].dataset: ", dataset.status().message()));
    }
    const DatasetInfo& info = (*dataset)->info();
    if (i == 0) out.first_rows = info.length;
    const std::vector<PlacedPiece> pieces = (*dataset)->Pieces(0, info.length);
    if (pieces.size() == 1) {
      // Read where it lies: host bytes in place; GPU bytes by the engine,
      // on that GPU, or copied out there.
      out.bytes[at] = ColumnBytes{.dtype = info.dtype,
                                  .data = pieces[0].extent.bytes,
                                  .placement = pieces[0].extent.placement,
                                  .facts = (*dataset)->facts()};
    } else {
      out.sharded.emplace_back(i, *dataset);
      out.to_copy += info.length * rules::SizeOf(info.dtype);
    }
    out.held.push_back(*std::move(dataset));
  }
  return out;
}

absl::Status CopyShardedColumns(StoredColumns& stored, Backend& backend) {
  for (const auto& [i, dataset] : stored.sharded) {
    const DatasetInfo& info = dataset->info();
    std::vector<std::byte>& copy = stored.copies.emplace_back(info.length * rules::SizeOf(info.dtype));
    std::uint64_t at = 0;
    for (const PlacedPiece& piece : dataset->Pieces(0, info.length)) {
      const std::span<std::byte> to(copy.data() + at, piece.extent.size());
      if (piece.extent.placement.host()) {
        std::memcpy(to.data(), piece.extent.bytes.data(), to.size());
      } else if (absl::Status s = backend.CopyToHost(piece.extent, to); !s.ok()) {
        return s;
      }
      at += piece.extent.size();
    }
    stored.bytes[static_cast<std::size_t>(i)] = ColumnBytes{.dtype = info.dtype, .data = copy};
  }
  stored.sharded.clear();
  return absl::OkStatus();
}

std::uint64_t GroupByWorkingBytes(std::uint64_t rows, int keys) { return rows * (keys > 1 ? 32 : 20); }

absl::StatusOr<GroupedTable> GroupTable(const v1::GroupByRequest& request, const StoredColumns& stored,
                                        Backend& backend, const RequestLimits& limits, std::uint64_t max_groups,
                                        const std::function<void(std::vector<rules::OpKind>)>& ops,
                                        const std::function<void(const char*)>& phase) {
  absl::StatusOr<GroupByPlan> plan = GroupByPlanFromProto(request, stored.bytes, limits);
  if (!plan.ok()) return plan.status();
  std::vector<rules::OpKind> kinds;
  for (const ColumnAggregations& c : plan->values) {
    for (const OpSpec& op : c.plan.ops) kinds.push_back(op.kind);
  }
  ops(std::move(kinds));
  if (phase) phase("planned");
  absl::StatusOr<grouping::GroupedResult> result = grouping::RunGroupBy(*plan, backend, max_groups, phase);
  if (phase) phase("grouped");
  if (!result.ok()) return result.status();
  if (absl::Status s = stored.Intact(); !s.ok()) return s;
  return GroupedTable{.plan = *std::move(plan), .result = *std::move(result)};
}

GroupPages::GroupPages(const v1::GroupByRequest& request, GroupedTable table, double server_seconds)
    : request_(request),
      table_(std::move(table)),
      server_seconds_(server_seconds),
      per_message_(GroupsPerMessage(request, table_.result)) {}

bool GroupPages::Next(v1::GroupByResponse* message) {
  const grouping::GroupedResult& result = table_.result;
  // One message at least, so that no groups still answer (groups 0).
  if (written_ && next_ >= result.groups) return false;
  written_ = true;
  const std::uint64_t count = std::min(per_message_, result.groups - next_);
  message->Clear();
  GroupPageToProto(request_, table_.plan, result, next_, count, message);
  next_ += count;
  if (next_ >= result.groups) {
    v1::Execution* e = message->mutable_execution();
    e->set_elements(table_.plan.rows);
    std::uint64_t bytes = 0;
    for (const GroupColumn& c : table_.plan.columns) bytes += c.data.size();
    e->set_bytes(bytes);
    e->set_rows(result.groups);
    e->set_backend(result.backend);
    e->set_device(result.device);
    e->set_server_seconds(server_seconds_);
  }
  return true;
}

}  // namespace tally
