#include "server/frontend/region_service.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/frontend/call_parts.h"
#include "server/frontend/convert.h"
#include "server/frontend/dataset_header.h"
#include "server/frontend/request_record.h"
#include "server/frontend/status.h"
#include "server/metrics/metrics.h"

namespace tally {
namespace {

double UnixSeconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

void RegionInfoToProto(const RegionInfo& info, v1::RegionInfo* out) {
  out->set_name(info.name);
  out->set_kind(info.kind == RegionInfo::Kind::kHost ? v1::RegionInfo::KIND_HOST : v1::RegionInfo::KIND_CUDA);
  out->set_shm_name(info.shm_name);
  out->set_offset(info.offset);
  out->set_byte_size(info.bytes);
  out->set_device(info.device);
  out->set_place(info.place);
  out->set_registered_unix_seconds(UnixSeconds(info.registered));
  out->set_queries(info.queries);
}
}  // namespace

RegionService::RegionService(Backend& backend, RegionRegistry& regions, DatasetStore& datasets,
                             AggregatorService& aggregator, IdentityQuotas& quotas, Executor& request_workers,
                             Metrics* metrics, RequestLimits limits)
    : backend_(backend),
      regions_(regions),
      datasets_(datasets),
      aggregator_(aggregator),
      quotas_(quotas),
      request_workers_(request_workers),
      metrics_(metrics),
      limits_(limits) {}

grpc::ServerUnaryReactor* RegionService::OnWorker(grpc::CallbackServerContext* context, Metrics::Method method,
                                                  Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto record = std::make_shared<RequestRecord>(metrics_, method, aggregator_.in_flight());
  absl::StatusOr<std::string> identity = aggregator_.BeginCall(*context, *record);
  if (!identity.ok()) {
    record->Complete(identity.status(), 0);
    reactor->Finish(ToGrpcStatus(identity.status()));
    return reactor;
  }
  request_workers_.Post([reactor, record, identity = *std::move(identity), work = std::move(work)] {
    record->Phase("on worker");
    absl::StatusOr<std::uint64_t> elements = work(*record, identity);
    record->Complete(elements.status(), elements.ok() ? *elements : 0);
    reactor->Finish(ToGrpcStatus(elements.status()));
  });
  return reactor;
}

absl::StatusOr<std::shared_ptr<void>> RegionService::ChargeRegion(const std::string& identity,
                                                                  std::uint64_t bytes) {
  absl::StatusOr<IdentityQuota::Charge> charge = quotas_.region_bytes.TryCharge(identity, bytes);
  if (!charge.ok()) return charge.status();
  return std::make_shared<IdentityQuota::Charge>(std::move(*charge));
}

absl::StatusOr<RegionService::Span> RegionService::Locate(const std::string& name, std::uint64_t offset, DType dtype,
                                                          std::uint64_t length) {
  return LocateInRegion(regions_, name, offset, dtype, length, "offset", "spec.length");
}

grpc::ServerUnaryReactor* RegionService::RegisterHostRegion(grpc::CallbackServerContext* context,
                                                            const v1::RegisterHostRegionRequest* request,
                                                            v1::RegionInfo* response) {
  // Off the gRPC thread: mapping and registering gigabytes with CUDA takes
  // a while (it pins every page).
  return OnWorker(context, Metrics::Method::kRegisterHostRegion,
                  [this, request, response](RequestRecord&, const std::string& identity) -> absl::StatusOr<std::uint64_t> {
                    absl::StatusOr<std::shared_ptr<void>> charge = ChargeRegion(identity, request->byte_size());
                    if (!charge.ok()) return charge.status();
                    absl::StatusOr<RegionInfo> info =
                        regions_.RegisterHost(request->name(), request->shm_name(), request->offset(),
                                              request->byte_size(), *std::move(charge));
                    if (!info.ok()) return info.status();
                    RegionInfoToProto(*info, response);
                    return 0;
                  });
}

grpc::ServerUnaryReactor* RegionService::RegisterCudaRegion(grpc::CallbackServerContext* context,
                                                            const v1::RegisterCudaRegionRequest* request,
                                                            v1::RegionInfo* response) {
  return OnWorker(context, Metrics::Method::kRegisterCudaRegion,
                  [this, request, response](RequestRecord&, const std::string& identity) -> absl::StatusOr<std::uint64_t> {
                    absl::StatusOr<std::shared_ptr<void>> charge = ChargeRegion(identity, request->byte_size());
                    if (!charge.ok()) return charge.status();
                    const std::string& handle = request->ipc_handle();
                    absl::StatusOr<RegionInfo> info = regions_.RegisterCuda(
                        request->name(),
                        std::span<const std::byte>(reinterpret_cast<const std::byte*>(handle.data()), handle.size()),
                        request->device(), request->byte_size(), *std::move(charge));
                    if (!info.ok()) return info.status();
                    RegionInfoToProto(*info, response);
                    return 0;
                  });
}

grpc::ServerUnaryReactor* RegionService::UnregisterRegion(grpc::CallbackServerContext* context,
                                                          const v1::UnregisterRegionRequest* request,
                                                          v1::RegionInfo* response) {
  // On a worker: when no query holds the region, unregistering unpins and
  // unmaps it here.
  return OnWorker(context, Metrics::Method::kUnregisterRegion,
                  [this, request, response](RequestRecord&, const std::string&) -> absl::StatusOr<std::uint64_t> {
                    absl::StatusOr<RegionInfo> info = regions_.Unregister(request->name());
                    if (!info.ok()) return info.status();
                    RegionInfoToProto(*info, response);
                    return 0;
                  });
}

grpc::ServerUnaryReactor* RegionService::ListRegions(grpc::CallbackServerContext* context,
                                                     const v1::ListRegionsRequest*,
                                                     v1::ListRegionsResponse* response) {
  RequestRecord record(metrics_, Metrics::Method::kListRegions, aggregator_.in_flight());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::StatusOr<std::string> identity = aggregator_.BeginCall(*context, record); !identity.ok()) {
    record.Complete(identity.status(), 0);
    reactor->Finish(ToGrpcStatus(identity.status()));
    return reactor;
  }
  for (const RegionInfo& info : regions_.List()) RegionInfoToProto(info, response->add_regions());
  response->set_registered_bytes(regions_.charged_bytes());
  response->set_limit_bytes(regions_.max_bytes());
  record.Complete(absl::OkStatus(), 0);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* RegionService::AggregateRegion(grpc::CallbackServerContext* context,
                                                         const v1::AggregateRegionRequest* request,
                                                         v1::AggregateResponse* response) {
  return OnWorker(context, Metrics::Method::kAggregateRegion,
                  [this, context, request, response](RequestRecord& record,
                                                     const std::string& identity) -> absl::StatusOr<std::uint64_t> {
                    absl::StatusOr<DType> dtype = DTypeFromProto(request->spec().dtype());
                    if (!dtype.ok()) return dtype.status();
                    if (!request->spec().has_length()) {
                      return absl::InvalidArgumentError(
                          "spec.length: AggregateRegion needs the array's length in elements.");
                    }
                    absl::StatusOr<Span> span =
                        Locate(request->region(), request->offset(), *dtype, request->spec().length());
                    if (!span.ok()) return span.status();
                    absl::StatusOr<AggregationPlan> plan =
                        PlanOverElements(*dtype, request->spec().length(), request->spec().row_length(),
                                         request->spec().offsets(), "spec.offsets", request->spec().validity(),
                                         "spec.validity", request->aggregations(), limits_,
                                         "array");
                    if (!plan.ok()) return plan.status();
                    record.SetOps(OpKinds(*plan));
                    absl::StatusOr<AdmissionController::Ticket> results = aggregator_.AdmitResults(*plan, identity);
                    if (!results.ok()) return results.status();
                    record.Phase("planned");
                    absl::StatusOr<AggregationResult> result = ReduceExtent(
                        backend_, *plan, span->bytes, [context] { return context->IsCancelled(); }, &record);
                    // A truncation while the bytes were read makes whatever was read worthless.
                    if (absl::Status s = span->region->Intact(); !s.ok()) return s;
                    if (!result.ok()) return result.status();
                    ResultToProto(*plan, request->aggregations(), std::move(*result), record.Seconds(), response);
                    record.Phase("answered");
                    return plan->array.length;
                  });
}

grpc::ServerUnaryReactor* RegionService::PutDatasetFromRegion(grpc::CallbackServerContext* context,
                                                              const v1::PutDatasetFromRegionRequest* request,
                                                              v1::PutDatasetResponse* response) {
  return OnWorker(context, Metrics::Method::kPutDatasetFromRegion,
                  [this, request, response](RequestRecord& record,
                                            const std::string& identity) -> absl::StatusOr<std::uint64_t> {
                    absl::StatusOr<DatasetHeader> header = DatasetHeaderFromProto(request->dataset(), "dataset.");
                    if (!header.ok()) return header.status();
                    absl::StatusOr<Span> span = Locate(request->region(), request->offset(), header->dtype,
                                                       header->length);
                    if (!span.ok()) return span.status();
                    absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> upload =
                        BeginChargedUpload(datasets_, quotas_, identity, *header);
                    if (!upload.ok()) return upload.status();
                    if (absl::Status s = (*upload)->Append(span->bytes); !s.ok()) return s;
                    // Host bytes were read by now (the cpu backend copies at once; the
                    // cuda backend's copy reads pages CUDA holds pinned, which a
                    // truncation cannot take): a truncation shows here, before the
                    // dataset is published.
                    if (absl::Status s = span->region->Intact(); !s.ok()) return s;
                    absl::StatusOr<DatasetInfo> info = (*upload)->Commit();
                    if (!info.ok()) return info.status();
                    DatasetInfoToProto(*info, response->mutable_dataset());
                    response->set_server_seconds(record.Seconds());
                    return header->length;
                  });
}

}  // namespace tally
