#include "server/frontend/aggregator_service.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/frontend/convert.h"
#include "server/frontend/element_aligner.h"
#include "server/frontend/raw_message.h"
#include "server/frontend/request_record.h"
#include "server/frontend/status.h"

namespace tally {
namespace {

std::vector<OpKind> OpKinds(const AggregationPlan& plan) {
  std::vector<OpKind> kinds;
  kinds.reserve(plan.ops.size());
  for (const OpSpec& op : plan.ops) kinds.push_back(op.kind);
  return kinds;
}

// Feeds `bytes` to `reduction` in order, re-blocked into whole elements: the
// pieces are cut where the receive buffers were, not between elements.
absl::Status ConsumePieces(const SlicedBytes& bytes, ElementAligner& aligner, Reduction& reduction) {
  for (std::span<const std::byte> piece : bytes.pieces()) {
    absl::Status s =
        aligner.Push(piece, [&reduction](std::span<const std::byte> elements) { return reduction.Consume(elements); });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SerializeResponse(const v1::AggregateResponse& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  grpc::Status s = grpc::SerializationTraits<v1::AggregateResponse>::Serialize(message, out, &own_buffer);
  if (!s.ok()) return absl::InternalError(absl::StrCat("the response could not be serialized: ", s.error_message()));
  return absl::OkStatus();
}

absl::Status TooLargeForUnary(std::uint64_t bytes, std::uint64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat("data: ", bytes, " bytes is over the ", limit,
                   "-byte limit for Aggregate (--max_message_bytes); send larger arrays with AggregateStream."));
}

}  // namespace

absl::Status AggregatorService::Draining() {
  return absl::UnavailableError("tally-server is shutting down; send the request to another replica.");
}

AggregatorService::AggregatorService(Backend& backend, Executor& request_workers,
                                     Executor& chunk_workers, Metrics* metrics, ServiceOptions options)
    : backend_(backend),
      request_workers_(request_workers),
      chunk_workers_(chunk_workers),
      metrics_(metrics),
      options_(std::move(options)),
      admission_(options_.max_inflight_bytes, options_.admission_wait, metrics) {}

grpc::ServerUnaryReactor* AggregatorService::Aggregate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw_request,
                                                       grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto record = std::make_shared<RequestRecord>(metrics_, Metrics::Method::kAggregate, in_flight_);
  auto finish = [reactor, record](const absl::Status& status, std::uint64_t elements) {
    record->Complete(status, elements);
    reactor->Finish(ToGrpcStatus(status));
  };

  // Everything but the data is parsed; the data stays in the receive buffers.
  auto request = std::make_shared<v1::AggregateRequest>();
  absl::StatusOr<SlicedBytes> parsed =
      ParseWithBytesInPlace(*raw_request, v1::AggregateRequest::kDataFieldNumber, request.get());
  if (!parsed.ok()) {
    finish(parsed.status(), 0);
    return reactor;
  }
  auto data = std::make_shared<SlicedBytes>(std::move(*parsed));
  record->AddBytes(data->size());
  if (draining_.load()) {
    finish(Draining(), 0);
    return reactor;
  }
  if (data->size() > options_.max_unary_bytes) {
    finish(TooLargeForUnary(data->size(), options_.max_unary_bytes), 0);
    return reactor;
  }
  absl::StatusOr<AggregationPlan> plan =
      PlanFromProto(request->spec(), request->aggregations(), data->size(), options_.limits);
  if (!plan.ok()) {
    finish(plan.status(), 0);
    return reactor;
  }
  record->SetOps(OpKinds(*plan));

  // `ticket` is empty when admission must still wait for room.
  auto run = [this, context, request, data, response, finish, record, plan = std::move(*plan)](
                 AdmissionController::Ticket ticket) {
    if (ticket.bytes() == 0 && !data->empty()) {
      absl::StatusOr<AdmissionController::Ticket> admitted = admission_.Admit(data->size());
      if (!admitted.ok()) return finish(admitted.status(), 0);
      ticket = std::move(*admitted);
    }
    if (context->IsCancelled()) return finish(absl::CancelledError("the client cancelled the request."), 0);
    absl::StatusOr<std::unique_ptr<Reduction>> reduction = backend_.Start(plan);
    if (!reduction.ok()) return finish(reduction.status(), 0);
    ElementAligner aligner(ops::SizeOf(plan.array.dtype));
    if (absl::Status s = ConsumePieces(*data, aligner, **reduction); !s.ok()) return finish(s, 0);
    absl::StatusOr<AggregationResult> result = (*reduction)->Finish();
    if (!result.ok()) return finish(result.status(), 0);
    v1::AggregateResponse message;
    ResultToProto(plan, request->aggregations(), std::move(*result), record->Seconds(), &message);
    if (absl::Status s = SerializeResponse(message, response); !s.ok()) return finish(s, 0);
    finish(absl::OkStatus(), plan.array.length);
  };
  // Small requests that are admitted at once run right here; the rest go to
  // a worker, which may also wait for admission.
  absl::StatusOr<AdmissionController::Ticket> ticket = admission_.TryAdmit(data->size());
  if (ticket.ok() && data->size() <= options_.inline_bytes) {
    run(std::move(*ticket));
  } else {
    auto held = std::make_shared<AdmissionController::Ticket>(ticket.ok() ? std::move(*ticket)
                                                                           : AdmissionController::Ticket());
    request_workers_.Post([run = std::move(run), held] { run(std::move(*held)); });
  }
  return reactor;
}

// One AggregateStream call. gRPC threads deliver messages (OnReadDone),
// whose chunks are queued as they arrived, in gRPC's receive buffers; a
// worker from the executor feeds queued chunks to the backend in order, so
// receiving chunk k overlaps with reducing chunk k-1. At most
// max_queued_chunks chunks wait; beyond that reading pauses until the worker
// catches up. Finish() is called exactly once, and only when no worker task is
// running, because OnDone() deletes the reactor.
class AggregatorService::StreamReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  StreamReactor(AggregatorService& service, grpc::CallbackServerContext* context, grpc::ByteBuffer* response)
      : service_(service),
        context_(context),
        response_(response),
        record_(service.metrics_, Metrics::Method::kAggregateStream, service.in_flight_) {
    if (service.draining_.load()) {
      done_ = true;
      record_.Complete(Draining(), 0);
      Finish(ToGrpcStatus(Draining()));
      return;
    }
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_) return;
    if (!ok) {
      // The client closed its side (or the call broke): no more chunks.
      input_ended_ = true;
      if (!worker_active_) FinishLocked(lock);
      return;
    }
    v1::AggregateStreamRequest message;
    absl::StatusOr<SlicedBytes> chunk =
        ParseWithBytesInPlace(message_, v1::AggregateStreamRequest::kChunkFieldNumber, &message);
    // The chunk holds its own references to the receive buffers.
    message_.Clear();
    if (!chunk.ok()) return FailLocked(lock, chunk.status());
    if (!header_seen_) {
      header_seen_ = true;
      if (absl::Status s = ReadHeader(message); !s.ok()) return FailLocked(lock, s);
      // Admission and the backend may wait (for room, for a GPU lane): on a
      // request worker, not on this gRPC thread. The first chunk is read once
      // the backend is ready.
      worker_active_ = true;
      service_.request_workers_.Post([this] { StartBackend(); });
      return;
    }
    if (message.payload_case() != v1::AggregateStreamRequest::kChunk) {
      return FailLocked(lock, absl::InvalidArgumentError(
                                  "header: a stream carries one header, in its first message; every "
                                  "later message must be a chunk."));
    }
    received_bytes_ += chunk->size();
    record_.AddBytes(chunk->size());
    if (received_bytes_ > plan_.array.bytes()) {
      return FailLocked(lock, absl::InvalidArgumentError(absl::StrCat(
                                  "chunk: the stream sent more than the ", plan_.array.bytes(),
                                  " bytes that header.spec.length (", plan_.array.length, " ",
                                  ops::Name(plan_.array.dtype), " elements) announced.")));
    }
    queue_.push_back(std::move(*chunk));
    if (!worker_active_) {
      worker_active_ = true;
      service_.chunk_workers_.Post([this] { Drain(); });
    }
    if (static_cast<int>(queue_.size()) < service_.options_.max_queued_chunks) {
      StartRead(&message_);
    } else {
      read_paused_ = true;
    }
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }

  void OnDone() override { delete this; }

 private:
  absl::Status ReadHeader(const v1::AggregateStreamRequest& message) {
    if (message.payload_case() != v1::AggregateStreamRequest::kHeader) {
      return absl::InvalidArgumentError(
          "chunk: the first message of AggregateStream must be the header (spec and aggregations), "
          "not a chunk.");
    }
    const auto& header = message.header();
    absl::StatusOr<AggregationPlan> plan =
        PlanFromProto(header.spec(), header.aggregations(), std::nullopt, service_.options_.limits);
    if (!plan.ok()) return plan.status();
    plan_ = std::move(*plan);
    aggregations_ = header.aggregations();
    record_.SetOps(OpKinds(plan_));
    aligner_.emplace(ops::SizeOf(plan_.array.dtype));
    return absl::OkStatus();
  }

  // Request worker: takes the stream's share of the in-flight budget and a
  // Reduction from the backend, waiting for either if need be, then starts
  // reading chunks. plan_ is not written after ReadHeader(), so it is read
  // here without the lock.
  void StartBackend() {
    const std::uint64_t hold = std::min(plan_.array.bytes(), service_.options_.stream_hold_bytes);
    absl::StatusOr<AdmissionController::Ticket> ticket = service_.admission_.Admit(hold);
    absl::StatusOr<std::unique_ptr<Reduction>> reduction =
        ticket.ok() ? service_.backend_.Start(plan_) : ticket.status();
    std::unique_lock<std::mutex> lock(mu_);
    worker_active_ = false;
    if (!reduction.ok()) return FailLocked(lock, reduction.status());
    ticket_ = std::move(*ticket);
    reduction_ = std::move(*reduction);
    if (cancelled_) return FinishLocked(lock);
    StartRead(&message_);
  }

  // Worker: feeds queued chunks to the backend until the queue is empty.
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!queue_.empty() && error_.ok() && !cancelled_) {
      SlicedBytes chunk = std::move(queue_.front());
      queue_.pop_front();
      if (read_paused_ && !input_ended_) {
        read_paused_ = false;
        StartRead(&message_);
      }
      lock.unlock();
      absl::Status s = ConsumePieces(chunk, *aligner_, *reduction_);
      lock.lock();
      if (!s.ok() && error_.ok()) error_ = s;
    }
    worker_active_ = false;
    queue_.clear();
    if (input_ended_ || !error_.ok() || cancelled_) FinishLocked(lock);
  }

  void FailLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status) {
    if (error_.ok()) error_ = status;
    if (!worker_active_) FinishLocked(lock);
  }

  // Ends the call; the caller holds mu_ and no worker is running.
  void FinishLocked(std::unique_lock<std::mutex>& lock) {
    if (done_) return;
    done_ = true;
    absl::Status status = Outcome();
    if (status.ok()) {
      absl::StatusOr<AggregationResult> result = reduction_->Finish();
      if (result.ok()) {
        v1::AggregateResponse message;
        ResultToProto(plan_, aggregations_, std::move(*result), record_.Seconds(), &message);
        status = SerializeResponse(message, response_);
      } else {
        status = result.status();
      }
    }
    reduction_.reset();
    ticket_ = AdmissionController::Ticket();
    lock.unlock();
    record_.Complete(status, plan_.array.length);
    Finish(ToGrpcStatus(status));
  }

  absl::Status Outcome() const {
    if (cancelled_ || context_->IsCancelled()) {
      return absl::CancelledError("the client cancelled the stream, or its deadline passed.");
    }
    if (!error_.ok()) return error_;
    if (!header_seen_) {
      return absl::InvalidArgumentError("header: the stream ended before its header (spec and aggregations).");
    }
    if (received_bytes_ < plan_.array.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk: the stream ended early, after ", received_bytes_,
                                                     " of the ", plan_.array.bytes(), " bytes that header.spec.length (",
                                                     plan_.array.length, " elements) announced."));
    }
    return absl::OkStatus();
  }

  AggregatorService& service_;
  grpc::CallbackServerContext* context_;
  grpc::ByteBuffer* response_;
  RequestRecord record_;
  grpc::ByteBuffer message_;  // the read in flight writes here

  std::mutex mu_;
  AggregationPlan plan_;
  AggregationList aggregations_;
  std::optional<ElementAligner> aligner_;
  std::unique_ptr<Reduction> reduction_;
  AdmissionController::Ticket ticket_;
  std::deque<SlicedBytes> queue_;
  std::uint64_t received_bytes_ = 0;
  absl::Status error_;
  bool header_seen_ = false;
  bool worker_active_ = false;
  bool read_paused_ = false;
  bool input_ended_ = false;
  bool cancelled_ = false;
  bool done_ = false;
};

grpc::ServerReadReactor<grpc::ByteBuffer>* AggregatorService::AggregateStream(grpc::CallbackServerContext* context,
                                                                            grpc::ByteBuffer* response) {
  return new StreamReactor(*this, context, response);
}

}  // namespace tally
