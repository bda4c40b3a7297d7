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
#include "server/frontend/stream_watchdog.h"

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

// How often the watchdog looks at the streams: a small part of the shortest
// time it enforces, so a stream is ended soon after its time is up, but no
// more often than every 10 ms (0: nothing to enforce).
std::chrono::milliseconds WatchdogPeriod(const ServiceOptions& o) {
  std::chrono::milliseconds shortest{0};
  for (std::chrono::milliseconds t : {o.stream_idle_timeout, o.stream_min_bytes_per_second > 0
                                                                 ? o.stream_rate_window
                                                                 : std::chrono::milliseconds(0)}) {
    if (t.count() > 0 && (shortest.count() == 0 || t < shortest)) shortest = t;
  }
  if (shortest.count() == 0) return shortest;
  return std::clamp(shortest / 8, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
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
      admission_(options_.max_inflight_bytes, options_.admission_wait, metrics),
      watchdog_(WatchdogPeriod(options_)) {}

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
// catches up.
//
// What a stream holds is charged to the bytes that actually arrive: nothing
// is taken at the header; the first chunk brings admission and the backend's
// Reduction (on the cuda backend, a GPU lane); every chunk holds its own
// bytes of the in-flight budget from arrival until the backend has consumed
// it. So a client that sends a header and then nothing, or a byte now and
// then, holds no budget and no lane, and the watchdog ends such streams:
// while the server waits for a message, none may take longer than
// stream_idle_timeout, and the bytes must keep up stream_min_bytes_per_second
// over each stream_rate_window.
//
// Finish() is called exactly once, and only when no worker task is running
// (workers touch the reactor, and OnDone() ends its life).
class AggregatorService::StreamReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer>,
                                               public StreamWatchdog::Watched {
 public:
  using Clock = StreamWatchdog::Clock;

  StreamReactor(AggregatorService& service, grpc::CallbackServerContext* context, grpc::ByteBuffer* response)
      : service_(service),
        context_(context),
        response_(response),
        record_(service.metrics_, Metrics::Method::kAggregateStream, service.in_flight_) {
    service_.watchdog_.Add(this);
    std::unique_lock<std::mutex> lock(mu_);
    if (service.draining_.load()) {
      FailLocked(lock, Draining());
    } else {
      ReadLocked();
    }
  }

  void OnReadDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_) return;
    const Clock::time_point now = Clock::now();
    window_waited_ += now - window_mark_;
    read_since_.reset();
    if (!ok) {
      // The client closed its side (or the call broke): no more chunks.
      input_ended_ = true;
      return EndOfInputLocked(lock);
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
      // Nothing is reserved until the first chunk arrives; the rate is
      // judged from here.
      window_waited_ = Clock::duration::zero();
      window_bytes_ = 0;
      return ReadLocked();
    }
    if (message.payload_case() != v1::AggregateStreamRequest::kChunk) {
      return FailLocked(lock, absl::InvalidArgumentError(
                                  "header: a stream carries one header, in its first message; every "
                                  "later message must be a chunk."));
    }
    received_bytes_ += chunk->size();
    window_bytes_ += chunk->size();
    record_.AddBytes(chunk->size());
    if (received_bytes_ > plan_.array.bytes()) {
      return FailLocked(lock, absl::InvalidArgumentError(absl::StrCat(
                                  "chunk: the stream sent more than the ", plan_.array.bytes(),
                                  " bytes that header.spec.length (", plan_.array.length, " ",
                                  ops::Name(plan_.array.dtype), " elements) announced.")));
    }
    if (absl::Status s = CheckRateLocked(now, window_waited_); !s.ok()) return FailLocked(lock, s);
    if (reduction_ == nullptr) return AdmitOnWorkerLocked(std::move(*chunk));
    absl::StatusOr<AdmissionController::Ticket> ticket = service_.admission_.TryAdmit(chunk->size());
    if (!ticket.ok()) return AdmitOnWorkerLocked(std::move(*chunk));
    QueueLocked(std::move(*chunk), std::move(*ticket));
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }

  void OnDone() override {
    service_.watchdog_.Remove(this);
    Unref();
  }

  void CheckProgress(Clock::time_point now) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_ || !read_since_.has_value()) return;  // not waiting for the client
    const ServiceOptions& o = service_.options_;
    if (o.stream_idle_timeout.count() > 0 && now - *read_since_ >= o.stream_idle_timeout) {
      return FailLocked(lock, absl::DeadlineExceededError(absl::StrCat(
                                  "the stream sent no message for ", o.stream_idle_timeout.count(),
                                  " ms (--stream_idle_timeout_ms); it was ended and what it held was freed.")));
    }
    if (absl::Status s = CheckRateLocked(now, window_waited_ + (now - window_mark_)); !s.ok()) {
      return FailLocked(lock, s);
    }
  }

 private:
  // A received chunk, with its share of the in-flight budget.
  struct Queued {
    SlicedBytes bytes;
    AdmissionController::Ticket ticket;
  };

  void Destroy() override { delete this; }

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

  // Asks the client for its next message; the watchdog times the wait.
  void ReadLocked() {
    read_since_ = window_mark_ = Clock::now();
    StartRead(&message_);
  }

  // Once the header has come, each stream_rate_window of waiting for the
  // client must bring stream_min_bytes_per_second; `waited` is the time
  // waited in this window so far. A window that did is forgotten.
  absl::Status CheckRateLocked(Clock::time_point now, Clock::duration waited) {
    const ServiceOptions& o = service_.options_;
    if (!header_seen_ || o.stream_min_bytes_per_second == 0 || o.stream_rate_window.count() <= 0) {
      return absl::OkStatus();
    }
    if (waited < o.stream_rate_window) return absl::OkStatus();
    const double seconds = std::chrono::duration<double>(waited).count();
    if (static_cast<double>(window_bytes_) < static_cast<double>(o.stream_min_bytes_per_second) * seconds) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the stream sent ", window_bytes_, " bytes in ", absl::SixDigits(seconds),
          " s, below the minimum of ", o.stream_min_bytes_per_second,
          " bytes per second (--stream_min_bytes_per_second); it was ended and what it held was freed."));
    }
    window_waited_ = Clock::duration::zero();
    window_bytes_ = 0;
    window_mark_ = now;
    return absl::OkStatus();
  }

  // The chunk is queued for the backend once admitted (and, for the first
  // chunk, once the backend has given a Reduction): both may wait, so on a
  // request worker, not on this gRPC thread. Reading pauses meanwhile.
  void AdmitOnWorkerLocked(SlicedBytes chunk) {
    admitting_ = true;
    const bool first = reduction_ == nullptr;
    auto held = std::make_shared<SlicedBytes>(std::move(chunk));
    service_.request_workers_.Post([this, held, first] { AdmitAndQueue(std::move(*held), first); });
  }

  void AdmitAndQueue(SlicedBytes chunk, bool first) {
    absl::StatusOr<AdmissionController::Ticket> ticket = service_.admission_.Admit(chunk.size());
    absl::StatusOr<std::unique_ptr<Reduction>> reduction;
    if (first) reduction = ticket.ok() ? service_.backend_.Start(plan_) : ticket.status();
    std::unique_lock<std::mutex> lock(mu_);
    admitting_ = false;
    if (!ticket.ok()) return FailLocked(lock, ticket.status());
    if (first) {
      if (!reduction.ok()) return FailLocked(lock, reduction.status());
      reduction_ = std::move(*reduction);
    }
    if (done_ || cancelled_ || !error_.ok()) return FailLocked(lock, error_);
    QueueLocked(std::move(chunk), std::move(*ticket));
  }

  // Queues an admitted chunk, wakes the worker, and reads on unless the
  // queue is full or the input has ended.
  void QueueLocked(SlicedBytes chunk, AdmissionController::Ticket ticket) {
    queue_.push_back(Queued{std::move(chunk), std::move(ticket)});
    if (!draining_queue_) {
      draining_queue_ = true;
      service_.chunk_workers_.Post([this] { Drain(); });
    }
    if (input_ended_) return;
    if (static_cast<int>(queue_.size()) < service_.options_.max_queued_chunks) {
      ReadLocked();
    } else {
      read_paused_ = true;
    }
  }

  // Worker: feeds queued chunks to the backend until the queue is empty.
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!queue_.empty() && error_.ok() && !cancelled_) {
      Queued chunk = std::move(queue_.front());
      queue_.pop_front();
      if (read_paused_ && !input_ended_) {
        read_paused_ = false;
        ReadLocked();
      }
      lock.unlock();
      absl::Status s = ConsumePieces(chunk.bytes, *aligner_, *reduction_);
      chunk = Queued();  // its bytes are consumed: their share of the budget goes back
      lock.lock();
      if (!s.ok() && error_.ok()) error_ = s;
    }
    draining_queue_ = false;
    queue_.clear();
    if (input_ended_ || !error_.ok() || cancelled_) FinishLocked(lock);
  }

  // The client has closed its side. An empty array has no chunk to start
  // the backend with: it starts now, with an empty one.
  void EndOfInputLocked(std::unique_lock<std::mutex>& lock) {
    if (reduction_ == nullptr && !admitting_ && header_seen_ && error_.ok() && !cancelled_ &&
        plan_.array.bytes() == 0) {
      return AdmitOnWorkerLocked(SlicedBytes());
    }
    FinishLocked(lock);
  }

  void FailLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status) {
    if (error_.ok()) error_ = status;
    FinishLocked(lock);
  }

  // Ends the call unless a worker is running (it finishes the call when it
  // is done); the caller holds mu_.
  void FinishLocked(std::unique_lock<std::mutex>& lock) {
    if (done_ || admitting_ || draining_queue_) return;
    done_ = true;
    read_since_.reset();
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
    queue_.clear();
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
  std::deque<Queued> queue_;
  std::uint64_t received_bytes_ = 0;
  absl::Status error_;
  bool header_seen_ = false;
  bool admitting_ = false;        // AdmitAndQueue is posted or running
  bool draining_queue_ = false;   // Drain is posted or running
  bool read_paused_ = false;
  bool input_ended_ = false;
  bool cancelled_ = false;
  bool done_ = false;
  // The watchdog's view: since when a read has waited for the client, and
  // the current rate window's waiting time (up to window_mark_) and bytes.
  std::optional<Clock::time_point> read_since_;
  Clock::time_point window_mark_;
  Clock::duration window_waited_{};
  std::uint64_t window_bytes_ = 0;
};

grpc::ServerReadReactor<grpc::ByteBuffer>* AggregatorService::AggregateStream(grpc::CallbackServerContext* context,
                                                                            grpc::ByteBuffer* response) {
  return new StreamReactor(*this, context, response);
}

}  // namespace tally
