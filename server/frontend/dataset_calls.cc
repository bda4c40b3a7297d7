// The resident-dataset methods of the Aggregator service: PutDataset streams
// an array into the dataset store (through the same ClientStreamReactor as
// AggregateStream), AggregateDataset reduces a dataset where it lies (the
// backend reads its Extent: GPU memory on the cuda backend), and the
// list/describe/delete calls read and change the store.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/frontend/aggregator_service.h"
#include "server/frontend/call_parts.h"
#include "server/frontend/convert.h"
#include "server/frontend/status.h"

namespace tally {
namespace {

// Host bytes of a dataset are fed in pieces of this size, so a cancelled
// query stops within one piece (the cpu backend's results do not depend on
// how its input is pieced). Device bytes go whole: the GPU cuts them itself.
constexpr std::uint64_t kHostQueryPieceBytes = std::uint64_t{64} << 20;

absl::Status Cancelled() { return absl::CancelledError("the client cancelled the request, or its deadline passed."); }

}  // namespace

// One PutDataset call: the header reserves the name and the bytes, the
// chunks are appended in order, and the end of the stream publishes it.
class AggregatorService::PutDatasetJob final : public StreamJob {
 public:
  PutDatasetJob(AggregatorService& service, std::string identity)
      : service_(service), identity_(std::move(identity)) {}

  absl::StatusOr<SlicedBytes> Parse(const grpc::ByteBuffer& raw, bool* is_header) override {
    message_.Clear();
    absl::StatusOr<SlicedBytes> chunk = ParseWithBytesInPlace(raw, v1::PutDatasetRequest::kChunkFieldNumber, &message_);
    *is_header = message_.payload_case() != v1::PutDatasetRequest::kChunk;
    return chunk;
  }

  absl::Status TakeHeader() override {
    if (message_.payload_case() != v1::PutDatasetRequest::kHeader) {
      return absl::InvalidArgumentError(
          "chunk: the first message of PutDataset must be the header (name and spec), not a chunk.");
    }
    const v1::PutDatasetRequest::Header& h = message_.header();
    if (absl::Status s = DatasetStore::CheckName(h.name()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("header.", s.message()));
    }
    absl::StatusOr<DType> dtype = DTypeFromProto(h.spec().dtype());
    if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("header.", dtype.status().message()));
    if (!h.spec().has_length()) {
      return absl::InvalidArgumentError("header.spec.length: PutDataset needs the array's length in elements up front.");
    }
    if (h.spec().row_length() != 0) {
      return absl::InvalidArgumentError(
          "header.spec.row_length: a dataset has no rows of its own; give row_length with each AggregateDataset.");
    }
    if (!std::isfinite(h.ttl_seconds()) || h.ttl_seconds() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("header.ttl_seconds: ", h.ttl_seconds(), " is not a finite number of seconds >= 0."));
    }
    const std::uint64_t size = rules::SizeOf(*dtype);
    if (h.spec().length() > (std::uint64_t{1} << 62) / size) {
      return absl::InvalidArgumentError(
          absl::StrCat("header.spec.length: ", h.spec().length(), " elements is beyond any array tally can take."));
    }
    name_ = h.name();
    dtype_ = *dtype;
    length_ = h.spec().length();
    replace_ = h.replace();
    if (h.ttl_seconds() > 0) {
      ttl_ = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(std::min(h.ttl_seconds(), 1e12) * 1e3)));
    }
    return absl::OkStatus();
  }

  std::uint64_t declared_bytes() const override { return length_ * rules::SizeOf(dtype_); }
  std::string Declared() const override {
    return absl::StrCat("header.spec.length (", length_, " ", rules::Name(dtype_), " elements)");
  }

  // The name and the memory, once bytes arrive; the bytes are charged to
  // the caller's identity until the dataset's memory is freed.
  absl::Status Start() override {
    absl::StatusOr<IdentityQuota::Charge> charge =
        service_.quotas_.dataset_bytes.TryCharge(identity_, declared_bytes());
    if (!charge.ok()) return charge.status();
    absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> upload = service_.datasets_.BeginUpload(
        name_, dtype_, length_, replace_, ttl_, std::make_shared<IdentityQuota::Charge>(std::move(*charge)));
    if (!upload.ok()) return upload.status();
    upload_ = std::move(*upload);
    return absl::OkStatus();
  }

  absl::Status Consume(const SlicedBytes& chunk) override {
    for (std::span<const std::byte> piece : chunk.pieces()) {
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

  std::uint64_t elements() const override { return length_; }

 private:
  AggregatorService& service_;
  const std::string identity_;
  v1::PutDatasetRequest message_;
  std::string name_;
  DType dtype_ = DType::kFloat32;
  std::uint64_t length_ = 0;
  bool replace_ = false;
  std::optional<std::chrono::milliseconds> ttl_;
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
  if (absl::StatusOr<std::string> identity = BeginCall(*context, *record); !identity.ok()) {
    finish(identity.status(), 0);
    return reactor;
  }
  // A lane may be waited for, and the cpu backend reads for a while: off
  // the gRPC thread.
  request_workers_.Post([this, context, request, response, record, finish] {
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
      AggregationPlan plan;
      plan.array.dtype = info.dtype;
      plan.array.length = end - begin;
      plan.array.row_length = request->row_length();
      if (plan.array.segmented() && plan.array.length % plan.array.row_length != 0) {
        return absl::InvalidArgumentError(absl::StrCat("row_length: ", plan.array.row_length,
                                                       " does not divide the ", plan.array.length,
                                                       " elements of the range."));
      }
      absl::StatusOr<AggregationPlan> checked = FinishPlan(std::move(plan), request->aggregations(), options_.limits);
      if (!checked.ok()) return checked.status();
      record->SetOps(OpKinds(*checked));
      if (context->IsCancelled()) return Cancelled();
      const std::uint64_t size = rules::SizeOf(info.dtype);
      const Extent whole = (*dataset)->extent().Sub(begin * size, (end - begin) * size);
      absl::StatusOr<std::unique_ptr<Reduction>> reduction = backend_.Start(*checked, whole.placement);
      if (!reduction.ok()) return reduction.status();
      const std::uint64_t piece = whole.placement.host() ? kHostQueryPieceBytes / size * size : whole.size();
      for (std::uint64_t at = 0; at < whole.size(); at += piece) {
        if (context->IsCancelled()) return Cancelled();
        if (absl::Status c = (*reduction)->Consume(whole.Sub(at, std::min(piece, whole.size() - at))); !c.ok()) {
          return c;
        }
      }
      absl::StatusOr<AggregationResult> result = (*reduction)->Finish();
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
                                                          const v1::ListDatasetsRequest*,
                                                          v1::ListDatasetsResponse* response) {
  RequestRecord record(metrics_, Metrics::Method::kListDatasets, in_flight_);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::StatusOr<std::string> identity = BeginCall(*context, record); !identity.ok()) {
    record.Complete(identity.status(), 0);
    reactor->Finish(ToGrpcStatus(identity.status()));
    return reactor;
  }
  for (const DatasetInfo& info : datasets_.List()) DatasetInfoToProto(info, response->add_datasets());
  for (const DatasetStore::PlaceUsage& u : datasets_.Usage()) {
    v1::PlaceUsage* p = response->add_places();
    p->set_place(u.place);
    p->set_bytes(u.bytes);
    p->set_datasets(u.datasets);
    p->set_limit_bytes(u.limit);
  }
  record.Complete(absl::OkStatus(), 0);
  reactor->Finish(grpc::Status::OK);
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
  RequestRecord record(metrics_, Metrics::Method::kDeleteDataset, in_flight_);
  absl::StatusOr<std::string> identity = BeginCall(*context, record);
  absl::StatusOr<DatasetInfo> info = identity.ok() ? datasets_.Delete(request->name()) : identity.status();
  if (info.ok()) DatasetInfoToProto(*info, response->mutable_dataset());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  record.Complete(info.status(), 0);
  reactor->Finish(ToGrpcStatus(info.status()));
  return reactor;
}

}  // namespace tally
