// The tally.v1.Aggregator gRPC service (callback API): turns requests into
// plans, feeds the array's bytes to a Reduction of the configured backend,
// and answers with the results. Validation errors never reach the backend.
// The methods that carry arrays take their messages raw, so that the array's
// bytes go to the backend from gRPC's receive buffers, never copied into a
// protobuf string. The resident-dataset methods are in dataset_calls.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "server/core/validate.h"
#include "server/engine/backend.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/engine/regions/region_registry.h"
#include "server/frontend/admission.h"
#include "server/frontend/auth_policy.h"
#include "server/frontend/executor.h"
#include "server/frontend/request_record.h"
#include "server/frontend/stream_reactor.h"
#include "server/frontend/stream_watchdog.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally {

class Metrics;

struct ServiceOptions {
  RequestLimits limits;
  // Largest array Aggregate accepts inline; larger ones must be streamed.
  std::uint64_t max_unary_bytes = std::uint64_t{64} << 20;
  // Unary requests up to this size run on the gRPC thread that received
  // them: a hop to a worker would cost more than the work.
  std::uint64_t inline_bytes = std::uint64_t{256} << 10;
  // Chunks of one stream waiting for the backend before reading pauses.
  // Bounds a stream's memory to about (this + 2) chunks.
  int max_queued_chunks = 2;
  // Bytes that requests in progress may hold (0: no limit). A unary request
  // holds its array's size; a stream holds each chunk's bytes from their
  // arrival until the backend has consumed them (a few chunks at most), so
  // a stream that sends nothing holds nothing. Queries also hold their
  // results' bytes while they run (a stream from its first chunk).
  std::uint64_t max_inflight_bytes = std::uint64_t{4} << 30;
  // How long a request waits for room before RESOURCE_EXHAUSTED.
  std::chrono::milliseconds admission_wait{2000};
  // A stream whose client sends no message for this long, while the server
  // waits for one, is ended with DEADLINE_EXCEEDED (0: never). Long enough
  // for a 4 MiB chunk over a 1 MiB/s link; short enough that streams left
  // open by idle or dead clients go within seconds.
  std::chrono::milliseconds stream_idle_timeout{5000};
  // After its header, a stream must bring at least this many bytes per
  // second over each stream_rate_window the server spends waiting for it,
  // or it is ended with DEADLINE_EXCEEDED (0: no minimum): a trickle of a
  // byte now and then must not keep a GPU lane, or the stream, forever.
  std::uint64_t stream_min_bytes_per_second = std::uint64_t{64} << 10;
  std::chrono::milliseconds stream_rate_window{10000};
  // Most groups one GroupBy may make (RESOURCE_EXHAUSTED naming
  // --max_groups past it). A group costs its keys and each aggregation's
  // values while the answer is written.
  std::uint64_t max_groups = std::uint64_t{1} << 24;
};

namespace detail {
using AggregatorBase = v1::Aggregator::WithRawCallbackMethod_Aggregate<
    v1::Aggregator::WithRawCallbackMethod_AggregateStream<v1::Aggregator::WithRawCallbackMethod_PutDataset<
        v1::Aggregator::WithCallbackMethod_AggregateDataset<v1::Aggregator::WithCallbackMethod_ListDatasets<
            v1::Aggregator::WithCallbackMethod_DescribeDataset<
                v1::Aggregator::WithCallbackMethod_DeleteDataset<
                    v1::Aggregator::WithCallbackMethod_GroupBy<
                        v1::Aggregator::WithRawCallbackMethod_GroupByStream<v1::Aggregator::Service>>>>>>>>>;
}  // namespace detail

class AggregatorService final : public detail::AggregatorBase {
 public:
  // Two pools of workers, so that requests waiting for room can never hold
  // up the streams whose progress frees it: `request_workers` run unary
  // requests and wait for admission and backend lanes; `chunk_workers` feed
  // stream chunks to the backend and never wait for admission.
  // `auth` says who each call acts as; `quotas` bound what each identity
  // holds. `metrics` may be null. All references must outlive the service.
  AggregatorService(Backend& backend, DatasetStore& datasets, RegionRegistry& regions, Executor& request_workers,
                    Executor& chunk_workers, const AuthPolicy& auth, IdentityQuotas& quotas, Metrics* metrics,
                    ServiceOptions options);

  // `request` is a serialized v1::AggregateRequest, `response` receives a
  // serialized v1::AggregateResponse.
  grpc::ServerUnaryReactor* Aggregate(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;

  // Reads serialized v1::AggregateStreamRequest messages.
  grpc::ServerReadReactor<grpc::ByteBuffer>* AggregateStream(grpc::CallbackServerContext* context,
                                                             grpc::ByteBuffer* response) override;

  // Reads serialized v1::PutDatasetRequest messages.
  grpc::ServerReadReactor<grpc::ByteBuffer>* PutDataset(grpc::CallbackServerContext* context,
                                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* AggregateDataset(grpc::CallbackServerContext* context,
                                             const v1::AggregateDatasetRequest* request,
                                             v1::AggregateResponse* response) override;
  grpc::ServerUnaryReactor* ListDatasets(grpc::CallbackServerContext* context, const v1::ListDatasetsRequest* request,
                                         v1::ListDatasetsResponse* response) override;
  grpc::ServerUnaryReactor* DescribeDataset(grpc::CallbackServerContext* context,
                                            const v1::DescribeDatasetRequest* request,
                                            v1::DatasetInfo* response) override;
  grpc::ServerUnaryReactor* DeleteDataset(grpc::CallbackServerContext* context,
                                          const v1::DeleteDatasetRequest* request,
                                          v1::DeleteDatasetResponse* response) override;

  // The table in the request; the answer in one or more messages
  // (group_by_call.cc).
  grpc::ServerWriteReactor<v1::GroupByResponse>* GroupBy(grpc::CallbackServerContext* context,
                                                         const v1::GroupByRequest* request) override;
  // Reads serialized v1::GroupByStreamRequest messages, writes serialized
  // v1::GroupByResponse ones (group_by_stream.cc).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GroupByStream(
      grpc::CallbackServerContext* context) override;
  // From now on new calls are refused with UNAVAILABLE; calls in progress go on.
  void BeginDrain() { draining_.store(true); }
  // True once every call in progress has finished; false at the deadline.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) { return in_flight_.WaitIdle(deadline); }
  // For the server's other services: their calls are counted and drained
  // with this one's.
  InFlightTracker& in_flight() { return in_flight_; }
  // UNAVAILABLE, for calls that arrive while the server drains.
  static absl::Status Draining();
  // Where every call begins, this service's and the others': refused while
  // draining, then authenticated. The identity is recorded on `record` and
  // returned.
  absl::StatusOr<std::string> BeginCall(const grpc::CallbackServerContext& context, RequestRecord& record);
  // Room under --max_inflight_bytes (and the identity's quota) for a
  // query's results (ResultBytes), for queries of bytes that are already
  // here (a dataset, a region); held until the response is written. Waits
  // up to --admission_wait_ms, then RESOURCE_EXHAUSTED. (AggregateStream's
  // are admitted with its first chunk: StreamJob::result_bytes.)
  [[nodiscard]] absl::StatusOr<AdmissionController::Ticket> AdmitResults(const AggregationPlan& plan,
                                                                         const std::string& identity);

 private:
  // How every streaming call begins: BeginCall, then a place under the
  // stream quota; `refusal`, when not OK, is why the call ends at once.
  struct StreamStart {
    RequestRecord record;
    StreamCaller caller;
    absl::Status refusal;
  };
  StreamStart BeginStream(const grpc::CallbackServerContext& context, Metrics::Method method);
  // A client-streaming call's reactor, begun so, running the job.
  grpc::ServerReadReactor<grpc::ByteBuffer>* StartStream(grpc::CallbackServerContext* context,
                                                         grpc::ByteBuffer* response, Metrics::Method method,
                                                         std::unique_ptr<StreamJob> (AggregatorService::*make_job)(
                                                             const std::string& identity));
  std::unique_ptr<StreamJob> MakeAggregateStreamJob(const std::string& identity);
  std::unique_ptr<StreamJob> MakePutDatasetJob(const std::string& identity);
  StreamReactorOptions StreamOptions();

  class AggregateStreamJob;
  class PutDatasetJob;
  class GroupByStreamJob;

  Backend& backend_;
  DatasetStore& datasets_;
  RegionRegistry& regions_;  // GroupBy's region columns
  Executor& request_workers_;
  Executor& chunk_workers_;
  const AuthPolicy& auth_;
  IdentityQuotas& quotas_;
  Metrics* metrics_;
  ServiceOptions options_;
  AdmissionController admission_;
  InFlightTracker in_flight_;
  std::atomic<bool> draining_{false};
  // Last: its thread stops before anything a check might use goes away.
  StreamWatchdog watchdog_;
};

}  // namespace tally
