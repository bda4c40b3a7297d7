// GroupBy: the table arrives in one message; on a request worker the plan
// is checked, the groups found and each value column aggregated
// (server/engine/grouping), then the answer is written in messages of at
// most GroupsPerMessage groups, one at a time as the client reads them.
// (GroupByStream, the table in chunks, is group_by_stream.cc.)
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
#include "server/frontend/group_by_columns.h"
#include "server/frontend/group_convert.h"
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
  void Answer(absl::StatusOr<GroupedTable> table, AdmissionController::Ticket ticket) {
    if (!table.ok()) return End(table.status());
    // As Aggregate's: from the call's arrival to the answer computed, not
    // counting how fast the client reads its messages.
    pages_.emplace(*request_, *std::move(table), record_->Seconds());
    ticket_ = std::move(ticket);
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(absl::CancelledError("the client stopped reading the answer."));
    WriteNext();
  }

  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    if (!pages_->Next(&message_)) return End(absl::OkStatus());
    StartWrite(&message_);
  }

  void End(const absl::Status& status) {
    record_->Complete(status, status.ok() ? pages_->rows() : 0);
    Finish(ToGrpcStatus(status));
  }

  const v1::GroupByRequest* request_;
  std::shared_ptr<RequestRecord> record_;
  std::optional<GroupPages> pages_;
  AdmissionController::Ticket ticket_;
  v1::GroupByResponse message_;
};

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

}  // namespace

grpc::ServerWriteReactor<v1::GroupByResponse>* AggregatorService::GroupBy(grpc::CallbackServerContext* context,
                                                                         const v1::GroupByRequest* request) {
  auto record = std::make_shared<RequestRecord>(metrics_, Metrics::Method::kGroupBy, in_flight_);
  auto* writer = new GroupByWriter(request, record);
  absl::StatusOr<std::string> identity = BeginCall(*context, *record);
  if (!identity.ok()) {
    writer->Answer(identity.status(), {});
    return writer;
  }
  request_workers_.Post([this, context, request, record, writer, identity = *std::move(identity)] {
    record->Phase("on worker");
    absl::StatusOr<StoredColumns> stored = HoldStoredColumns(*request, datasets_, regions_);
    if (!stored.ok()) return writer->Answer(stored.status(), {});
    // Admitted before the sharded columns are copied, so that the copies
    // too stay within --max_inflight_bytes (64 clients over a 2-GPU host's
    // sharded datasets peaked at 13 GiB of host memory when they came first).
    absl::StatusOr<AdmissionController::Ticket> ticket = admission_.Admit(
        request->ByteSizeLong() + stored->to_copy +
            GroupByWorkingBytes(RowsBeforePlanning(*request, *stored), request->keys_size()),
        identity);
    if (!ticket.ok()) return writer->Answer(ticket.status(), {});
    record->Phase("admitted");
    if (context->IsCancelled()) return writer->Answer(absl::CancelledError("the client cancelled the request."), {});
    if (absl::Status s = CopyShardedColumns(*stored, backend_); !s.ok()) return writer->Answer(s, {});
    absl::StatusOr<GroupedTable> table = GroupTable(
        *request, *stored, backend_, options_.limits, options_.max_groups,
        [&](std::vector<OpKind> ops) { record->SetOps(std::move(ops)); }, PhaseNoter(record.get()));
    if (table.ok() && metrics_ != nullptr) {
      metrics_->GroupedBy(table->result.on_device, table->plan.rows, table->result.groups);
    }
    stored->copies.clear();  // the plan's spans into them are not read again
    writer->Answer(std::move(table), *std::move(ticket));
  });
  return writer;
}

}  // namespace tally
