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
// pieces copied together into host memory.
struct StoredColumns {
  std::vector<std::shared_ptr<const Dataset>> held;
  std::vector<std::shared_ptr<const Region>> regions;
  std::vector<std::vector<std::byte>> copies;
  std::vector<std::optional<ColumnBytes>> bytes;  // by column index
  std::uint64_t copied = 0;

  // Whether every region read is still whole (a host region's object
  // truncated while it was read makes what was read worthless).
  absl::Status Intact() const {
    for (const auto& region : regions) {
      if (absl::Status s = region->Intact(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<StoredColumns> ReadStoredColumns(const v1::GroupByRequest& request, DatasetStore& datasets,
                                                RegionRegistry& regions, Backend& backend) {
  StoredColumns out;
  out.bytes.resize(static_cast<std::size_t>(request.columns_size()));
  for (int i = 0; i < request.columns_size(); ++i) {
    const v1::Column& c = request.columns(i);
    if (c.has_region()) {
      absl::StatusOr<DType> dtype = DTypeFromProto(c.dtype());
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("columns[", i, "].dtype: ", dtype.status().message()));
      }
      const std::string field = absl::StrCat("columns[", i, "].region");
      absl::StatusOr<RegionSpan> span = LocateInRegion(regions, c.region().name(), c.region().offset(), *dtype,
                                                       c.region().length(), field + ".offset", field + ".length");
      if (!span.ok()) return absl::Status(span.status().code(), absl::StrCat(field, ": ", span.status().message()));
      out.bytes[static_cast<std::size_t>(i)] =
          ColumnBytes{.dtype = *dtype, .data = span->bytes.bytes, .placement = span->bytes.placement};
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
    const std::vector<PlacedPiece> pieces = (*dataset)->Pieces(0, info.length);
    ColumnBytes column;
    column.dtype = info.dtype;
    if (pieces.size() == 1) {
      // Read where it lies: host bytes in place; GPU bytes by the engine,
      // on that GPU, or copied out there.
      column.data = pieces[0].extent.bytes;
      column.placement = pieces[0].extent.placement;
    } else {
      std::vector<std::byte>& copy = out.copies.emplace_back(info.length * rules::SizeOf(info.dtype));
      std::uint64_t at = 0;
      for (const PlacedPiece& piece : pieces) {
        const std::span<std::byte> to(copy.data() + at, piece.extent.size());
        if (piece.extent.placement.host()) {
          std::memcpy(to.data(), piece.extent.bytes.data(), to.size());
        } else if (absl::Status s = backend.CopyToHost(piece.extent, to); !s.ok()) {
          return s;
        }
        at += piece.extent.size();
      }
      out.copied += copy.size();
      column.data = copy;
    }
    out.bytes[static_cast<std::size_t>(i)] = column;
    out.held.push_back(*std::move(dataset));
  }
  return out;
}

// What a group-by holds while it runs besides its request: per row a group
// number and a place in group order (12 bytes), and one value column laid
// out by group at a time (at most 8 bytes a row). Composite keys add, while
// the groups are found, each row's mixed-radix number (8 bytes) and the
// next column's codes (4). The tables that code the keys grow with the
// distinct keys, not the rows, and are not counted.
std::uint64_t GroupByWorkingBytes(const GroupByPlan& plan) {
  return plan.rows * (plan.keys.size() > 1 ? 32 : 20);
}

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
    absl::StatusOr<StoredColumns> stored = ReadStoredColumns(*request, datasets_, regions_, backend_);
    if (!stored.ok()) return writer->Answer(stored.status(), absl::CancelledError(), {});
    absl::StatusOr<GroupByPlan> plan = GroupByPlanFromProto(*request, stored->bytes, options_.limits);
    if (!plan.ok()) return writer->Answer(plan.status(), absl::CancelledError(), {});
    std::vector<OpKind> ops;
    for (const ColumnAggregations& c : plan->values) {
      for (const OpSpec& op : c.plan.ops) ops.push_back(op.kind);
    }
    record->SetOps(std::move(ops));
    absl::StatusOr<AdmissionController::Ticket> ticket =
        admission_.Admit(request->ByteSizeLong() + stored->copied + GroupByWorkingBytes(*plan), identity);
    if (!ticket.ok()) return writer->Answer(ticket.status(), absl::CancelledError(), {});
    if (context->IsCancelled()) {
      return writer->Answer(absl::CancelledError("the client cancelled the request."), absl::CancelledError(), {});
    }
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
