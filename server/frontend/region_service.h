// The tally.v1.SharedMemory gRPC service: registers clients' shared-memory
// regions (server/engine/regions/) and aggregates, or uploads datasets from,
// the bytes that lie in them, through the same engine seam as every other
// source (an Extent: pinned host or device memory). Its calls are counted
// and drained with the Aggregator service's.
#pragma once

#include "server/core/validate.h"
#include "server/engine/backend.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/engine/regions/region_registry.h"
#include "server/frontend/aggregator_service.h"
#include "server/frontend/executor.h"
#include "server/frontend/identity_quota.h"
#include "server/frontend/region_span.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally {

class Metrics;

class RegionService final : public v1::SharedMemory::CallbackService {
 public:
  // All references outlive the service. Calls that may take a while
  // (registering gigabytes with CUDA, reading a region) run on
  // `request_workers`.
  RegionService(Backend& backend, RegionRegistry& regions, DatasetStore& datasets, AggregatorService& aggregator,
                IdentityQuotas& quotas, Executor& request_workers, Metrics* metrics, RequestLimits limits);

  grpc::ServerUnaryReactor* RegisterHostRegion(grpc::CallbackServerContext* context,
                                               const v1::RegisterHostRegionRequest* request,
                                               v1::RegionInfo* response) override;
  grpc::ServerUnaryReactor* RegisterCudaRegion(grpc::CallbackServerContext* context,
                                               const v1::RegisterCudaRegionRequest* request,
                                               v1::RegionInfo* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* context,
                                             const v1::UnregisterRegionRequest* request,
                                             v1::RegionInfo* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* context, const v1::ListRegionsRequest* request,
                                        v1::ListRegionsResponse* response) override;
  grpc::ServerUnaryReactor* AggregateRegion(grpc::CallbackServerContext* context,
                                            const v1::AggregateRegionRequest* request,
                                            v1::AggregateResponse* response) override;
  grpc::ServerUnaryReactor* PutDatasetFromRegion(grpc::CallbackServerContext* context,
                                                 const v1::PutDatasetFromRegionRequest* request,
                                                 v1::PutDatasetResponse* response) override;

 private:
  // Begins the call as the Aggregator service does (drain, authentication),
  // runs `work` on a request worker with the caller's identity and finishes
  // the call with its status; `work` returns the elements it read (for the
  // metrics).
  using Work = std::function<absl::StatusOr<std::uint64_t>(RequestRecord&, const std::string& identity)>;
  grpc::ServerUnaryReactor* OnWorker(grpc::CallbackServerContext* context, Metrics::Method method, Work work);
  // The region named `name`, and where `length` elements of `dtype` from
  // byte `offset` lie in it; the region is checked to be intact.
  using Span = RegionSpan;
  // `bytes` of the caller's region quota, held by the region once registered.
  absl::StatusOr<std::shared_ptr<void>> ChargeRegion(const std::string& identity, std::uint64_t bytes);
  absl::StatusOr<Span> Locate(const std::string& name, std::uint64_t offset, DType dtype,
                              std::uint64_t length);

  Backend& backend_;
  RegionRegistry& regions_;
  DatasetStore& datasets_;
  AggregatorService& aggregator_;
  IdentityQuotas& quotas_;
  Executor& request_workers_;
  Metrics* metrics_;
  RequestLimits limits_;
};

}  // namespace tally
