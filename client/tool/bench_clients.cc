// `tally bench`'s clients: their connections, the clock they start on
// together, and what each records.
#include <algorithm>
#include <thread>

#include "bench.h"

namespace tally::client::tool {

std::string ModeName(BenchMode mode) {
  switch (mode) {
    case BenchMode::kUnary: return "unary";
    case BenchMode::kStream: return "stream";
    case BenchMode::kResident: return "resident";
    case BenchMode::kUpload: return "upload";
    case BenchMode::kShm: return "shm";
    case BenchMode::kGrid: return "grid";
    case BenchMode::kAuto: break;
  }
  return "auto";
}

std::uint64_t BenchConfig::unit_bytes() const {
  return rules::SizeOf(dtype) * std::max<std::uint64_t>(row_length, 1);
}

std::uint64_t BenchConfig::ElementsFor(std::uint64_t bytes) const {
  return std::max<std::uint64_t>(bytes / unit_bytes(), 1) * std::max<std::uint64_t>(row_length, 1);
}

void ClientStats::Reserve(std::uint64_t requests) {
  // Room for a typical run up front, so the timed loop rarely reallocates.
  latency_seconds.reserve(std::min<std::uint64_t>(requests, 1 << 20));
  server_seconds.reserve(latency_seconds.capacity());
}

void ClientStats::Ok(double latency, double server_time, std::uint64_t bytes) {
  latency_seconds.push_back(latency);
  server_seconds.push_back(server_time);
  ok_bytes += bytes;
}

void ClientStats::Failed(const absl::Status& status) {
  if (failures[status.code()]++ == 0) first_message[status.code()] = std::string(status.message());
}

void ClientStats::Wrong(const absl::Status& difference) {
  if (verify_failures++ == 0) first_verify_message = std::string(difference.message());
}

BenchClock::BenchClock(const BenchConfig& config)
    : ready_(config.clients), duration_(config.duration), requests_(config.requests) {}

void BenchClock::ArriveAndWait() {
  ready_.count_down();
  go_.wait();
}

bool BenchClock::Next() {
  if (requests_) return handed_out_.fetch_add(1, std::memory_order_relaxed) < *requests_;
  return absl::Now() < deadline_;
}

void BenchClock::Start() {
  ready_.wait();
  start_ = absl::Now();
  deadline_ = start_ + duration_;
  go_.count_down();
}

std::vector<std::unique_ptr<Client>> MakeClients(const BenchConfig& config) {
  // Separate channels get separate connections only with a local subchannel
  // pool (ChannelOptions::dedicated_connection); otherwise gRPC shares one.
  std::vector<std::unique_ptr<Client>> clients;
  std::shared_ptr<grpc::Channel> shared;
  // RunBench has opened one channel already: the files are readable.
  const auto open = [&](const ChannelOptions& options) {
    return *OpenChannel(config.connection.target, config.connection.security, options);
  };
  if (config.shared_channel) shared = open({});
  for (int i = 0; i < config.clients; ++i) {
    clients.push_back(std::make_unique<Client>(shared ? shared : open({.dedicated_connection = true})));
  }
  return clients;
}

double RunClients(const BenchConfig& config,
                  const std::function<void(int, BenchClock&, ClientStats&)>& loop,
                  std::vector<ClientStats>& stats) {
  stats.assign(config.clients, ClientStats());
  BenchClock clock(config);
  std::vector<std::thread> threads;
  for (int i = 0; i < config.clients; ++i) {
    threads.emplace_back([&, i] { loop(i, clock, stats[i]); });
  }
  clock.Start();
  for (std::thread& t : threads) t.join();
  return absl::ToDoubleSeconds(absl::Now() - clock.start());
}

}  // namespace tally::client::tool
