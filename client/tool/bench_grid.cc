// `tally bench --mode=grid`: the request path measured cell by cell (array
// size x op list x client count) against several servers in turn, the first
// being the baseline (a --backend=null server: the transport's own ceiling),
// printed as one table of GB/s and ratios. Every client of a cell sends the
// same array, generated once per size, so 64 clients of 4 GiB need 4 GiB.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench.h"
#include "tally/client/random_data.h"
#include "tally/client/sizes.h"
#include "tally/client/wire.h"

namespace tally::client::tool {
namespace {

struct Cell {
  std::uint64_t bytes = 0;
  std::size_t ops = 0;  // index into op_sets
  int clients = 1;
};

struct Measured {
  double gb_per_s = 0.0;
  double p50_ms = 0.0;
  std::uint64_t ok = 0, failed = 0;
  std::string paths;  // which backend answered: "cuda", or "cpu 40% cuda 60%" when routing varied
};

// "cuda" when one backend answered every request, else each one's share.
std::string Paths(const std::vector<std::map<std::string, std::uint64_t>>& per_client) {
  std::map<std::string, std::uint64_t> all;
  std::uint64_t total = 0;
  for (const auto& m : per_client) {
    for (const auto& [name, n] : m) {
      all[name] += n;
      total += n;
    }
  }
  if (all.size() == 1) return all.begin()->first;
  std::vector<std::string> parts;
  for (const auto& [name, n] : all) {
    parts.push_back(absl::StrFormat("%s %.0f%%", name, 100.0 * static_cast<double>(n) / static_cast<double>(total)));
  }
  return absl::StrJoin(parts, " ");
}

Measured RunCell(const BenchConfig& base, const std::string& target, const Cell& cell, const HostBuffer& data) {
  BenchConfig c = base;
  c.connection.target = target;
  c.clients = cell.clients;
  c.min_bytes = c.max_bytes = cell.bytes;
  c.call.stream = cell.bytes > c.grid_stream_above ? StreamMode::kAlways : StreamMode::kNever;
  std::vector<std::unique_ptr<Client>> clients = MakeClients(c);
  const std::vector<v1::Aggregation>& ops = c.op_sets[cell.ops];
  const ArrayRef array{c.dtype, data.data(), c.ElementsFor(cell.bytes), 0};
  std::vector<ClientStats> stats;
  std::vector<std::map<std::string, std::uint64_t>> answered_by(static_cast<std::size_t>(cell.clients));
  const double seconds = RunClients(
      c,
      [&](int i, BenchClock& clock, ClientStats& s) {
        Client& client = *clients[static_cast<std::size_t>(i)];
        client.WaitForConnected(absl::Seconds(10));
        // One untimed request first: the connection's and the server
        // threads' first use is not what a cell measures.
        (void)client.Aggregate(array, ops, c.call);
        clock.ArriveAndWait();
        while (clock.Next()) {
          const absl::Time t0 = absl::Now();
          absl::StatusOr<v1::AggregateResponse> r = client.Aggregate(array, ops, c.call);
          if (!r.ok()) {
            s.Failed(r.status());
            continue;
          }
          s.Ok(absl::ToDoubleSeconds(absl::Now() - t0), r->execution().server_seconds(), array.size_bytes());
          ++answered_by[static_cast<std::size_t>(i)][r->execution().backend()];
        }
      },
      stats);
  const Summary sum = Summarize(stats, seconds);
  return {seconds > 0 ? static_cast<double>(sum.bytes) / seconds / 1e9 : 0.0, Percentile(sum.latency, 0.5) * 1e3,
          sum.ok, sum.failed, Paths(answered_by)};
}

// Each target's aggregation service, asked once before any cell: a server
// that is down or still starting would otherwise fail every cell for the
// whole grid's duration.
bool TargetsServe(const BenchConfig& config) {
  bool all = true;
  for (const auto& [name, target] : config.grid_targets) {
    BenchConfig c = config;
    c.connection.target = target;
    c.clients = 1;
    std::vector<std::unique_ptr<Client>> one = MakeClients(c);
    const absl::StatusOr<ServingStatus> health = one.front()->CheckHealth("tally.v1.Aggregator", absl::Seconds(10));
    if (!health.ok() || *health != ServingStatus::kServing) {
      absl::FPrintF(stderr, "tally bench: --targets: %s=%s does not serve: %s\n", name, target,
                    health.ok() ? absl::StrCat("its health check answers ", ServingStatusName(*health))
                                : std::string(health.status().message()));
      all = false;
    }
  }
  return all;
}

}  // namespace

int RunGridBench(const BenchConfig& config) {
  if (!TargetsServe(config)) return kExitFailure;
  std::vector<std::string> names;
  for (const auto& [name, target] : config.grid_targets) names.push_back(name);
  absl::PrintF("tally bench --mode=grid: %s, %s per cell, %s; GB/s (p50 ms), ratio to %s, and the backend that answered\n\n",
               absl::StrJoin(names, ", "),
               config.requests ? absl::StrCat(*config.requests, " requests")
                               : absl::StrCat(absl::ToDoubleSeconds(config.duration), " s"),
               NameOf(config.dtype), names.front());
  std::string header = "| size | call | ops | clients |";
  std::string rule = "|---|---|---|---:|";
  for (const std::string& n : names) {
    absl::StrAppend(&header, " ", n, " |");
    absl::StrAppend(&rule, "---:|");
  }
  absl::PrintF("%s\n%s\n", header, rule);
  std::vector<std::string> op_names = absl::StrSplit(config.ops_text, ';');
  bool all_ok = true;
  for (const std::uint64_t bytes : config.grid_sizes) {
    const std::uint64_t elements = config.ElementsFor(bytes);
    HostBuffer data(elements * rules::SizeOf(config.dtype));
    FillRandom(config.dtype, config.seed, data.data(), elements);
    for (std::size_t o = 0; o < config.op_sets.size(); ++o) {
      for (const int clients : config.grid_clients) {
        const Cell cell{bytes, o, clients};
        std::string row = absl::StrCat("| ", SizeText(bytes), " | ",
                                       bytes > config.grid_stream_above ? "stream" : "unary", " | ", op_names[o],
                                       " | ", clients, " |");
        double baseline = 0.0;
        for (std::size_t t = 0; t < config.grid_targets.size(); ++t) {
          const Measured m = RunCell(config, config.grid_targets[t].second, cell, data);
          if (t == 0) baseline = m.gb_per_s;
          absl::StrAppend(&row, absl::StrFormat(" %.2f (%.2f)", m.gb_per_s, m.p50_ms));
          if (t > 0 && baseline > 0) absl::StrAppend(&row, absl::StrFormat(" %.2fx", m.gb_per_s / baseline));
          if (t > 0 && !m.paths.empty()) absl::StrAppend(&row, " ", m.paths);
          if (m.failed > 0 || m.ok == 0) {
            all_ok = false;
            absl::StrAppend(&row, absl::StrFormat(" [%d failed]", m.failed));
          }
          absl::StrAppend(&row, " |");
        }
        absl::PrintF("%s\n", row);
        std::fflush(stdout);
      }
    }
  }
  return all_ok ? kExitOk : kExitFailure;
}

}  // namespace tally::client::tool
