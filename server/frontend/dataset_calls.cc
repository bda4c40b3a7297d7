// The resident-dataset methods of the Aggregator service: PutDataset streams
// an array into the dataset store (through the same ClientStreamReactor as
// AggregateStream), AggregateDataset reduces a dataset where it lies (the
// backend reads its Extent: GPU memory on the cuda backend), and the
// list/describe/delete calls read and change the store. With --dataset_dir
// an upload's commit and a delete write to disk, so both run on workers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/frontend/aggregator_service.h"
#include "server/frontend/call_parts.h"
#include "server/frontend/convert.h"
#include "server/frontend/dataset_header.h"
#include "server/frontend/dataset_query.h"
#include "server/frontend/status.h"

namespace tally {
// One PutDataset call: the header reserves the name and the bytes, the
// chunks are appended in order, and the end of the stream publishes it.
class AggregatorService::PutDatasetJob final : public StreamJob {
 public:
  PutDatasetJob(AggregatorService& service, std::string identity)
      : service_(service), identity_(std::move(identity)) {}

  absl::StatusOr<StreamChunk> Parse(const grpc::ByteBuffer& raw, bool* is_header) override {
    absl::StatusOr<SlicedBytes> chunk =
        ParseStreamMessage(raw, v1::PutDatasetRequest::kChunkFieldNumber, &message_, is_header);
    if (!chunk.ok()) return chunk.status();
    return StreamChunk{.bytes = *std::move(chunk)};
  }

  absl::Status TakeHeader() override {
    if (message_.payload_case() != v1::PutDatasetRequest::kHeader) {
      return absl::InvalidArgumentError(
          "chunk: the first message of PutDataset must be the header (name and spec), not a chunk.");
    }
    absl::StatusOr<DatasetHeader> header = DatasetHeaderFromProto(message_.header(), "header.");
    if (!header.ok()) return header.status();
    header_ = std::move(*header);
    return absl::OkStatus();
  }

  std::uint64_t declared_bytes() const override { return header_.length * rules::SizeOf(header_.dtype); }
  std::string Declared() const override {
    return absl::StrCat("header.spec.length (", header_.length, " ", rules::Name(header_.dtype), " elements)");
  }

  // The name and the memory, once bytes arrive; the bytes are charged to
  // the caller's identity until the dataset's memory is freed.
  absl::Status Start() override {
    absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> upload =
        BeginChargedUpload(service_.datasets_, service_.quotas_, identity_, header_);
    if (!upload.ok()) return upload.status();
    upload_ = std::move(*upload);
    return absl::OkStatus();
  }

  absl::Status Consume(const StreamChunk& chunk) override {
    for (std::span<const std::byte> piece : chunk.bytes.pieces()) {
      if (absl::Status s = upload_->Append(Extent::PageableHost(piece)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Finish(double server_seconds, grpc::ByteBuffer* response) override {
    absl::StatusOr<DatasetInfo> info = upload_->Commit();
    if (!info.ok()) return info.status();
    v1::PutDatasetResponse message;
    DatasetInfoToProto(*info, message.mutable_dataset());
    message.set_server_seconds(server_seconds);
    return SerializeResponse(message, response);
  }

  std::uint64_t elements() const override { return header_.length; }
  // The commit may wait for evicted datasets' memory, and with
  // --dataset_dir makes the dataset's file durable.
  bool FinishMayWait() const override { return true; }

 private:
  AggregatorService& service_;
  const std::string identity_;
  v1::PutDatasetRequest message_;
  DatasetHeader header_;
  std::unique_ptr<DatasetStore::Upload> upload_;  // discarded unless committed
};

grpc::ServerReadReactor<grpc::ByteBuffer>* AggregatorService::PutDataset(grpc::CallbackServerContext* context,
                                                                       grpc::ByteBuffer* response) {
  return StartStream(context, response, Metrics::Method::kPutDataset, &AggregatorService::MakePutDatasetJob);
}

std::unique_ptr<StreamJob> AggregatorService::MakePutDatasetJob(const std::string& identity) {
  return std::make_unique<PutDatasetJob>(*this, identity);
}

grpc::ServerUnaryReactor* AggregatorService::AggregateDataset(grpc::CallbackServerContext* context,
                                                              const v1::AggregateDatasetRequest* request,
                                                              v1::AggregateResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto record = std::make_shared<RequestRecord>(metrics_, Metrics::Method::kAggregateDataset, in_flight_);
  auto finish = [reactor, record](const absl::Status& status, std::uint64_t elements) {
    record->Complete(status, elements);
    reactor->Finish(ToGrpcStatus(status));
  };
  absl::StatusOr<std::string> identity = BeginCall(*context, *record);
  if (!identity.ok()) {
    finish(identity.status(), 0);
    return reactor;
  }
  // A lane may be waited for, and the cpu backend reads for a while: off
  // the gRPC thread.
  request_workers_.Post([this, context, request, response, record, finish, identity = *std::move(identity)] {
    record->Phase("on worker");
    std::uint64_t elements = 0;
    const absl::Status s = [&]() -> absl::Status {
      absl::StatusOr<std::shared_ptr<const Dataset>> dataset = datasets_.Acquire(request->name());
      if (!dataset.ok()) return dataset.status();
      const DatasetInfo& info = (*dataset)->info();
      std::uint64_t begin = 0, end = info.length;
      if (request->has_range()) {
        begin = request->range().begin();
        end = request->range().end();
        if (begin > end || end > info.length) {
          return absl::InvalidArgumentError(absl::StrCat("range: [", begin, ", ", end, ") is not within dataset '",
                                                         info.name, "' of ", info.length, " elements."));
        }
      }
      absl::StatusOr<std::uint64_t> row_length = DatasetQueryRowLength(*request, info, begin, end);
      if (!row_length.ok()) return row_length.status();
      absl::StatusOr<AggregationPlan> checked =
          PlanOverElements(info.dtype, end - begin, *row_length, request->offsets(), "offsets",
                           request->validity(), "validity", request->aggregations(), options_.limits, "range");
      if (!checked.ok()) return checked.status();
      record->SetOps(OpKinds(*checked));
      absl::StatusOr<AdmissionController::Ticket> results = AdmitResults(*checked, identity);
      if (!results.ok()) return results.status();
      record->Phase("planned");
      const std::vector<PlacedPiece> pieces = (*dataset)->Pieces(begin, end);
      absl::StatusOr<AggregationResult> result = ReducePieces(
          backend_, *checked, pieces, [context] { return context->IsCancelled(); }, PhaseNoter(record.get()));
      if (!result.ok()) return result.status();
      ResultToProto(*checked, request->aggregations(), std::move(*result), record->Seconds(), response);
      elements = checked->array.length;
      return absl::OkStatus();
    }();
    finish(s, elements);
  });
  return reactor;
}

grpc::ServerUnaryReactor* AggregatorService::ListDatasets(grpc::CallbackServerContext* context,
                                                          const v1::ListDatasetsRequest* request,
                                                          v1::ListDatasetsResponse* response) {
  RequestRecord record(metrics_, Metrics::Method::kListDatasets, in_flight_);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status = [&]() -> absl::Status {
    if (absl::StatusOr<std::string> identity = BeginCall(*context, record); !identity.ok()) return identity.status();
    absl::StatusOr<DatasetPage> page = DatasetPageFromProto(*request);
    if (!page.ok()) return page.status();
    bool more = false;
    for (const DatasetInfo& info : datasets_.ListPage(page->after, page->size, &more)) {
      DatasetInfoToProto(info, response->add_datasets());
    }
    if (more) response->set_next_page_token(response->datasets().rbegin()->name());
    for (const DatasetStore::PlaceUsage& u : datasets_.Usage()) {
      v1::PlaceUsage* p = response->add_places();
      p->set_place(u.place);
      p->set_bytes(u.bytes);
      p->set_datasets(u.datasets);
      p->set_limit_bytes(u.limit);
    }
    return absl::OkStatus();
  }();
  record.Complete(status, 0);
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* AggregatorService::DescribeDataset(grpc::CallbackServerContext* context,
                                                             const v1::DescribeDatasetRequest* request,
                                                             v1::DatasetInfo* response) {
  RequestRecord record(metrics_, Metrics::Method::kDescribeDataset, in_flight_);
  absl::StatusOr<std::string> identity = BeginCall(*context, record);
  absl::StatusOr<DatasetInfo> info = identity.ok() ? datasets_.Describe(request->name()) : identity.status();
  if (info.ok()) DatasetInfoToProto(*info, response);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  record.Complete(info.status(), 0);
  reactor->Finish(ToGrpcStatus(info.status()));
  return reactor;
}

grpc::ServerUnaryReactor* AggregatorService::DeleteDataset(grpc::CallbackServerContext* context,
                                                           const v1::DeleteDatasetRequest* request,
                                                           v1::DeleteDatasetResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto record = std::make_shared<RequestRecord>(metrics_, Metrics::Method::kDeleteDataset, in_flight_);
  absl::StatusOr<std::string> identity = BeginCall(*context, *record);
  auto run = [this, request, response, reactor, record, identity] {
    absl::StatusOr<DatasetInfo> info = identity.ok() ? datasets_.Delete(request->name()) : identity.status();
    if (info.ok()) DatasetInfoToProto(*info, response->mutable_dataset());
    record->Complete(info.status(), 0);
    reactor->Finish(ToGrpcStatus(info.status()));
  };
  // With --dataset_dir the delete removes its file before it answers: not
  // on a gRPC thread.
  if (identity.ok() && datasets_.durable()) {
    request_workers_.Post(std::move(run));
  } else {
    run();
  }
  return reactor;
}

}  // namespace tally
