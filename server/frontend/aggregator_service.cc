#include "server/frontend/aggregator_service.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/core/validate.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/frontend/call_parts.h"
#include "server/frontend/convert.h"
#include "server/engine/element_aligner.h"
#include "server/frontend/raw_message.h"
#include "server/frontend/request_record.h"
#include "server/frontend/status.h"
#include "server/frontend/stream_reactor.h"
#include "server/frontend/stream_watchdog.h"

namespace tally {

namespace {

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

AggregatorService::AggregatorService(Backend& backend, DatasetStore& datasets, RegionRegistry& regions,
                                     Executor& request_workers,
                                     Executor& chunk_workers, const AuthPolicy& auth, IdentityQuotas& quotas,
                                     Metrics* metrics, ServiceOptions options)
    : backend_(backend),
      datasets_(datasets),
      regions_(regions),
      request_workers_(request_workers),
      chunk_workers_(chunk_workers),
      auth_(auth),
      quotas_(quotas),
      metrics_(metrics),
      options_(std::move(options)),
      admission_(options_.max_inflight_bytes, options_.admission_wait,
                 quotas.inflight_bytes.limit() != 0 ? &quotas.inflight_bytes : nullptr, metrics),
      watchdog_(WatchdogPeriod(options_)) {}

absl::StatusOr<std::string> AggregatorService::BeginCall(const grpc::CallbackServerContext& context,
                                                         RequestRecord& record) {
  if (draining_.load()) return Draining();
  absl::StatusOr<std::string> identity = auth_.Authenticate(context);
  if (identity.ok()) record.SetIdentity(*identity);
  return identity;
}

absl::StatusOr<AdmissionController::Ticket> AggregatorService::AdmitResults(const AggregationPlan& plan,
                                                                           const std::string& identity) {
  const std::uint64_t bytes = ResultBytes(plan);
  if (bytes == 0) return AdmissionController::Ticket();
  return admission_.Admit(bytes, identity);
}

AggregatorService::StreamStart AggregatorService::BeginStream(const grpc::CallbackServerContext& context,
                                                              Metrics::Method method) {
  StreamStart start{.record = RequestRecord(metrics_, method, in_flight_)};
  if (absl::StatusOr<std::string> identity = BeginCall(context, start.record); !identity.ok()) {
    start.refusal = identity.status();
  } else {
    start.caller.identity = std::move(*identity);
    absl::StatusOr<IdentityQuota::Charge> place = quotas_.streams.TryCharge(start.caller.identity, 1);
    if (place.ok()) {
      start.caller.stream = std::move(*place);
    } else {
      start.refusal = place.status();
    }
  }
  return start;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* AggregatorService::StartStream(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response, Metrics::Method method,
    std::unique_ptr<StreamJob> (AggregatorService::*make_job)(const std::string& identity)) {
  StreamStart start = BeginStream(*context, method);
  std::unique_ptr<StreamJob> job = (this->*make_job)(start.caller.identity);
  return new ClientStreamReactor(std::move(job), StreamOptions(), context, response, std::move(start.record),
                                 std::move(start.caller), start.refusal);
}

grpc::ServerUnaryReactor* AggregatorService::Aggregate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* raw_request,
                                                       grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto record = std::make_shared<RequestRecord>(metrics_, Metrics::Method::kAggregate, in_flight_);
  auto finish = [reactor, record](const absl::Status& status, std::uint64_t elements) {
    record->Complete(status, elements);
    reactor->Finish(ToGrpcStatus(status));
  };

  absl::StatusOr<std::string> identity = BeginCall(*context, *record);
  if (!identity.ok()) {
    finish(identity.status(), 0);
    return reactor;
  }
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
  // The request holds its bytes and, while it runs, its results.
  const std::uint64_t held = data->size() + ResultBytes(*plan);

  // `ticket` is empty when admission must still wait for room.
  auto run = [this, context, request, data, response, finish, record, identity = *identity, held,
              plan = std::move(*plan)](AdmissionController::Ticket ticket) {
    if (ticket.bytes() == 0 && held != 0) {
      absl::StatusOr<AdmissionController::Ticket> admitted = admission_.Admit(held, identity);
      if (!admitted.ok()) return finish(admitted.status(), 0);
      ticket = std::move(*admitted);
    }
    if (context->IsCancelled()) return finish(absl::CancelledError("the client cancelled the request."), 0);
    absl::StatusOr<std::unique_ptr<Reduction>> reduction = backend_.Start(plan);
    if (!reduction.ok()) return finish(reduction.status(), 0);
    ElementAligner aligner(rules::SizeOf(plan.array.dtype));
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
  absl::StatusOr<AdmissionController::Ticket> ticket = admission_.TryAdmit(held, *identity);
  if (ticket.ok() && data->size() <= options_.inline_bytes) {
    run(std::move(*ticket));
  } else {
    auto held = std::make_shared<AdmissionController::Ticket>(ticket.ok() ? std::move(*ticket)
                                                                           : AdmissionController::Ticket());
    request_workers_.Post([run = std::move(run), held] { run(std::move(*held)); });
  }
  return reactor;
}

// One AggregateStream call: the header becomes a plan, admission and a
// Reduction are taken on a request worker, and chunks are fed to the
// Reduction re-blocked into whole elements.
class AggregatorService::AggregateStreamJob final : public StreamJob {
 public:
  explicit AggregateStreamJob(AggregatorService& service) : service_(service) {}

  absl::StatusOr<StreamChunk> Parse(const grpc::ByteBuffer& raw, bool* is_header) override {
    absl::StatusOr<SlicedBytes> chunk =
        ParseStreamMessage(raw, v1::AggregateStreamRequest::kChunkFieldNumber, &message_, is_header);
    if (!chunk.ok()) return chunk.status();
    return StreamChunk{.bytes = *std::move(chunk)};
  }

  absl::Status TakeHeader() override {
    if (message_.payload_case() != v1::AggregateStreamRequest::kHeader) {
      return absl::InvalidArgumentError(
          "chunk: the first message of AggregateStream must be the header (spec and aggregations), "
          "not a chunk.");
    }
    const auto& header = message_.header();
    absl::StatusOr<AggregationPlan> plan =
        PlanFromProto(header.spec(), header.aggregations(), std::nullopt, service_.options_.limits);
    if (!plan.ok()) return plan.status();
    plan_ = std::move(*plan);
    aggregations_ = header.aggregations();
    aligner_.emplace(rules::SizeOf(plan_.array.dtype));
    return absl::OkStatus();
  }

  std::uint64_t declared_bytes() const override { return plan_.array.bytes(); }
  std::string Declared() const override {
    return absl::StrCat("header.spec.length (", plan_.array.length, " ", rules::Name(plan_.array.dtype),
                        " elements)");
  }
  std::vector<OpKind> ops() const override { return OpKinds(plan_); }

  // As Aggregate's, its results count in the in-flight budget while it
  // runs: a stream of a few bytes may ask for many rows of wide histograms.
  std::uint64_t result_bytes() const override { return ResultBytes(plan_); }

  // A Reduction (on the cuda backend, a GPU lane), once bytes arrive.
  absl::Status Start() override {
    absl::StatusOr<std::unique_ptr<Reduction>> reduction = service_.backend_.Start(plan_);
    if (!reduction.ok()) return reduction.status();
    reduction_ = std::move(*reduction);
    return absl::OkStatus();
  }

  absl::Status Consume(const StreamChunk& chunk) override {
    return ConsumePieces(chunk.bytes, *aligner_, *reduction_);
  }

  absl::Status Finish(double server_seconds, grpc::ByteBuffer* response) override {
    absl::StatusOr<AggregationResult> result = reduction_->Finish();
    if (!result.ok()) return result.status();
    v1::AggregateResponse message;
    ResultToProto(plan_, aggregations_, std::move(*result), server_seconds, &message);
    return SerializeResponse(message, response);
  }

  std::uint64_t elements() const override { return plan_.array.length; }

 private:
  AggregatorService& service_;
  v1::AggregateStreamRequest message_;
  AggregationPlan plan_;
  AggregationList aggregations_;
  std::optional<ElementAligner> aligner_;
  std::unique_ptr<Reduction> reduction_;
};

grpc::ServerReadReactor<grpc::ByteBuffer>* AggregatorService::AggregateStream(grpc::CallbackServerContext* context,
                                                                            grpc::ByteBuffer* response) {
  return StartStream(context, response, Metrics::Method::kAggregateStream, &AggregatorService::MakeAggregateStreamJob);
}

std::unique_ptr<StreamJob> AggregatorService::MakeAggregateStreamJob(const std::string&) {
  return std::make_unique<AggregateStreamJob>(*this);
}

StreamReactorOptions AggregatorService::StreamOptions() {
  return StreamReactorOptions{.request_workers = &request_workers_,
                              .chunk_workers = &chunk_workers_,
                              .admission = &admission_,
                              .watchdog = &watchdog_,
                              .max_queued_chunks = options_.max_queued_chunks,
                              .idle_timeout = options_.stream_idle_timeout,
                              .min_bytes_per_second = options_.stream_min_bytes_per_second,
                              .rate_window = options_.stream_rate_window};
}

}  // namespace tally
