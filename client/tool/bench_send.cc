// `tally bench --mode=unary|stream|auto`: every request sends its array.
// Each client generates its array once, before the clock starts, and every
// request borrows its bytes, so the tool measures the server and transport,
// not itself.
#include <cmath>
#include <optional>
#include <random>

#include "bench.h"
#include "tally/client/random_data.h"
#include "tally/client/reference.h"

namespace tally::client::tool {
namespace {

// Element counts per request: fixed, or log-uniform in bytes between the
// configured bounds, rounded down to whole rows (whole elements).
class SizePicker {
 public:
  SizePicker(const BenchConfig& c, std::uint64_t seed)
      : config_(c),
        log_min_(std::log(static_cast<double>(c.min_bytes))),
        log_max_(std::log(static_cast<double>(c.max_bytes))),
        rng_(seed) {}

  bool fixed() const { return config_.min_bytes == config_.max_bytes; }

  std::uint64_t Next() {
    std::uint64_t bytes = config_.min_bytes;
    if (!fixed()) {
      const double u = std::uniform_real_distribution<double>(log_min_, log_max_)(rng_);
      bytes = static_cast<std::uint64_t>(std::exp(u));
    }
    return config_.ElementsFor(bytes);
  }

 private:
  const BenchConfig& config_;
  double log_min_, log_max_;
  std::mt19937_64 rng_;
};

void SendLoop(const BenchConfig& c, int index, Client& client, BenchClock& clock, ClientStats& stats) {
  const std::uint64_t seed = c.seed + static_cast<std::uint64_t>(index);
  SizePicker sizes(c, seed);
  const std::uint64_t max_elements = c.ElementsFor(c.max_bytes);
  HostBuffer buffer(max_elements * rules::SizeOf(c.dtype));
  FillRandom(c.dtype, seed, buffer.data(), max_elements);
  ArrayRef array{c.dtype, buffer.data(), max_elements, c.row_length};

  // With one size, the expected answers are the same for every request.
  std::vector<absl::StatusOr<v1::AggregateResponse>> fixed_expected;
  if (c.verify && sizes.fixed()) {
    array.length = sizes.Next();
    for (const auto& aggregations : c.op_sets) {
      fixed_expected.push_back(ComputeReference(array, aggregations));
    }
  }
  stats.Reserve(c.requests ? *c.requests / c.clients + 1 : 4096);
  // Connection setup is not part of what is measured. A client that cannot
  // connect shows up as UNAVAILABLE failures, so the result is not needed.
  client.WaitForConnected(absl::Seconds(10));
  clock.ArriveAndWait();

  // Op lists in turn, each client starting at its own.
  for (std::size_t k = static_cast<std::size_t>(index); clock.Next(); ++k) {
    const std::size_t set = k % c.op_sets.size();
    const std::vector<v1::Aggregation>& aggregations = c.op_sets[set];
    array.length = sizes.Next();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<v1::AggregateResponse> response = client.Aggregate(array, aggregations, c.call);
    const double latency = absl::ToDoubleSeconds(absl::Now() - t0);
    if (!response.ok()) {
      stats.Failed(response.status());
      continue;
    }
    stats.Ok(latency, response->execution().server_seconds(), array.size_bytes());
    if (stats.backend.empty()) {
      stats.backend = response->execution().backend();
      stats.device = response->execution().device();
    }
    if (c.verify) {
      absl::StatusOr<v1::AggregateResponse> expected =
          fixed_expected.empty() ? ComputeReference(array, aggregations) : fixed_expected[set];
      const absl::Status same = expected.ok() ? CompareResults(*expected, *response) : expected.status();
      if (!same.ok()) stats.Wrong(same);
    }
  }
}

}  // namespace

int RunSendBench(const BenchConfig& config, std::vector<std::unique_ptr<Client>>& clients) {
  std::vector<ClientStats> stats;
  const double seconds = RunClients(
      config,
      [&](int i, BenchClock& clock, ClientStats& s) { SendLoop(config, i, *clients[i], clock, s); },
      stats);
  const Summary summary = Summarize(stats, seconds);
  PrintReport(config, summary);
  return summary.all_ok() ? kExitOk : kExitFailure;
}

}  // namespace tally::client::tool
