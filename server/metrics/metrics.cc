// Metrics: builds every tally_ family in the constructor and records into
// cached children afterwards.
#include "server/metrics/metrics.h"

#include <algorithm>
#include <exception>
#include <sstream>
#include <string_view>

#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "tally/rules/agg/registry.h"

namespace tally {
namespace {

// grpc::StatusCode's canonical names, indexed by code.
constexpr const char* kCodeNames[] = {
    "OK",  // 0
    "CANCELLED",  // 1
    "UNKNOWN",  // 2
    "INVALID_ARGUMENT",  // 3
    "DEADLINE_EXCEEDED",  // 4
    "NOT_FOUND",  // 5
    "ALREADY_EXISTS",  // 6
    "PERMISSION_DENIED",  // 7
    "RESOURCE_EXHAUSTED",  // 8
    "FAILED_PRECONDITION",  // 9
    "ABORTED",  // 10
    "OUT_OF_RANGE",  // 11
    "UNIMPLEMENTED",  // 12
    "INTERNAL",  // 13
    "UNAVAILABLE",  // 14
    "DATA_LOSS",  // 15
    "UNAUTHENTICATED",  // 16
};

prometheus::Histogram::BucketBoundaries Bounds(std::span<const double> b) {
  return prometheus::Histogram::BucketBoundaries(b.begin(), b.end());
}

int ClampCode(int code) { return code >= 0 && code < 17 ? code : 2; }  // 2: UNKNOWN

}  // namespace

const char* Metrics::CodeName(int grpc_status_code) {
  return kCodeNames[ClampCode(grpc_status_code)];
}

const char* Metrics::MethodName(Method method) {
  switch (method) {
    case Method::kAggregate: return "Aggregate";
    case Method::kAggregateStream: return "AggregateStream";
    case Method::kPutDataset: return "PutDataset";
    case Method::kAggregateDataset: return "AggregateDataset";
    case Method::kListDatasets: return "ListDatasets";
    case Method::kDescribeDataset: return "DescribeDataset";
    case Method::kDeleteDataset: return "DeleteDataset";
    case Method::kRegisterHostRegion: return "RegisterHostRegion";
    case Method::kRegisterCudaRegion: return "RegisterCudaRegion";
    case Method::kUnregisterRegion: return "UnregisterRegion";
    case Method::kListRegions: return "ListRegions";
    case Method::kAggregateRegion: return "AggregateRegion";
    case Method::kPutDatasetFromRegion: return "PutDatasetFromRegion";
    case Method::kGroupBy: return "GroupBy";
    case Method::kGroupByStream: return "GroupByStream";
  }
  return "unknown";
}

bool Metrics::CarriesOps(Method method) {
  return method == Method::kAggregate || method == Method::kAggregateStream ||
         method == Method::kAggregateDataset || method == Method::kAggregateRegion || method == Method::kGroupBy ||
         method == Method::kGroupByStream;
}

Metrics::Metrics(const Options& options)
    : registry_(std::make_shared<prometheus::Registry>()),
      max_identities_(std::max(0, options.max_identities)),
      identity_labels_{kAnonymousLabel, kOtherLabel} {
  const std::size_t identity_slots = static_cast<std::size_t>(max_identities_) + 2;
  request_children_.reset(new std::atomic<prometheus::Counter*>[identity_slots * kNumMethods * kNumCodes]());
  received_children_.reset(new std::atomic<prometheus::Counter*>[identity_slots]());
  identity_labels_.reserve(identity_slots);
  // The backend is a constant label on every family: one value per process,
  // so it adds no series, and every panel can be split by it without a join.
  // The device description is long and free-form; it lives on build_info
  // only (join on instance when needed). Per-GPU families carry the ordinal.
  const prometheus::Labels constant = {{"backend", options.backend}};
  auto& r = *registry_;

  prometheus::BuildGauge()
      .Name("tally_build_info")
      .Help("Always 1; the labels say which tally build, backend and device this is.")
      .Register(r)
      .Add({{"version", options.version}, {"backend", options.backend}, {"device", options.device}})
      .Set(1);

  requests_ = &prometheus::BuildCounter()
                   .Name("tally_requests_total")
                   .Help("Requests finished, by RPC method, gRPC status code and caller identity "
                         "(\"anonymous\" without authentication, \"other\" past --metrics_max_identities).")
                   .Labels(constant)
                   .Register(r);
  aggregations_ = &prometheus::BuildCounter()
                       .Name("tally_aggregations_total")
                       .Help("Aggregations requested, by RPC method, op and the gRPC status code "
                             "of the request that carried them (a request with n ops counts n).")
                       .Labels(constant)
                       .Register(r);
  auto& duration = prometheus::BuildHistogram()
                       .Name("tally_request_duration_seconds")
                       .Help("Time from a request's first byte to its response, by RPC method.")
                       .Labels(constant)
                       .Register(r);
  auto& in_flight = prometheus::BuildGauge()
                        .Name("tally_requests_in_flight")
                        .Help("Requests started and not yet finished, by RPC method.")
                        .Labels(constant)
                        .Register(r);
  for (int m = 0; m < kNumMethods; ++m) {
    const auto method = static_cast<Method>(m);
    duration_[m] = &duration.Add({{"method", MethodName(method)}}, Bounds(kDurationBuckets));
    in_flight_[m] = &in_flight.Add({{"method", MethodName(method)}});
    // Successful series exist from the start, so rate() and dashboards see 0
    // rather than nothing before the first request.
    RequestCounter(m, 0, kAnonymousIdentity);
    if (!CarriesOps(method)) continue;
    for (int op = 0; op < rules::kNumOpKinds; ++op) OpCounter(m, op, 0);
  }

  admission_rejections_ = &prometheus::BuildCounter()
                               .Name("tally_admission_rejections_total")
                               .Help("Requests turned away by admission control (also counted "
                                     "in tally_requests_total as RESOURCE_EXHAUSTED).")
                               .Labels(constant)
                               .Register(r)
                               .Add({});
  {
    auto& routed = prometheus::BuildCounter()
                       .Name("tally_routed_requests_total")
                       .Help("Requests of host bytes routed by estimated cost (--routing=cost), by the path "
                             "that ran them and why: cost (the estimate) or lanes_busy (no GPU lane was free).")
                       .Labels(constant)
                       .Register(r);
    routed_[static_cast<std::size_t>(Route::kGpu)] = &routed.Add({{"path", "gpu"}, {"reason", "cost"}});
    routed_[static_cast<std::size_t>(Route::kCpuByCost)] = &routed.Add({{"path", "cpu"}, {"reason", "cost"}});
    routed_[static_cast<std::size_t>(Route::kCpuLanesBusy)] =
        &routed.Add({{"path", "cpu"}, {"reason", "lanes_busy"}});
  }
  received_bytes_ = &prometheus::BuildCounter()
                         .Name("tally_received_bytes_total")
                         .Help("Array payload bytes received, by caller identity.")
                         .Labels(constant)
                         .Register(r);
  ReceivedCounter(kAnonymousIdentity);
  quota_rejections_ = &prometheus::BuildCounter()
                           .Name("tally_quota_rejections_total")
                           .Help("Requests refused because their identity was over a quota, by the "
                                 "quota's flag (also counted in tally_requests_total as RESOURCE_EXHAUSTED).")
                           .Labels(constant)
                           .Register(r);
  for (const char* flag : kQuotaFlags) quota_rejections_->Add({{"quota", std::string(flag + 2)}});
  processed_elements_ = &prometheus::BuildCounter()
                             .Name("tally_processed_elements_total")
                             .Help("Array elements aggregated.")
                             .Labels(constant)
                             .Register(r)
                             .Add({});
  in_flight_bytes_ = &prometheus::BuildGauge()
                          .Name("tally_in_flight_bytes")
                          .Help("Payload bytes held by requests in progress.")
                          .Labels(constant)
                          .Register(r)
                          .Add({});
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("tally_queue_wait_seconds")
                     .Help("Time work waited for a worker, stream or pinned buffer.")
                     .Labels(constant)
                     .Register(r)
                     .Add({}, Bounds(kQueueWaitBuckets));
  pinned_capacity_ = &prometheus::BuildGauge()
                          .Name("tally_pinned_pool_capacity_bytes")
                          .Help("Size of the pinned host memory pool.")
                          .Labels(constant)
                          .Register(r)
                          .Add({});
  pinned_used_ = &prometheus::BuildGauge()
                      .Name("tally_pinned_pool_used_bytes")
                      .Help("Pinned host memory handed out to requests.")
                      .Labels(constant)
                      .Register(r)
                      .Add({});

  h2d_bytes_ = &prometheus::BuildCounter()
                    .Name("tally_host_to_device_bytes_total")
                    .Help("Bytes copied from host to device, by CUDA device ordinal.")
                    .Labels(constant)
                    .Register(r);
  h2d_direct_bytes_ = &prometheus::BuildCounter()
                          .Name("tally_host_to_device_direct_bytes_total")
                          .Help("Of tally_host_to_device_bytes_total, the bytes copied from where gRPC received "
                                "them (the pinned receive arena, --pinned_receive_bytes), with no CPU copy into "
                                "pinned staging first; by CUDA device ordinal.")
                          .Labels(constant)
                          .Register(r);
  h2d_seconds_ = &prometheus::BuildCounter()
                      .Name("tally_host_to_device_seconds_total")
                      .Help("Time spent in host-to-device copies, by CUDA device ordinal.")
                      .Labels(constant)
                      .Register(r);
  kernel_seconds_ = &prometheus::BuildCounter()
                         .Name("tally_kernel_seconds_total")
                         .Help("Time spent in aggregation kernels, by CUDA device ordinal.")
                         .Labels(constant)
                         .Register(r);
  device_memory_used_ = &prometheus::BuildGauge()
                             .Name("tally_device_memory_used_bytes")
                             .Help("Device memory in use, by CUDA device ordinal and model name.")
                             .Labels(constant)
                             .Register(r);
  device_memory_capacity_ = &prometheus::BuildGauge()
                                 .Name("tally_device_memory_capacity_bytes")
                                 .Help("Device memory in total, by CUDA device ordinal and model name.")
                                 .Labels(constant)
                                 .Register(r);
  device_serving_ = &prometheus::BuildGauge()
                         .Name("tally_device_serving")
                         .Help("1 while a device (\"cuda:1\") takes new requests, 0 once it is lost; the "
                               "server keeps serving while any device does.")
                         .Labels(constant)
                         .Register(r);

  resident_bytes_ = &prometheus::BuildGauge()
                         .Name("tally_dataset_resident_bytes")
                         .Help("Bytes of resident datasets charged to a place (\"cuda:0\", \"host\"): "
                               "published, uploading, or deleted and still being read.")
                         .Labels(constant)
                         .Register(r);
  resident_datasets_ = &prometheus::BuildGauge()
                            .Name("tally_datasets")
                            .Help("Resident datasets published, by place.")
                            .Labels(constant)
                            .Register(r);
  resident_limit_ = &prometheus::BuildGauge()
                         .Name("tally_dataset_limit_bytes")
                         .Help("Resident bytes allowed per place (--max_dataset_bytes; 0: no limit).")
                         .Labels(constant)
                         .Register(r);
  auto dataset_counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Labels(constant).Register(r).Add({});
  };
  dataset_uploads_ = dataset_counter("tally_dataset_uploads_total", "Dataset uploads committed.");
  dataset_queries_ = dataset_counter("tally_dataset_queries_total", "Queries started on resident datasets.");
  dataset_evictions_ = dataset_counter("tally_dataset_evictions_total",
                                       "Datasets evicted, least recently used first, to fit an upload.");
  dataset_expiries_ = dataset_counter("tally_dataset_expiries_total", "Datasets removed when their TTL ran out.");
  dataset_deletions_ = dataset_counter("tally_dataset_deletions_total", "Datasets deleted by a client.");

  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Labels(constant).Register(r).Add({});
  };
  regions_ = gauge("tally_regions", "Shared-memory regions registered (host and CUDA).");
  region_bytes_ = gauge("tally_region_bytes",
                        "Bytes of shared-memory regions charged against --max_region_bytes: registered, or "
                        "unregistered and still being read.");
  region_limit_ = gauge("tally_region_limit_bytes", "Registered region bytes allowed (--max_region_bytes; 0: no limit).");
  region_queries_ = dataset_counter("tally_region_queries_total",
                                    "Queries (AggregateRegion, PutDatasetFromRegion) started on shared-memory regions.");
  const auto by_path = [&](const char* name, const char* help, std::array<prometheus::Counter*, 2>& out) {
    auto& family = prometheus::BuildCounter().Name(name).Help(help).Labels(constant).Register(r);
    out[0] = &family.Add({{"path", "host"}});
    out[1] = &family.Add({{"path", "device"}});
  };
  by_path("tally_group_by_requests_total",
          "GroupBy and GroupByStream requests answered, by where the rows were grouped: device (ordered by "
          "key on the GPU holding the columns) or host.",
          group_by_requests_);
  by_path("tally_group_by_rows_total", "Table rows GroupBy requests grouped, by path.", group_by_rows_);
  by_path("tally_group_by_groups_total", "Groups GroupBy requests answered, by path.", group_by_groups_);
}

Metrics::~Metrics() = default;

absl::Status Metrics::Serve(const std::string& address) {
  if (address.empty()) return absl::OkStatus();
  if (exposer_) return absl::FailedPreconditionError("metrics exposer already serving");
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError("--metrics_listen must be HOST:PORT, got \"" + address +
                                      "\"");
  }
  try {
    // One thread is plenty for a scrape every few seconds.
    exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError("cannot serve metrics on " + address + ": " + e.what());
  }
  exposer_->RegisterCollectable(registry_);
  return absl::OkStatus();
}

int Metrics::port() const {
  if (!exposer_) return 0;
  const auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

std::string Metrics::Scrape() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

int Metrics::IdentitySlot(const std::string& identity) {
  if (identity == kAnonymousLabel) return kAnonymousIdentity;
  if (identity == kOtherLabel) return kOtherIdentity;
  std::lock_guard<std::mutex> lock(identity_mutex_);
  if (const auto it = identity_slots_.find(identity); it != identity_slots_.end()) return it->second;
  if (static_cast<int>(identity_labels_.size()) - 2 >= max_identities_) return kOtherIdentity;
  const int slot = static_cast<int>(identity_labels_.size());
  identity_labels_.push_back(identity);
  identity_slots_.emplace(identity, slot);
  return slot;
}

// Slots are only ever appended (the vector's room is reserved up front), so
// a label read here is never moved while another slot is added.
const std::string& Metrics::IdentityLabel(int identity) {
  std::lock_guard<std::mutex> lock(identity_mutex_);
  if (identity < 0 || identity >= static_cast<int>(identity_labels_.size())) return identity_labels_[kOtherIdentity];
  return identity_labels_[static_cast<std::size_t>(identity)];
}

prometheus::Counter& Metrics::ReceivedCounter(int identity) {
  if (identity < 0 || identity >= max_identities_ + 2) identity = kOtherIdentity;
  auto& slot = received_children_[static_cast<std::size_t>(identity)];
  prometheus::Counter* c = slot.load(std::memory_order_acquire);
  if (c == nullptr) {
    c = &received_bytes_->Add({{"identity", IdentityLabel(identity)}});
    slot.store(c, std::memory_order_release);
  }
  return *c;
}

prometheus::Counter& Metrics::RequestCounter(int method, int code, int identity) {
  if (identity < 0 || identity >= max_identities_ + 2) identity = kOtherIdentity;
  auto& slot = request_children_[(static_cast<std::size_t>(identity) * kNumMethods + method) * kNumCodes + code];
  prometheus::Counter* c = slot.load(std::memory_order_acquire);
  if (c == nullptr) {
    c = &requests_->Add({{"method", MethodName(static_cast<Method>(method))},
                         {"code", kCodeNames[code]},
                         {"identity", IdentityLabel(identity)}});
    slot.store(c, std::memory_order_release);
  }
  return *c;
}

prometheus::Counter& Metrics::OpCounter(int method, int op, int code) {
  auto& slot = op_children_[(method * rules::kNumOpKinds + op) * kNumCodes + code];
  prometheus::Counter* c = slot.load(std::memory_order_acquire);
  if (c == nullptr) {
    c = &aggregations_->Add({{"method", MethodName(static_cast<Method>(method))},
                             {"op", std::string(rules::agg::kFunctions[static_cast<std::size_t>(op)].name)},
                             {"code", kCodeNames[code]}});
    slot.store(c, std::memory_order_release);
  }
  return *c;
}

void Metrics::RequestStarted(Method method) { in_flight_[static_cast<int>(method)]->Increment(); }

void Metrics::RequestFinished(Method method, std::span<const rules::OpKind> op_kinds,
                              int grpc_status_code, double seconds, int identity) {
  const int m = static_cast<int>(method);
  const int code = ClampCode(grpc_status_code);
  in_flight_[m]->Decrement();
  RequestCounter(m, code, identity).Increment();
  for (const rules::OpKind k : op_kinds) {
    const int op = static_cast<int>(k);
    if (op >= 0 && op < rules::kNumOpKinds) OpCounter(m, op, code).Increment();
  }
  duration_[m]->Observe(seconds);
}

void Metrics::AdmissionRejected() { admission_rejections_->Increment(); }

void Metrics::BytesReceived(std::uint64_t bytes, int identity) {
  ReceivedCounter(identity).Increment(static_cast<double>(bytes));
}

void Metrics::QuotaRejected(const std::string& flag) {
  // A handful of quotas, each refused rarely: the family's own lookup will do.
  const std::size_t name = flag.find_first_not_of('-');
  quota_rejections_->Add({{"quota", name == std::string::npos ? flag : flag.substr(name)}}).Increment();
}

void Metrics::ElementsProcessed(std::uint64_t elements) {
  processed_elements_->Increment(static_cast<double>(elements));
}

void Metrics::InFlightBytes(std::int64_t delta) {
  in_flight_bytes_->Increment(static_cast<double>(delta));
}

void Metrics::QueueWait(double seconds) { queue_wait_->Observe(seconds); }

void Metrics::Routed(Route route) { routed_[static_cast<std::size_t>(route)]->Increment(); }

Metrics::DeviceChildren Metrics::Device(int device) {
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    if (const DeviceChildren* d = device_children_[device].load(std::memory_order_acquire)) {
      return *d;
    }
  }
  const prometheus::Labels labels = {{"device", std::to_string(device)}};
  DeviceChildren d{&h2d_bytes_->Add(labels), &h2d_seconds_->Add(labels), &kernel_seconds_->Add(labels),
                   &h2d_direct_bytes_->Add(labels)};
  if (cached) {
    std::lock_guard<std::mutex> lock(device_mutex_);
    if (device_children_[device].load(std::memory_order_relaxed) == nullptr) {
      device_storage_[device] = d;
      device_children_[device].store(&device_storage_[device], std::memory_order_release);
    }
  }
  return d;
}

void Metrics::HostToDevice(int device, std::uint64_t bytes, double seconds) {
  const DeviceChildren d = Device(device);
  d.h2d_bytes->Increment(static_cast<double>(bytes));
  d.h2d_seconds->Increment(seconds);
}

void Metrics::HostToDeviceDirect(int device, std::uint64_t bytes) {
  Device(device).h2d_direct_bytes->Increment(static_cast<double>(bytes));
}

void Metrics::KernelTime(int device, double seconds) { Device(device).kernel_seconds->Increment(seconds); }

void Metrics::SetDeviceMemory(int device, const std::string& name, std::uint64_t used,
                              std::uint64_t total) {
  // Called from a periodic poll, not per request: the locked lookup is fine.
  const prometheus::Labels labels = {{"device", std::to_string(device)}, {"device_name", name}};
  device_memory_used_->Add(labels).Set(static_cast<double>(used));
  device_memory_capacity_->Add(labels).Set(static_cast<double>(total));
}

void Metrics::SetDeviceServing(const std::string& place, bool serving) {
  // Called when a device's health changes, not per request.
  device_serving_->Add({{"place", place}}).Set(serving ? 1.0 : 0.0);
}

void Metrics::SetResidentDatasets(const std::string& place, std::uint64_t bytes, std::uint64_t datasets,
                                  std::uint64_t limit_bytes) {
  // Called when datasets change, not per query: the locked lookup is fine.
  const prometheus::Labels labels = {{"place", place}};
  resident_bytes_->Add(labels).Set(static_cast<double>(bytes));
  resident_datasets_->Add(labels).Set(static_cast<double>(datasets));
  resident_limit_->Add(labels).Set(static_cast<double>(limit_bytes));
}

void Metrics::DatasetUploaded() { dataset_uploads_->Increment(); }
void Metrics::DatasetQueried() { dataset_queries_->Increment(); }
void Metrics::DatasetEvicted() { dataset_evictions_->Increment(); }
void Metrics::DatasetExpired() { dataset_expiries_->Increment(); }
void Metrics::DatasetDeleted() { dataset_deletions_->Increment(); }

void Metrics::SetRegions(std::uint64_t regions, std::uint64_t bytes, std::uint64_t limit_bytes) {
  regions_->Set(static_cast<double>(regions));
  region_bytes_->Set(static_cast<double>(bytes));
  region_limit_->Set(static_cast<double>(limit_bytes));
}

void Metrics::RegionQueried() { region_queries_->Increment(); }

void Metrics::GroupedBy(bool on_device, std::uint64_t rows, std::uint64_t groups) {
  const std::size_t path = on_device ? 1 : 0;
  group_by_requests_[path]->Increment();
  group_by_rows_[path]->Increment(static_cast<double>(rows));
  group_by_groups_[path]->Increment(static_cast<double>(groups));
}

void Metrics::SetPinnedPool(std::uint64_t total, std::uint64_t used) {
  pinned_capacity_->Set(static_cast<double>(total));
  pinned_used_->Set(static_cast<double>(used));
}

}  // namespace tally
