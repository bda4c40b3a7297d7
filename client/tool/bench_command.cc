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
#include "command_line.h"
#include "connection_flags.h"
#include "commands.h"
#include "tally/client/aggregations.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {

const absl::string_view kBenchUsage = R"(usage: tally bench [flags]

Load-tests a tally server: --clients threads, each with its own connection
(unless --shared-channel), send requests back to back and report
throughput, latency percentiles and failures. Everything a request needs is
prepared before timing starts; requests borrow their arrays, never copy them.

Modes (--mode):
  auto, unary, stream  each request sends a random array: Aggregate (unary),
                       AggregateStream (stream), or unary below
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
                       server). Default grid: 4K,64K,1M,4M,16M,64M,256M,4G x
                       "sum;sum,min,max,argmax,hist:4096:-1:1" x 1,8,64.
                       All clients of a cell send the same array

Flags:
  --clients=N          concurrent clients (default 1)
  --size=BYTES         array (dataset) size (default 16M); K/M/G/T suffixes
                       are powers of 1024; rounded down to whole elements
  --elements=N         the size in elements instead of bytes
  --sizes=MIN:MAX      auto/unary/stream: each request draws a size in bytes
                       log-uniformly from [MIN, MAX], e.g. --sizes=1K:256M
  --sizes=A,B,...      resident, shm: one dataset (region) of each size,
                       e.g. 1M,64M,1G,4G
  --dtype=T            float32 (default) float16 bfloat16 float64 int8 int16 int32
                       int64 uint8 uint16 uint32 uint64 bool
  --ops=LIST[;LIST...] aggregations as for tally aggregate (default sum);
                       several lists separated by ";" (quote them) are taken
                       in turn, e.g. "sum;min,max,argmax;sum,max,hist:256:-1:1"
  --rows=N             aggregate rows of N elements (sizes are rounded down
                       to whole rows)
  --stream-threshold=BYTES  for --mode=auto (default 4M)
  --chunk=BYTES        AggregateStream / PutDataset chunk size (default 4M)
  --duration=SECONDS   run for this long (default 10)
  --requests=N         or send exactly N requests in all, then stop
  --timeout=SECONDS    per-request deadline (default: none)
  --shared-channel     all clients share one channel (one connection)
  --seed=S             seed for data and sizes (default 1); client i uses S+i
  --verify             check every response against a host computation
                       (not in the latencies, but in the wall time, so it
                       lowers throughput; fails against --backend=null);
                       resident: computed once per dataset before timing
  --dataset-prefix=P   resident/upload: dataset names start with P (default
                       tally-bench): P-0-1M, P-1-64M, ...; P-upload-0, ...
                       Datasets of those names are replaced.
  --keep               resident/upload: leave the datasets on the server
                       (default: removed at the end)
  --json               print JSON instead of text
  --targets=N=H:P,...  grid: the servers, named (the first is the baseline)
  --grid-sizes=LIST    grid: array sizes (default 4K,64K,1M,4M,16M,64M,256M,4G)
  --grid-clients=LIST  grid: client counts (default 1,8,64)

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
  tally bench --clients=8 --size=64M --mode=stream --duration=20
  tally bench --clients=4 --sizes=1K:256M --requests=1000 --ops=sum,hist:64:-1:1 --verify
  tally bench --clients=16 --size=4K --mode=unary --json > small.json
  tally bench --mode=resident --sizes=1M,64M,1G,4G --clients=64 \
      --ops="sum;min,max,argmax;mean,std:1;sum,max,hist:256:-1:1" --duration=10
  tally bench --mode=upload --size=4G --requests=3
  tally bench --mode=shm --size=4G --ops=sum,max,hist:256:-1:1 --requests=20
  tally bench --mode=grid --targets=null=host:50052,cpu=host:50053,cuda=host:50051
  tally bench --mode=stream --size=4G --requests=3 --target=null-server:50051
)";

namespace {

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
absl::Status TakeGridFlags(CommandLine& cl, BenchConfig& c) {
  const std::optional<std::string> targets = cl.TakeString("targets");
  if (!targets) return Fail("--mode=grid needs --targets=NAME=HOST:PORT,... (the first is the baseline)");
  for (absl::string_view part : absl::StrSplit(*targets, ',')) {
    const std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) {
      return Fail("--targets: '", part, "' is not NAME=HOST:PORT");
    }
    c.grid_targets.emplace_back(kv[0], kv[1]);
  }
  for (absl::string_view part :
       absl::StrSplit(cl.TakeString("grid-sizes").value_or("4K,64K,1M,4M,16M,64M,256M,4G"), ',')) {
    absl::StatusOr<std::uint64_t> bytes = ParseSize(part);
    if (!bytes.ok() || *bytes == 0) return Fail("--grid-sizes: '", part, "' is not a size");
    c.grid_sizes.push_back(*bytes);
  }
  for (absl::string_view part : absl::StrSplit(cl.TakeString("grid-clients").value_or("1,8,64"), ',')) {
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
absl::Status TakeSizes(CommandLine& cl, BenchConfig& c) {
  const std::uint64_t element = rules::SizeOf(c.dtype);
  absl::StatusOr<std::optional<std::uint64_t>> size = cl.TakeSize("size");
  if (!size.ok()) return size.status();
  absl::StatusOr<std::optional<std::uint64_t>> elements = cl.TakeSize("elements");
  if (!elements.ok()) return elements.status();
  const std::optional<std::string> sizes = cl.TakeString("sizes");
  if (int(size->has_value()) + int(elements->has_value()) + int(sizes.has_value()) > 1) {
    return Fail("give at most one of --size, --elements and --sizes");
  }
  if (*size) c.min_bytes = c.max_bytes = **size;
  if (*elements) {
    if (**elements > (~std::uint64_t{0}) / element) return Fail("--elements: too large");
    c.min_bytes = c.max_bytes = **elements * element;
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
      return Fail("--sizes=", *sizes, ": expected MIN:MAX, e.g. 1K:256M (a list is for --mode=resident)");
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

  absl::StatusOr<std::optional<std::uint64_t>> rows = cl.TakeSize("rows");
  if (!rows.ok()) return rows.status();
  if (*rows) c.row_length = **rows;
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

absl::StatusOr<BenchConfig> ParseConfig(CommandLine& cl) {
  BenchConfig c;
  if (absl::Status s = TakeConnectionFlags(cl, c.connection); !s.ok()) return s;
  if (auto m = cl.TakeString("mode")) {
    absl::StatusOr<BenchMode> mode = ParseMode(*m);
    if (!mode.ok()) return mode.status();
    c.mode = *mode;
  }
  const bool datasets = c.mode == BenchMode::kResident || c.mode == BenchMode::kUpload;
  if (auto n = cl.TakeString("clients")) {
    if (!absl::SimpleAtoi(*n, &c.clients) || c.clients < 1 || c.clients > 4096) {
      return Fail("--clients=", *n, ": expected 1 to 4096");
    }
  }
  if (auto d = cl.TakeString("dtype")) {
    absl::StatusOr<DType> dt = ParseDType(*d);
    if (!dt.ok()) return Fail("--dtype: ", dt.status().message());
    c.dtype = *dt;
  }
  if (c.mode == BenchMode::kGrid) {
    c.ops_text = "sum;sum,min,max,argmax,hist:4096:-1:1";
    c.duration = absl::Seconds(2);
    if (absl::Status s = TakeGridFlags(cl, c); !s.ok()) return s;
  }
  if (auto o = cl.TakeString("ops")) {
    if (c.mode == BenchMode::kUpload) return Fail("--ops is not for --mode=upload: it only uploads");
    c.ops_text = *o;
  }
  if (absl::Status s = ParseOpSets(c); !s.ok()) return s;
  if (absl::Status s = TakeSizes(cl, c); !s.ok()) return s;

  c.call.stream = c.mode == BenchMode::kUnary    ? StreamMode::kNever
                  : c.mode == BenchMode::kStream ? StreamMode::kAlways
                                                 : StreamMode::kAuto;
  if (absl::Status s = TakeChunkingFlags(cl, c.call); !s.ok()) return s;

  absl::StatusOr<std::optional<absl::Duration>> duration = cl.TakeSeconds("duration");
  if (!duration.ok()) return duration.status();
  absl::StatusOr<std::optional<std::uint64_t>> requests = cl.TakeSize("requests");
  if (!requests.ok()) return requests.status();
  if (*duration && *requests) return Fail("give --duration or --requests, not both");
  if (*duration) c.duration = **duration;
  c.requests = *requests;
  if (c.requests && *c.requests == 0) return Fail("--requests must be at least 1");
  absl::StatusOr<std::optional<absl::Duration>> timeout = cl.TakeSeconds("timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) c.call.timeout = **timeout;

  absl::StatusOr<bool> shared = cl.TakeBool("shared-channel");
  if (!shared.ok()) return shared.status();
  c.shared_channel = *shared;
  if (auto s = cl.TakeString("seed")) {
    if (!absl::SimpleAtoi(*s, &c.seed)) return Fail("--seed=", *s, ": expected an integer");
  }
  absl::StatusOr<bool> verify = cl.TakeBool("verify");
  if (!verify.ok()) return verify.status();
  c.verify = *verify;
  if (c.verify && c.mode == BenchMode::kUpload) return Fail("--verify is not for --mode=upload");
  absl::StatusOr<bool> json = cl.TakeBool("json");
  if (!json.ok()) return json.status();
  c.json = *json;
  if (auto p = cl.TakeString("dataset-prefix")) {
    if (!datasets) return Fail("--dataset-prefix is for --mode=resident and --mode=upload");
    if (p->empty()) return Fail("--dataset-prefix: empty");
    c.dataset_prefix = *p;
  }
  absl::StatusOr<bool> keep = cl.TakeBool("keep");
  if (!keep.ok()) return keep.status();
  if (*keep && !datasets) return Fail("--keep is for --mode=resident and --mode=upload");
  c.keep = *keep;
  if (!cl.positional().empty()) return Fail("unexpected argument ", cl.positional()[0]);
  if (absl::Status s = cl.CheckAllUsed(); !s.ok()) return s;
  return c;
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  absl::StatusOr<BenchConfig> config = cl.ok() ? ParseConfig(*cl) : cl.status();
  if (!config.ok()) {
    absl::FPrintF(stderr, "tally bench: %s\n(see tally bench --help)\n", config.status().message());
    return kExitUsage;
  }
  if (config->mode == BenchMode::kGrid) return RunGridBench(*config);
  // A channel first, so that a certificate that cannot be read is reported
  // once, as itself.
  if (!OpenOrReport(config->connection, "bench")) return kExitFailure;
  std::vector<std::unique_ptr<Client>> clients = MakeClients(*config);
  // Fail fast on a wrong address instead of reporting a run of UNAVAILABLE.
  if (!clients[0]->WaitForConnected(absl::Seconds(5))) {
    absl::FPrintF(stderr, "tally bench: cannot connect to %s within 5 s\n", config->connection.target);
    return kExitFailure;
  }
  switch (config->mode) {
    case BenchMode::kResident:
    case BenchMode::kShm: return RunResidentBench(*config, clients);
    case BenchMode::kUpload: return RunUploadBench(*config, clients);
    case BenchMode::kAuto:
    case BenchMode::kUnary:
    case BenchMode::kStream:
    case BenchMode::kGrid: break;
  }
  return RunSendBench(*config, clients);
}

}  // namespace tally::client::tool
