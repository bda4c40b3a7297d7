// GroupBy: the table arrives in one message; on a request worker the plan
// is checked, the groups found and each value column aggregated
// (server/engine/grouping), then the answer is written in messages of at
// most GroupsPerMessage groups, one at a time as the client reads them.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/grouping/grouped_reduction.h"
#include "server/frontend/aggregator_service.h"
#include "server/frontend/call_parts.h"
#include "server/frontend/group_convert.h"
#include "server/frontend/region_span.h"
#include "server/frontend/status.h"

namespace tally {
namespace {

// Writes the pages of one answer, then finishes; deletes itself when gRPC
// is done with it.
class GroupByWriter final : public grpc::ServerWriteReactor<v1::GroupByResponse> {
 public:
  GroupByWriter(const v1::GroupByRequest* request, std::shared_ptr<RequestRecord> record)
      : request_(request), record_(std::move(record)) {}

  // Called once, from the worker: the answer, or why there is none.
  void Answer(absl::StatusOr<GroupByPlan> plan, absl::StatusOr<grouping::GroupedResult> result,
              AdmissionController::Ticket ticket) {
    if (!plan.ok() || !result.ok()) return End(!plan.ok() ? plan.status() : result.status());
    plan_ = *std::move(plan);
    result_ = *std::move(result);
    // As Aggregate's: from the call's arrival to the answer computed, not
    // counting how fast the client reads its messages.
    server_seconds_ = record_->Seconds();
    ticket_ = std::move(ticket);
    per_message_ = GroupsPerMessage(*request_, result_);
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(absl::CancelledError("the client stopped reading the answer."));
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    // One message at least, so that no groups still answer (groups 0).
    if (written_ && next_ >= result_.groups) return End(absl::OkStatus());
    written_ = true;
    const std::uint64_t count = std::min(per_message_, result_.groups - next_);
    message_.Clear();
    GroupPageToProto(*request_, plan_, result_, next_, count, &message_);
    next_ += count;
    if (next_ >= result_.groups) {
      v1::Execution* e = message_.mutable_execution();
      e->set_elements(plan_.rows);
      std::uint64_t bytes = 0;
      for (const GroupColumn& c : plan_.columns) bytes += c.data.size();
      e->set_bytes(bytes);
      e->set_rows(result_.groups);
      e->set_backend(result_.backend);
      e->set_device(result_.device);
      e->set_server_seconds(server_seconds_);
    }
    StartWrite(&message_);
  }

  void End(const absl::Status& status) {
    record_->Complete(status, status.ok() ? plan_.rows : 0);
    Finish(ToGrpcStatus(status));
  }

  const v1::GroupByRequest* request_;
  std::shared_ptr<RequestRecord> record_;
  GroupByPlan plan_;
  grouping::GroupedResult result_;
  AdmissionController::Ticket ticket_;
  std::uint64_t per_message_ = 1;
  double server_seconds_ = 0;
  bool written_ = false;
  std::uint64_t next_ = 0;
  v1::GroupByResponse message_;
};

// The columns that name resident datasets or regions: the datasets and
// regions held (a delete, replace or unregister waits for this request),
// each read where it lies when it is one piece, and a sharded dataset's
// pieces copied together into host memory, once the request is admitted
// with those copies counted (CopyShardedColumns).
struct StoredColumns {
  std::vector<std::shared_ptr<const Dataset>> held;
  std::vector<std::shared_ptr<const Region>> regions;
  std::vector<std::vector<std::byte>> copies;
  std::vector<std::optional<ColumnBytes>> bytes;  // by column index
  std::uint64_t first_rows = 0;                   // columns[0]'s rows, when it is stored
  // Sharded datasets still to be copied, by column index, and their bytes.
  std::vector<std::pair<int, std::shared_ptr<const Dataset>>> sharded;
  std::uint64_t to_copy = 0;

  // Whether every region read is still whole (a host region's object
  // truncated while it was read makes what was read worthless).
  absl::Status Intact() const {
    for (const auto& region : regions) {
      if (absl::Status s = region->Intact(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
};

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

// The sharded datasets' pieces copied together into host memory.
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
  return absl::OkStatus();
}

// The rows a group-by holds working memory for, known before its plan
// (which reads the copies its admission pays for): columns[0]'s, counted as
// GroupByPlanFromProto counts them; 0 where the plan will refuse it anyway.
std::uint64_t RowsBeforePlanning(const v1::GroupByRequest& request, const StoredColumns& stored) {
  if (request.columns_size() == 0) return 0;
  const v1::Column& c = request.columns(0);
  if (!c.dataset().empty() || c.has_region()) return stored.first_rows;
  absl::StatusOr<DType> dtype = DTypeFromProto(c.dtype());
  return dtype.ok() ? c.data().size() / rules::SizeOf(*dtype) : 0;
}

// What a group-by holds while it runs besides its request: per row a group
// number and a place in group order (12 bytes), and one value column laid
// out by group at a time (at most 8 bytes a row). Composite keys add, while
// the groups are found, each row's mixed-radix number (8 bytes) and the
// next column's codes (4). The tables that code the keys grow with the
// distinct keys, not the rows, and are not counted.
std::uint64_t GroupByWorkingBytes(std::uint64_t rows, int keys) { return rows * (keys > 1 ? 32 : 20); }

}  // namespace

grpc::ServerWriteReactor<v1::GroupByResponse>* AggregatorService::GroupBy(grpc::CallbackServerContext* context,
                                                                         const v1::GroupByRequest* request) {
  auto record = std::make_shared<RequestRecord>(metrics_, Metrics::Method::kGroupBy, in_flight_);
  auto* writer = new GroupByWriter(request, record);
  absl::StatusOr<std::string> identity = BeginCall(*context, *record);
  if (!identity.ok()) {
    writer->Answer(identity.status(), absl::CancelledError(), {});
    return writer;
  }
  request_workers_.Post([this, context, request, record, writer, identity = *std::move(identity)] {
    record->Phase("on worker");
    absl::StatusOr<StoredColumns> stored = HoldStoredColumns(*request, datasets_, regions_);
    if (!stored.ok()) return writer->Answer(stored.status(), absl::CancelledError(), {});
    // Admitted before the sharded columns are copied, so that the copies
    // too stay within --max_inflight_bytes (64 clients over a 2-GPU host's
    // sharded datasets peaked at 13 GiB of host memory when they came first).
    absl::StatusOr<AdmissionController::Ticket> ticket = admission_.Admit(
        request->ByteSizeLong() + stored->to_copy +
            GroupByWorkingBytes(RowsBeforePlanning(*request, *stored), request->keys_size()),
        identity);
    if (!ticket.ok()) return writer->Answer(ticket.status(), absl::CancelledError(), {});
    if (context->IsCancelled()) {
      return writer->Answer(absl::CancelledError("the client cancelled the request."), absl::CancelledError(), {});
    }
    if (absl::Status s = CopyShardedColumns(*stored, backend_); !s.ok()) {
      return writer->Answer(s, absl::CancelledError(), {});
    }
    absl::StatusOr<GroupByPlan> plan = GroupByPlanFromProto(*request, stored->bytes, options_.limits);
    if (!plan.ok()) return writer->Answer(plan.status(), absl::CancelledError(), {});
    std::vector<OpKind> ops;
    for (const ColumnAggregations& c : plan->values) {
      for (const OpSpec& op : c.plan.ops) ops.push_back(op.kind);
    }
    record->SetOps(std::move(ops));
    record->Phase("planned");
    absl::StatusOr<grouping::GroupedResult> result = grouping::RunGroupBy(*plan, backend_, options_.max_groups, PhaseNoter(record.get()));
    record->Phase("grouped");
    if (result.ok()) {
      if (absl::Status s = stored->Intact(); !s.ok()) result = s;
    }
    if (result.ok() && metrics_ != nullptr) metrics_->GroupedBy(result->on_device, plan->rows, result->groups);
    stored->copies.clear();  // the plan's spans into them are not read again
    writer->Answer(std::move(plan), std::move(result), *std::move(ticket));
  });
  return writer;
}

}  // namespace tally
