// A running tally server: backend, workers, metrics and the gRPC server with
// the Aggregator, health and reflection services. Used by main() and by the
// integration tests, which start it in-process on a free port.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/engine/backend_factory.h"
#include "server/engine/regions/region_registry.h"
#include "server/frontend/aggregator_service.h"
#include "server/frontend/region_service.h"
#include "server/frontend/auth_policy.h"
#include "server/frontend/connection_gate.h"
#include "server/frontend/identity_quota.h"
#include "server/frontend/tls_credentials.h"
#include "server/frontend/transport_limits.h"

namespace grpc {
class Server;
class ServerBuilder;
class ServerCredentials;
namespace experimental {
class ExternalConnectionAcceptor;
}
}

namespace tally {

class Metrics;

struct ServerConfig {
  std::string listen = "0.0.0.0:50051";  // port 0 picks a free port
  std::string metrics_listen;            // empty: no metrics endpoint
  // A second, plaintext port that serves only grpc.health.v1 (for kubelet
  // probes, which cannot speak TLS); empty: none.
  std::string health_listen;
  bool reflection = true;  // gRPC server reflection on the main port
  int metrics_max_identities = 16;
  TlsOptions tls;
  AuthOptions auth;
  QuotaOptions quotas;
  BackendOptions backend;
  ServiceOptions service;
  DatasetOptions datasets;
  // Where datasets are kept on disk, so that a restart serves them again
  // (created if missing); empty: they live as long as the process.
  std::string dataset_dir;
  // Shared-memory regions (host and CUDA) may hold this many bytes in all
  // (0: no limit). 16 GiB: a host region is pinned for as long as it is
  // registered, and pinned memory is memory the host cannot page out.
  std::uint64_t max_region_bytes = std::uint64_t{16} << 30;
  // Regions registered at once: each holds a file descriptor and a mapping.
  int max_regions = 1024;
  TransportOptions transport;
  int threads = 0;  // stream chunk workers; 0: one per hardware thread
  // Unary-request and admission workers (they may sit waiting for room).
  int request_threads = 64;
};

class TallyServer {
 public:
  static absl::StatusOr<std::unique_ptr<TallyServer>> Start(const ServerConfig& config);
  ~TallyServer();

  int port() const { return port_.number; }
  int metrics_port() const;
  int health_port() const { return health_port_.number; }
  const Backend& backend() const { return *backend_; }
  Metrics* metrics() { return metrics_.get(); }
  DatasetStore& datasets() { return *datasets_; }
  RegionRegistry& regions() { return *regions_; }
  IdentityQuotas& quotas() { return *quotas_; }

  // Graceful stop: health goes NOT_SERVING, new calls are refused, calls in
  // flight get until `grace` to finish and are cancelled after that.
  void Drain(std::chrono::milliseconds grace);

 private:
  TallyServer() = default;
  // Polls the backend's health and mirrors it on the health services.
  void WatchHealth();
  void SetServing(bool serving);
  // Each device's health on the health services under its place ("cuda:1")
  // and in tally_device_serving, where it changed since the last call.
  void MirrorDevices();
  void StopWatching();

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Executor> request_workers_;
  std::unique_ptr<Executor> chunk_workers_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<AuthPolicy> auth_;
  std::unique_ptr<IdentityQuotas> quotas_;  // after the datasets go: they hold charges
  std::unique_ptr<DatasetDirectory> dataset_directory_;  // likewise: the store removes files in it
  std::unique_ptr<DatasetStore> datasets_;  // before the backend goes: its memory is the backend's
  std::unique_ptr<RegionRegistry> regions_;  // likewise: the backend unpins and closes them
  std::unique_ptr<AggregatorService> service_;
  std::unique_ptr<RegionService> region_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;
  // A port the server listens on: through a ConnectionGate (TCP), or
  // gRPC's own listener (unix sockets).
  struct Port {
    int number = 0;
    std::unique_ptr<ConnectionGate> gate;
    std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor;  // until Open()
    [[nodiscard]] absl::Status Add(const char* flag, const std::string& address,
                                   const std::shared_ptr<grpc::ServerCredentials>& credentials, int min_free_fds,
                                   grpc::ServerBuilder& builder);
    void Open();   // once the server is started
    void Close();  // stops accepting
  };
  Port port_;         // after server_: the gate stops before the server goes
  Port health_port_;
  bool drained_ = false;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stop_watching_ = false;
  std::map<std::string, bool> device_serving_;  // as last reported, by place
  std::thread watcher_;
};

}  // namespace tally
