// GroupBy: the table arrives in one message; on a request worker the plan
// is checked, the groups found and each value column aggregated
// (server/engine/grouping), then the answer is written in messages of at
// most GroupsPerMessage groups, one at a time as the client reads them.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/grouping/grouped_reduction.h"
#include "server/frontend/aggregator_service.h"
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
  void Answer(absl::StatusOr<GroupByPlan> plan, absl::StatusOr<grouping::GroupedResult> result,
              AdmissionController::Ticket ticket) {
    if (!plan.ok() || !result.ok()) return End(!plan.ok() ? plan.status() : result.status());
    plan_ = *std::move(plan);
    result_ = *std::move(result);
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
    const bool first = next_ == 0;
    if (!first && next_ >= result_.groups) return End(absl::OkStatus());
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
      e->set_server_seconds(record_->Seconds());
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
  std::uint64_t next_ = 0;
  v1::GroupByResponse message_;
};

// What a group-by holds while it runs besides its request: per row a group
// number and a place in group order (12 bytes), and one value column laid
// out by group at a time (at most 8 bytes a row).
std::uint64_t GroupByWorkingBytes(const GroupByPlan& plan) { return plan.rows * 20; }

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
    absl::StatusOr<GroupByPlan> plan = GroupByPlanFromProto(*request, options_.limits);
    if (!plan.ok()) return writer->Answer(plan.status(), absl::CancelledError(), {});
    std::vector<OpKind> ops;
    for (const ColumnAggregations& c : plan->values) {
      for (const OpSpec& op : c.plan.ops) ops.push_back(op.kind);
    }
    record->SetOps(std::move(ops));
    absl::StatusOr<AdmissionController::Ticket> ticket =
        admission_.Admit(request->ByteSizeLong() + GroupByWorkingBytes(*plan), identity);
    if (!ticket.ok()) return writer->Answer(ticket.status(), absl::CancelledError(), {});
    if (context->IsCancelled()) {
      return writer->Answer(absl::CancelledError("the client cancelled the request."), absl::CancelledError(), {});
    }
    record->Phase("planned");
    absl::StatusOr<grouping::GroupedResult> result = grouping::RunGroupBy(*plan, backend_, options_.max_groups);
    record->Phase("grouped");
    writer->Answer(std::move(plan), std::move(result), *std::move(ticket));
  });
  return writer;
}

}  // namespace tally
