#include "server/frontend/server.h"

#include <algorithm>
#include <climits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/frontend/dataset_restore.h"
#include "server/frontend/request_record.h"
#include "server/metrics/metrics.h"
#include "spdlog/spdlog.h"

namespace tally {
namespace {

constexpr char kServiceName[] = "tally.v1.Aggregator";

int HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

// gRPC reads messages up to this size. It is above the unary limit so that an
// oversized Aggregate still reaches the service and gets an answer that says
// to use AggregateStream; beyond it gRPC refuses the message itself.
int TransportLimit(std::uint64_t max_unary_bytes) {
  const std::uint64_t limit = std::max(2 * max_unary_bytes, max_unary_bytes + (std::uint64_t{16} << 20));
  return static_cast<int>(std::min<std::uint64_t>(limit, INT_MAX));
}

// gRPC (1.51) reads every message whole before anything checks its size,
// its own limit above included: three clients sending 200 MiB messages to a
// server with a 24 MiB limit kept 600 MiB of them in memory. What bounds
// that memory is gRPC's resource quota: past it, gRPC resets streams it is
// reading (the client sees RESOURCE_EXHAUSTED, "Received RST_STREAM with
// error code 11"). Admitted requests keep their bytes in gRPC's buffers, so
// the quota is the in-flight budget plus room for two messages of the
// transport limit on their way in; none with no budget.
std::uint64_t ReceiveQuota(const ServiceOptions& service) {
  if (service.max_inflight_bytes == 0) return 0;
  return service.max_inflight_bytes + 2 * static_cast<std::uint64_t>(TransportLimit(service.max_unary_bytes));
}

// gRPC sets SO_REUSEPORT on its listeners by default, so a second server
// started on a port in use would bind it too and the kernel would split new
// connections between the two (a second server knows none of the first's
// datasets). Without it, the second one fails to start. (The ConnectionGate
// binds its own sockets without it too.)
void ListenAlone(grpc::ServerBuilder& builder) { builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0); }

absl::Status CannotListen(const char* flag, const std::string& address) {
  const std::size_t colon = address.rfind(':');
  const std::string port = colon == std::string::npos ? address : address.substr(colon + 1);
  return absl::UnavailableError(absl::StrCat(flag, ": could not listen on ", address, ": port ", port,
                                             " is in use by another process, or the address is not valid."));
}

}  // namespace

absl::Status TallyServer::Port::Add(const char* flag, const std::string& address,
                                    const std::shared_ptr<grpc::ServerCredentials>& credentials, int min_free_fds,
                                    grpc::ServerBuilder& builder) {
  ListenAlone(builder);
  // 0: gRPC accepts on its own listener (no guard against running out of
  // file descriptors).
  if (min_free_fds <= 0 || !ConnectionGate::Handles(address)) {
    builder.AddListeningPort(address, credentials, &number);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<ConnectionGate>> listening = ConnectionGate::Listen(address, min_free_fds);
  if (!listening.ok()) {
    return absl::Status(listening.status().code(), absl::StrCat(flag, ": ", listening.status().message()));
  }
  gate = std::move(*listening);
  number = gate->port();
  acceptor = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
  return absl::OkStatus();
}

void TallyServer::Port::Open() {
  if (gate) gate->Start(std::move(acceptor));
}

void TallyServer::Port::Close() {
  if (gate) gate->Stop();
}

absl::StatusOr<std::unique_ptr<TallyServer>> TallyServer::Start(const ServerConfig& config) {
  std::unique_ptr<TallyServer> s(new TallyServer());
  BackendOptions backend_options = config.backend;
  if (backend_options.cpu_threads == 0) backend_options.cpu_threads = config.threads;
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(backend_options);
  if (!backend.ok()) return backend.status();
  s->backend_ = std::move(*backend);
  const int threads = config.threads > 0 ? config.threads : HardwareThreads();
  s->chunk_workers_ = std::make_unique<Executor>(threads);
  s->request_workers_ = std::make_unique<Executor>(std::max(config.request_threads, threads));

  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(config.tls);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<std::unique_ptr<AuthPolicy>> auth = AuthPolicy::Create(config.auth);
  if (!auth.ok()) return absl::Status(auth.status().code(), absl::StrCat("--auth_token_file: ", auth.status().message()));
  if (config.auth.identity_from_client_cert && config.tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--auth_identity_from_client_cert needs --tls_client_ca_file: only verified client certificates name an "
        "identity.");
  }
  s->auth_ = std::move(*auth);

  s->metrics_ = std::make_unique<Metrics>(Metrics::Options{
      s->backend_->name(), s->backend_->device(), TALLY_VERSION, config.metrics_max_identities});
  if (!config.metrics_listen.empty()) {
    if (absl::Status st = s->metrics_->Serve(config.metrics_listen); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("--metrics_listen: ", st.message()));
    }
  }

  s->backend_->SetMetrics(s->metrics_.get());

  s->quotas_ = std::make_unique<IdentityQuotas>(config.quotas, s->metrics_.get());
  if (!config.dataset_dir.empty()) {
    absl::StatusOr<std::unique_ptr<DatasetDirectory>> directory = DatasetDirectory::Open(config.dataset_dir);
    if (!directory.ok()) return directory.status();
    s->dataset_directory_ = std::move(*directory);
  }
  s->datasets_ = std::make_unique<DatasetStore>(*s->backend_, config.datasets, s->metrics_.get(),
                                                s->dataset_directory_.get());
  // Before the server listens: its first answers already see them.
  if (s->dataset_directory_) RestoreDatasets(*s->datasets_, *s->dataset_directory_, *s->quotas_);
  s->regions_ = std::make_unique<RegionRegistry>(*s->backend_, config.max_region_bytes, s->metrics_.get(),
                                                 config.max_regions);
  s->service_ = std::make_unique<AggregatorService>(*s->backend_, *s->datasets_, *s->regions_, *s->request_workers_,
                                                    *s->chunk_workers_, *s->auth_, *s->quotas_, s->metrics_.get(),
                                                    config.service);
  s->region_service_ = std::make_unique<RegionService>(*s->backend_, *s->regions_, *s->datasets_, *s->service_,
                                                       *s->quotas_, *s->request_workers_, s->metrics_.get(),
                                                       config.service.limits);
  RouteProtobufLog();
  grpc::EnableDefaultHealthCheckService(true);
  // The plugin is process-wide: once on, every server built after has it.
  if (config.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (absl::Status st = s->port_.Add("--listen", config.listen, *credentials, config.transport.min_free_fds, builder);
      !st.ok()) {
    return st;
  }
  builder.SetMaxReceiveMessageSize(TransportLimit(config.service.max_unary_bytes));
  if (const std::uint64_t quota = ReceiveQuota(config.service); quota != 0) {
    grpc::ResourceQuota receive_quota("tally-receive");
    receive_quota.Resize(static_cast<std::size_t>(quota));
    builder.SetResourceQuota(receive_quota);
  }
  builder.SetMaxSendMessageSize(INT_MAX);
  ApplyTransportLimits(config.transport, builder);
  builder.RegisterService(s->service_.get());
  builder.RegisterService(s->region_service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_.number == 0) return CannotListen("--listen", config.listen);
  s->port_.Open();
  if (!config.health_listen.empty()) {
    // Health only, in plaintext: what it tells (serving or not) is no secret.
    grpc::ServerBuilder health_builder;
    if (absl::Status st = s->health_port_.Add("--health_listen", config.health_listen,
                                              grpc::InsecureServerCredentials(), config.transport.min_free_fds,
                                              health_builder);
        !st.ok()) {
      return st;
    }
    ApplyTransportLimits(config.transport, health_builder);
    s->health_server_ = health_builder.BuildAndStart();
    if (!s->health_server_ || s->health_port_.number == 0) {
      return CannotListen("--health_listen", config.health_listen);
    }
    s->health_port_.Open();
  }
  s->SetServing(true);
  s->MirrorDevices();
  s->watcher_ = std::thread([raw = s.get()] { raw->WatchHealth(); });
  return s;
}

void TallyServer::WatchHealth() {
  bool serving = true;
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!watch_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_watching_; })) {
    MirrorDevices();
    const absl::Status health = backend_->Health();
    if (health.ok() == serving) continue;
    serving = health.ok();
    if (serving) {
      spdlog::info("backend {} is healthy again: health SERVING", backend_->name());
    } else {
      spdlog::error("backend {} cannot serve: {}; health NOT_SERVING", backend_->name(), health.ToString());
    }
    SetServing(serving);
  }
}

void TallyServer::MirrorDevices() {
  for (const Backend::DeviceHealth& d : backend_->DevicesHealth()) {
    const bool ok = d.status.ok();
    const auto [it, first] = device_serving_.try_emplace(d.place, ok);
    if (!first && it->second == ok) continue;
    it->second = ok;
    if (!ok) {
      spdlog::error("{} takes no new requests: {}; health of service \"{}\" NOT_SERVING", d.place,
                    d.status.ToString(), d.place);
    } else if (!first) {
      spdlog::info("{} is serving again", d.place);
    }
    for (grpc::Server* server : {server_.get(), health_server_.get()}) {
      if (server != nullptr) server->GetHealthCheckService()->SetServingStatus(d.place, ok);
    }
    metrics_->SetDeviceServing(d.place, ok);
  }
}

void TallyServer::SetServing(bool serving) {
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server == nullptr) continue;
    server->GetHealthCheckService()->SetServingStatus(kServiceName, serving);
    server->GetHealthCheckService()->SetServingStatus(serving);
  }
}

void TallyServer::StopWatching() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stop_watching_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

int TallyServer::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

void TallyServer::Drain(std::chrono::milliseconds grace) {
  if (drained_) return;
  drained_ = true;
  StopWatching();
  // Load balancers learn first (health watches stay open until the end), new
  // calls are refused, and only our own calls in flight are waited for:
  // long-lived health watches must not hold the process for the whole grace.
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server != nullptr) server->GetHealthCheckService()->SetServingStatus(false);
  }
  service_->BeginDrain();
  if (!service_->WaitIdle(std::chrono::steady_clock::now() + grace)) {
    spdlog::warn("drain: calls still in flight after the {} ms grace are being cancelled", grace.count());
  }
  port_.Close();
  health_port_.Close();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  server_->Wait();
  if (health_server_) {
    health_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    health_server_->Wait();
  }
}

TallyServer::~TallyServer() {
  if (server_) Drain(std::chrono::milliseconds(0));
  // The workers drain their queues before the service and backend go away.
  request_workers_.reset();
  chunk_workers_.reset();
  region_service_.reset();
  service_.reset();
  regions_.reset();
  datasets_.reset();
}

}  // namespace tally
