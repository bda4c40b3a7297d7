// `tally bench`: its flags and the choice of mode. The modes themselves are
// in bench_send.cc and bench_resident.cc; the shared clients, clock and
// report in bench_clients.cc and bench_report.cc.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench.h"
#include "chunking_flags.h"
#include "commands.h"
#include "connection_flags.h"
#include "flags.h"
#include "help_formatter.h"
#include "input_flags.h"
#include "tally/client/aggregations.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {

namespace {

constexpr char kDescription[] = R"(usage: tally bench [flags]

Load-tests a tally server: --clients threads, each with its own connection
(unless --shared-channel), send requests back to back and report
throughput, latency percentiles and failures. Everything a request needs is
prepared before timing starts; requests borrow their arrays, never copy them.
Every flag takes its value as --name=value or --name value.

Modes (--mode):
  auto, unary, stream  each request sends a random array: Aggregate (unary),
                       AggregateStream (stream), or unary up to
                       --stream-threshold and stream above (auto, default)
  resident             uploads one random dataset per --sizes entry (or one
                       of --size) once, then every request aggregates a whole
                       dataset with AggregateDataset, the clients cycling
                       through datasets and op lists; reports the scan rate
                       (resident bytes queried per second)
  upload               each request uploads the client's random array of
                       --size with PutDataset (replacing its dataset); its
                       GB/s compares with --mode=stream's against a server
                       run with --backend=null, which is the transport's own
                       ceiling
  shm                  on the server's host: copies one random array per
                       --sizes entry (or one of --size) into /dev/shm once and
                       registers each as a host region; every request then
                       aggregates a whole region with AggregateRegion (no
                       array bytes on the wire); reports the scan rate, as
                       resident mode. The regions and objects go at the end
  grid                 every --grid-sizes x op list (--ops) x --grid-clients
                       cell against every server of --targets in turn, each
                       for --duration (default 2 s here): unary up to 64 MiB,
                       streamed above; one table of GB/s per server and its
                       ratio to the first (the baseline, e.g. a --backend=null
                       server). All clients of a cell send the same array
)";

constexpr char kDefaultGridOps[] = "sum;sum,min,max,argmax,hist:4096:-1:1";
constexpr char kDefaultGridSizes[] = "4Ki,64Ki,1Mi,4Mi,16Mi,64Mi,256Mi,4Gi";
constexpr char kDefaultGridClients[] = "1,8,64";

constexpr char kNotesTail[] = R"(
Throughput counts the bytes of successful requests over the wall time from
the first request to the last answer; GB/s means 10^9 bytes per second. In
resident mode those are the resident bytes each query read (its dataset's
size), so it is a scan rate; the upload before timing is reported apart.
Latency is per request, measured by the client (p50, p99: nearest rank);
server time is Execution.server_seconds (PutDatasetResponse.server_seconds
in upload mode). JSON's "gb_per_s" is the throughput (scan rate) and
resident mode adds "datasets" and "upload".

Exit status: 0 when every request succeeded (and verified); 1 otherwise, or
when resident mode could not upload its datasets; 2 bad flags.

Examples:
  tally bench --clients 8 --size 64Mi --mode stream --duration 20
  tally bench --clients=4 --sizes=1K:256M --requests=1000 --ops=sum,hist:64:-1:1 --verify
  tally bench --clients=16 --size=4Ki --mode=unary --json > small.json
  tally bench --mode=resident --sizes=1Mi,64Mi,1Gi,4Gi --clients=64 \
      --ops="sum;min,max,argmax;mean,std:1;sum,max,hist:256:-1:1" --duration=10
  tally bench --mode=upload --size=4Gi --requests=3
  tally bench --mode=shm --size=4Gi --ops=sum,max,hist:256:-1:1 --requests=20
  tally bench --mode=grid --targets=null=host:50052,cpu=host:50053,cuda=host:50051
  tally bench --mode=stream --size=4Gi --requests=3 --target=null-server:50051
)";

// The command line as given, before the rules between flags.
struct BenchFlags {
  ConnectionFlags connection;
  std::optional<std::string> mode, clients, sizes, dtype, ops, seed, dataset_prefix, targets, grid_sizes,
      grid_clients;
  std::optional<std::uint64_t> size, elements, rows, requests;
  ChunkingFlags chunking;
  std::optional<absl::Duration> duration, timeout;
  bool shared_channel = false, verify = false, keep = false, json = false;
};

std::unique_ptr<CLI::App> MakeApp(BenchFlags& f) {
  std::unique_ptr<CLI::App> app = MakeCommandApp(
      "tally bench", kDescription, absl::StrCat(WrapText(std::string(kSizeSuffixHelp), 0, 78), "\n", kNotesTail));
  const BenchConfig defaults;
  StartGroup(*app, "Flags");
  AddTextFlag(*app, "--mode", f.mode, "MODE", "auto, unary, stream, resident, upload, shm or grid, as above", "auto");
  AddTextFlag(*app, "--clients", f.clients, "N", "concurrent clients, 1 to 4096", absl::StrCat(defaults.clients));
  AddSizeFlag(*app, "--size", f.size, "BYTES", "array (dataset) size, rounded down to whole elements",
              SizeText(defaults.min_bytes));
  AddSizeFlag(*app, "--elements", f.elements, "N", "the size in elements instead of bytes");
  AddTextFlag(*app, "--sizes", f.sizes, "MIN:MAX|A,B,...",
              "auto/unary/stream: each request draws a size in bytes log-uniformly from [MIN, MAX], e.g. "
              "--sizes=1K:256M; resident, shm: one dataset (region) of each size, e.g. 1Mi,64Mi,1Gi,4Gi");
  AddTextFlag(*app, "--dtype", f.dtype, "T", kDTypesHelp, "float32");
  AddTextFlag(*app, "--ops", f.ops, "LIST[;LIST...]",
              "aggregations as for tally aggregate; several lists separated by \";\" (quote them) are taken in "
              "turn, e.g. \"sum;min,max,argmax;sum,max,hist:256:-1:1\"",
              absl::StrCat(defaults.ops_text, "; grid: ", kDefaultGridOps));
  AddSizeFlag(*app, "--rows", f.rows, "N", "aggregate rows of N elements (sizes are rounded down to whole rows)");
  AddChunkingFlags(*app, f.chunking, "--mode=auto", "AggregateStream / PutDataset message size");
  AddSecondsFlag(*app, "--duration", f.duration, "run for this long",
                 absl::StrCat(absl::ToDoubleSeconds(defaults.duration), "; grid: 2"));
  AddSizeFlag(*app, "--requests", f.requests, "N", "or send exactly N requests in all, then stop");
  AddSecondsFlag(*app, "--timeout", f.timeout, "per-request deadline", "none");
  AddSwitch(*app, "--shared-channel", f.shared_channel, "all clients share one channel (one connection)");
  AddTextFlag(*app, "--seed", f.seed, "S", "seed for data and sizes; client i uses S+i", absl::StrCat(defaults.seed));
  AddSwitch(*app, "--verify", f.verify,
            "check every response against a host computation (not in the latencies, but in the wall time, so "
            "it lowers throughput; fails against --backend=null); resident: computed once per dataset before "
            "timing");
  AddTextFlag(*app, "--dataset-prefix", f.dataset_prefix, "P",
              "resident/upload: dataset names start with P: P-0-1Mi, P-1-64Mi, ...; P-upload-0, ... Datasets of "
              "those names are replaced.",
              defaults.dataset_prefix);
  AddSwitch(*app, "--keep", f.keep, "resident/upload: leave the datasets on the server (default: removed at the end)");
  AddSwitch(*app, "--json", f.json, "print JSON instead of text");
  StartGroup(*app, "Grid (--mode=grid)");
  AddTextFlag(*app, "--targets", f.targets, "N=H:P,...", "the servers, named (the first is the baseline)");
  AddTextFlag(*app, "--grid-sizes", f.grid_sizes, "LIST", "array sizes in bytes", kDefaultGridSizes);
  AddTextFlag(*app, "--grid-clients", f.grid_clients, "LIST", "client counts", kDefaultGridClients);
  AddConnectionFlags(*app, f.connection);
  return app;
}

absl::Status Fail(auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); }

absl::StatusOr<BenchMode> ParseMode(absl::string_view text) {
  if (text == "auto") return BenchMode::kAuto;
  if (text == "unary") return BenchMode::kUnary;
  if (text == "stream") return BenchMode::kStream;
  if (text == "resident") return BenchMode::kResident;
  if (text == "upload") return BenchMode::kUpload;
  if (text == "shm") return BenchMode::kShm;
  if (text == "grid") return BenchMode::kGrid;
  return Fail("--mode=", text, ": expected auto, unary, stream, resident, upload, shm or grid");
}

// --targets, --grid-sizes, --grid-clients (--mode=grid).
absl::Status CheckGridFlags(const BenchFlags& f, BenchConfig& c) {
  if (!f.targets) return Fail("--mode=grid needs --targets=NAME=HOST:PORT,... (the first is the baseline)");
  for (absl::string_view part : absl::StrSplit(*f.targets, ',')) {
    const std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
      return Fail("--targets: '", part, "' is not NAME=HOST:PORT");
    }
    c.grid_targets.emplace_back(kv[0], kv[1]);
  }
  for (absl::string_view part : absl::StrSplit(f.grid_sizes.value_or(kDefaultGridSizes), ',')) {
    absl::StatusOr<std::uint64_t> bytes = ParseSize(part);
    if (!bytes.ok()) return Fail("--grid-sizes: ", bytes.status().message());
    if (*bytes == 0) return Fail("--grid-sizes: '", part, "' is empty");
    c.grid_sizes.push_back(*bytes);
  }
  for (absl::string_view part : absl::StrSplit(f.grid_clients.value_or(kDefaultGridClients), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 4096) return Fail("--grid-clients: '", part, "': expected 1 to 4096");
    c.grid_clients.push_back(n);
  }
  return absl::OkStatus();
}

// --ops=A;B;C: one op list per part.
absl::Status ParseOpSets(BenchConfig& c) {
  for (absl::string_view part : absl::StrSplit(c.ops_text, ';')) {
    absl::StatusOr<std::vector<v1::Aggregation>> aggs = ParseAggregations(part);
    if (!aggs.ok()) return Fail("--ops: ", aggs.status().message());
    c.op_sets.push_back(*std::move(aggs));
  }
  return absl::OkStatus();
}

// --size, --elements and --sizes, whose meaning depends on the mode.
absl::Status CheckSizes(const BenchFlags& f, BenchConfig& c) {
  const std::uint64_t element = rules::SizeOf(c.dtype);
  const std::optional<std::string>& sizes = f.sizes;
  if (int(f.size.has_value()) + int(f.elements.has_value()) + int(sizes.has_value()) > 1) {
    return Fail("give at most one of --size, --elements and --sizes");
  }
  if (f.size) c.min_bytes = c.max_bytes = *f.size;
  if (f.elements) {
    if (*f.elements > (~std::uint64_t{0}) / element) return Fail("--elements: too large");
    c.min_bytes = c.max_bytes = *f.elements * element;
  }
  const bool resident = c.mode == BenchMode::kResident || c.mode == BenchMode::kShm;
  if (sizes && resident) {
    for (absl::string_view part : absl::StrSplit(*sizes, ',')) {
      absl::StatusOr<std::uint64_t> bytes = ParseSize(part);
      if (!bytes.ok()) return Fail("--sizes: ", bytes.status().message());
      c.dataset_bytes.push_back(*bytes);
    }
  } else if (sizes) {
    const std::vector<std::string> range = absl::StrSplit(*sizes, ':');
    if (c.mode == BenchMode::kUpload) return Fail("--sizes is not for --mode=upload; give --size");
    if (range.size() != 2) {
      return Fail("--sizes=", *sizes, ": expected MIN:MAX, e.g. 1K:256M (a list is for --mode=resident and shm)");
    }
    absl::StatusOr<std::uint64_t> lo = ParseSize(range[0]);
    absl::StatusOr<std::uint64_t> hi = ParseSize(range[1]);
    if (!lo.ok()) return Fail("--sizes: ", lo.status().message());
    if (!hi.ok()) return Fail("--sizes: ", hi.status().message());
    if (*lo == 0 || *lo > *hi) return Fail("--sizes=", *sizes, ": need 0 < MIN <= MAX");
    c.min_bytes = *lo;
    c.max_bytes = *hi;
  }
  if (resident && c.dataset_bytes.empty()) c.dataset_bytes.push_back(c.min_bytes);

  if (f.rows) c.row_length = *f.rows;
  if (c.row_length != 0 && c.mode == BenchMode::kUpload) return Fail("--rows is not for --mode=upload");
  std::vector<std::uint64_t> all = c.dataset_bytes;
  all.push_back(c.min_bytes);
  for (std::uint64_t bytes : all) {
    if (bytes < c.unit_bytes()) {
      return Fail("array size ", bytes, " bytes is less than one ", c.row_length ? "row" : "element", " (",
                  c.unit_bytes(), " bytes)");
    }
  }
  return absl::OkStatus();
}

// The rules between flags, some of which depend on the mode.
absl::Status Check(const BenchFlags& f, BenchConfig& c) {
  absl::StatusOr<Connection> connection = f.connection.Resolve();
  if (!connection.ok()) return connection.status();
  c.connection = *std::move(connection);
  if (f.mode) {
    absl::StatusOr<BenchMode> mode = ParseMode(*f.mode);
    if (!mode.ok()) return mode.status();
    c.mode = *mode;
  }
  const bool datasets = c.mode == BenchMode::kResident || c.mode == BenchMode::kUpload;
  if (f.clients && (!absl::SimpleAtoi(*f.clients, &c.clients) || c.clients < 1 || c.clients > 4096)) {
    return Fail("--clients=", *f.clients, ": expected 1 to 4096");
  }
  if (f.dtype) {
    absl::StatusOr<DType> dt = ParseDType(*f.dtype);
    if (!dt.ok()) return Fail("--dtype: ", dt.status().message());
    c.dtype = *dt;
  }
  if (c.mode == BenchMode::kGrid) {
    c.ops_text = kDefaultGridOps;
    c.duration = absl::Seconds(2);
    if (absl::Status s = CheckGridFlags(f, c); !s.ok()) return s;
  } else {
    for (const auto& [given, name] : {std::pair{f.targets.has_value(), "--targets"},
                                      {f.grid_sizes.has_value(), "--grid-sizes"},
                                      {f.grid_clients.has_value(), "--grid-clients"}}) {
      if (given) return Fail(name, " is for --mode=grid");
    }
  }
  if (f.ops) {
    if (c.mode == BenchMode::kUpload) return Fail("--ops is not for --mode=upload: it only uploads");
    c.ops_text = *f.ops;
  }
  if (absl::Status s = ParseOpSets(c); !s.ok()) return s;
  if (absl::Status s = CheckSizes(f, c); !s.ok()) return s;

  c.call.stream = c.mode == BenchMode::kUnary    ? StreamMode::kNever
                  : c.mode == BenchMode::kStream ? StreamMode::kAlways
                                                 : StreamMode::kAuto;
  f.chunking.ApplyTo(c.call);

  if (f.duration && f.requests) return Fail("give --duration or --requests, not both");
  if (f.duration) c.duration = *f.duration;
  c.requests = f.requests;
  if (c.requests && *c.requests == 0) return Fail("--requests must be at least 1");
  if (f.timeout) c.call.timeout = *f.timeout;
  c.shared_channel = f.shared_channel;
  if (f.seed && !absl::SimpleAtoi(*f.seed, &c.seed)) return Fail("--seed=", *f.seed, ": expected an integer");
  c.verify = f.verify;
  if (c.verify && c.mode == BenchMode::kUpload) return Fail("--verify is not for --mode=upload");
  c.json = f.json;
  if (f.dataset_prefix) {
    if (!datasets) return Fail("--dataset-prefix is for --mode=resident and --mode=upload");
    if (f.dataset_prefix->empty()) return Fail("--dataset-prefix: empty");
    c.dataset_prefix = *f.dataset_prefix;
  }
  if (f.keep && !datasets) return Fail("--keep is for --mode=resident and --mode=upload");
  c.keep = f.keep;
  return absl::OkStatus();
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  BenchFlags flags;
  std::unique_ptr<CLI::App> app = MakeApp(flags);
  BenchConfig config;
  if (std::optional<int> exit = ParseCommandLine(*app, args, [&] { return Check(flags, config); })) return *exit;
  if (config.mode == BenchMode::kGrid) return RunGridBench(config);
  // A channel first, so that a certificate that cannot be read is reported
  // once, as itself.
  if (!OpenOrReport(config.connection, "bench")) return kExitFailure;
  std::vector<std::unique_ptr<Client>> clients = MakeClients(config);
  // Fail fast on a wrong address instead of reporting a run of UNAVAILABLE.
  if (!clients[0]->WaitForConnected(absl::Seconds(5))) {
    absl::FPrintF(stderr, "tally bench: cannot connect to %s within 5 s\n", config.connection.target);
    return kExitFailure;
  }
  switch (config.mode) {
    case BenchMode::kResident:
    case BenchMode::kShm: return RunResidentBench(config, clients);
    case BenchMode::kUpload: return RunUploadBench(config, clients);
    case BenchMode::kAuto:
    case BenchMode::kUnary:
    case BenchMode::kStream:
    case BenchMode::kGrid: break;
  }
  return RunSendBench(config, clients);
}

}  // namespace tally::client::tool
