// `tally bench`'s parts: the configuration the command line gives, the
// clients and the clock they share, what each client saw and the report.
// bench_command.cc parses flags and picks a mode; bench_send.cc (unary and
// stream), bench_resident.cc (resident and upload) run one.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "connection_flags.h"
#include "absl/time/time.h"
#include "commands.h"
#include "tally/client/client.h"
#include "tally/client/shared_array.h"

namespace tally::client::tool {

enum class BenchMode {
  kAuto,      // unary below --stream-threshold, stream above
  kUnary,     // Aggregate
  kStream,    // AggregateStream
  kResident,  // datasets uploaded once, then AggregateDataset
  kUpload,    // PutDataset, again and again
  kShm,       // arrays shared once through /dev/shm, then AggregateRegion
  kGrid,      // sizes x op lists x client counts against several servers, one table
};

std::string ModeName(BenchMode mode);

struct BenchConfig {
  Connection connection;
  int clients = 1;
  DType dtype = DType::kFloat32;
  std::string ops_text = "sum";
  // One or more op lists (--ops=A;B): requests take them in turn.
  std::vector<std::vector<v1::Aggregation>> op_sets;
  // unary/stream/auto/upload: bytes per request, or a log-uniform range when
  // min != max (unary/stream/auto only).
  std::uint64_t min_bytes = 16 * kMiB;
  std::uint64_t max_bytes = 16 * kMiB;
  // resident: one dataset of each of these sizes.
  std::vector<std::uint64_t> dataset_bytes;
  std::uint64_t row_length = 0;
  BenchMode mode = BenchMode::kAuto;
  CallOptions call;
  absl::Duration duration = absl::Seconds(10);
  std::optional<std::uint64_t> requests;
  bool shared_channel = false;
  std::uint64_t seed = 1;
  bool verify = false;
  bool json = false;
  // resident/upload: names of the datasets the bench makes, and whether
  // they stay on the server afterwards.
  std::string dataset_prefix = "tally-bench";
  bool keep = false;
  // grid: the servers (name, HOST:PORT; the first is the baseline), the
  // array sizes (unary up to stream_above_bytes, streamed above), the
  // client counts. Op lists are op_sets.
  std::vector<std::pair<std::string, std::string>> grid_targets;
  std::vector<std::uint64_t> grid_sizes;
  std::vector<int> grid_clients;
  std::uint64_t grid_stream_above = 64 * kMiB;

  // Bytes of one element, or of one row when rows are set: the unit array
  // sizes are rounded down to.
  std::uint64_t unit_bytes() const;
  // `bytes` rounded down to whole units, in elements; at least one unit.
  std::uint64_t ElementsFor(std::uint64_t bytes) const;
};

// What one client saw. Merged after all threads finish, so no locking.
struct ClientStats {
  std::vector<double> latency_seconds;  // successful requests
  std::vector<double> server_seconds;
  std::uint64_t ok_bytes = 0;
  std::map<absl::StatusCode, std::uint64_t> failures;
  std::map<absl::StatusCode, std::string> first_message;
  std::uint64_t verify_failures = 0;
  std::string first_verify_message;
  // Who answered, from the first successful response: Execution's backend
  // and device, or for uploads the dataset's place ("cuda:0", "host").
  std::string backend, device, place;

  void Reserve(std::uint64_t requests);
  void Ok(double latency, double server_time, std::uint64_t bytes);
  void Failed(const absl::Status& status);
  void Wrong(const absl::Status& difference);
};

// Starts timing once every client has its data and connection, and tells
// each client when to stop: after --duration, or once --requests have been
// handed out among all of them.
class BenchClock {
 public:
  explicit BenchClock(const BenchConfig& config);

  // A client is ready; returns once the clock has started.
  void ArriveAndWait();
  // Whether the calling client should send another request.
  bool Next();

  // The main thread: waits for every client, then starts the clock.
  void Start();
  absl::Time start() const { return start_; }

 private:
  std::latch ready_;
  std::latch go_{1};
  absl::Time start_;
  absl::Time deadline_;
  absl::Duration duration_;
  std::optional<std::uint64_t> requests_;
  std::atomic<std::uint64_t> handed_out_{0};
};

// One Client per --clients, each with its own connection unless
// --shared-channel.
std::vector<std::unique_ptr<Client>> MakeClients(const BenchConfig& config);

// Runs `loop(i, clock, stats[i])` for every client i on its own thread; each
// loop calls clock.ArriveAndWait() once it is ready, then sends while
// clock.Next(). Returns the wall seconds from the clock's start to the end
// of the last loop.
double RunClients(const BenchConfig& config,
                  const std::function<void(int, BenchClock&, ClientStats&)>& loop,
                  std::vector<ClientStats>& stats);

// Everything in the report, from all clients.
struct Summary {
  std::uint64_t ok = 0, failed = 0, verify_failed = 0, bytes = 0;
  double seconds = 0.0;
  std::vector<double> latency, server;  // sorted
  std::map<absl::StatusCode, std::uint64_t> failures;
  std::map<absl::StatusCode, std::string> first_message;
  std::string first_verify_message, backend, device, place;

  bool all_ok() const { return failed == 0 && verify_failed == 0 && ok > 0; }
};

Summary Summarize(std::vector<ClientStats>& all, double seconds);
// Nearest-rank percentile (p in [0, 1]) of sorted values; 0 for none.
double Percentile(const std::vector<double>& sorted, double p);

// What resident (or shm) mode did before the clock started: the datasets
// uploaded (or the arrays shared as regions, which `regions` owns).
struct ResidentSetup {
  struct Dataset {
    std::string name;
    std::uint64_t bytes = 0;
    std::string place;
  };
  std::vector<Dataset> datasets;
  std::vector<std::unique_ptr<SharedArray>> regions;  // shm mode: one per dataset
  std::uint64_t upload_bytes = 0;
  double upload_seconds = 0.0;
};

// Prints the report as text or JSON (--json); `resident` is set in resident
// mode.
void PrintReport(const BenchConfig& config, const Summary& summary,
                 const ResidentSetup* resident = nullptr);

// The modes. Each prints its report and returns the exit code.
int RunSendBench(const BenchConfig& config, std::vector<std::unique_ptr<Client>>& clients);
int RunResidentBench(const BenchConfig& config, std::vector<std::unique_ptr<Client>>& clients);
int RunUploadBench(const BenchConfig& config, std::vector<std::unique_ptr<Client>>& clients);
int RunGridBench(const BenchConfig& config);

}  // namespace tally::client::tool
