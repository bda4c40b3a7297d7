// `tally bench`: N concurrent clients sending random arrays as fast as the
// server answers; throughput, latency and failures. Everything a request
// needs is prepared before the clock starts, and a request borrows its bytes
// from the client's buffer, so the tool measures the server and transport,
// not itself.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <latch>
#include <map>
#include <numeric>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "command_line.h"
#include "commands.h"
#include "tally/client/aggregations.h"
#include "tally/client/client.h"
#include "tally/client/number_text.h"
#include "tally/client/random_data.h"
#include "tally/client/reference.h"
#include "tally/client/sizes.h"
#include "tally/client/wire.h"

namespace tally::client::tool {

const absl::string_view kBenchUsage = R"(usage: tally bench [flags]

Load-tests a tally server: --clients threads, each with its own connection
(unless --shared-channel), send random arrays back to back and report
throughput, latency percentiles and failures. Each client generates its
array once, before timing starts; requests borrow it, never copy it.

Flags:
  --target=HOST:PORT   server address (default 127.0.0.1:50051)
  --clients=N          concurrent clients (default 1)
  --size=BYTES         array size per request (default 16M); K/M/G/T suffixes
                       are powers of 1024; rounded down to whole elements
  --elements=N         array size in elements instead of bytes
  --sizes=MIN:MAX      instead of one size: each request draws a size in bytes
                       log-uniformly from [MIN, MAX], e.g. --sizes=1K:256M
  --dtype=T            float32 (default) float64 int32 int64 uint32 uint8
  --ops=LIST           aggregations as for tally aggregate (default sum)
  --rows=N             segment arrays into rows of N elements (sizes are
                       rounded down to whole rows)
  --mode=MODE          unary, stream, or auto (default: unary below
                       --stream-threshold, stream above)
  --stream-threshold=BYTES  for --mode=auto (default 4M)
  --chunk=BYTES        AggregateStream chunk size (default 4M)
  --duration=SECONDS   run for this long (default 10)
  --requests=N         or send exactly N requests in all, then stop
  --timeout=SECONDS    per-request deadline (default: none)
  --shared-channel     all clients share one channel (one connection)
  --seed=S             seed for data and sizes (default 1); client i uses S+i
  --verify             check every response against a host computation
                       (not in the latencies, but in the wall time, so it
                       lowers throughput; fails against --backend=null)
  --json               print JSON instead of text

Throughput counts the bytes of successful requests over the wall time from
the first request to the last answer; GB/s means 10^9 bytes per second.
Latency is per request, measured by the client (p50, p99: nearest rank).

Exit status: 0 when every request succeeded (and verified); 1 otherwise;
2 bad flags.

Examples:
  tally bench --clients=8 --size=64M --mode=stream --duration=20
  tally bench --clients=4 --sizes=1K:256M --requests=1000 --ops=sum,hist:64:-1:1 --verify
  tally bench --clients=16 --size=4K --mode=unary --json > small.json
)";

namespace {

enum class BenchMode { kAuto, kUnary, kStream };

struct BenchConfig {
  std::string target{kDefaultTarget};
  int clients = 1;
  DType dtype = DType::kFloat32;
  std::string ops_text = "sum";
  std::vector<v1::Aggregation> aggregations;
  // Bytes per request, or a log-uniform range when min != max.
  std::uint64_t min_bytes = 16 * kMiB;
  std::uint64_t max_bytes = 16 * kMiB;
  std::uint64_t row_length = 0;
  BenchMode mode = BenchMode::kAuto;
  CallOptions call;
  absl::Duration duration = absl::Seconds(10);
  std::optional<std::uint64_t> requests;
  bool shared_channel = false;
  std::uint64_t seed = 1;
  bool verify = false;
  bool json = false;
};

absl::StatusOr<BenchConfig> ParseConfig(CommandLine& cl) {
  BenchConfig c;
  const auto fail = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (auto t = cl.TakeString("target")) c.target = *t;
  if (auto n = cl.TakeString("clients")) {
    if (!absl::SimpleAtoi(*n, &c.clients) || c.clients < 1 || c.clients > 4096) {
      return fail("--clients=", *n, ": expected 1 to 4096");
    }
  }
  if (auto d = cl.TakeString("dtype")) {
    absl::StatusOr<DType> dt = ParseDType(*d);
    if (!dt.ok()) return fail("--dtype: ", dt.status().message());
    c.dtype = *dt;
  }
  if (auto o = cl.TakeString("ops")) c.ops_text = *o;
  absl::StatusOr<std::vector<v1::Aggregation>> aggs = ParseAggregations(c.ops_text);
  if (!aggs.ok()) return fail("--ops: ", aggs.status().message());
  c.aggregations = *std::move(aggs);

  const std::uint64_t element = ops::SizeOf(c.dtype);
  absl::StatusOr<std::optional<std::uint64_t>> size = cl.TakeSize("size");
  if (!size.ok()) return size.status();
  absl::StatusOr<std::optional<std::uint64_t>> elements = cl.TakeSize("elements");
  if (!elements.ok()) return elements.status();
  const std::optional<std::string> sizes = cl.TakeString("sizes");
  if (int(size->has_value()) + int(elements->has_value()) + int(sizes.has_value()) > 1) {
    return fail("give at most one of --size, --elements and --sizes");
  }
  if (*size) c.min_bytes = c.max_bytes = **size;
  if (*elements) {
    if (**elements > (~std::uint64_t{0}) / element) return fail("--elements: too large");
    c.min_bytes = c.max_bytes = **elements * element;
  }
  if (sizes) {
    const std::vector<std::string> range = absl::StrSplit(*sizes, ':');
    if (range.size() != 2) return fail("--sizes=", *sizes, ": expected MIN:MAX, e.g. 1K:256M");
    absl::StatusOr<std::uint64_t> lo = ParseSize(range[0]);
    absl::StatusOr<std::uint64_t> hi = ParseSize(range[1]);
    if (!lo.ok()) return fail("--sizes: ", lo.status().message());
    if (!hi.ok()) return fail("--sizes: ", hi.status().message());
    if (*lo == 0 || *lo > *hi) return fail("--sizes=", *sizes, ": need 0 < MIN <= MAX");
    c.min_bytes = *lo;
    c.max_bytes = *hi;
  }
  absl::StatusOr<std::optional<std::uint64_t>> rows = cl.TakeSize("rows");
  if (!rows.ok()) return rows.status();
  if (*rows) c.row_length = **rows;
  const std::uint64_t unit = element * std::max<std::uint64_t>(c.row_length, 1);
  if (c.min_bytes < unit) {
    return fail("array size ", c.min_bytes, " bytes is less than one ",
                c.row_length ? "row" : "element", " (", unit, " bytes)");
  }

  if (auto m = cl.TakeString("mode")) {
    if (*m == "auto") c.mode = BenchMode::kAuto;
    else if (*m == "unary") c.mode = BenchMode::kUnary;
    else if (*m == "stream") c.mode = BenchMode::kStream;
    else return fail("--mode=", *m, ": expected unary, stream or auto");
  }
  c.call.stream = c.mode == BenchMode::kUnary    ? StreamMode::kNever
                  : c.mode == BenchMode::kStream ? StreamMode::kAlways
                                                 : StreamMode::kAuto;
  if (absl::Status s = TakeChunkingFlags(cl, c.call); !s.ok()) return s;

  absl::StatusOr<std::optional<absl::Duration>> duration = cl.TakeSeconds("duration");
  if (!duration.ok()) return duration.status();
  absl::StatusOr<std::optional<std::uint64_t>> requests = cl.TakeSize("requests");
  if (!requests.ok()) return requests.status();
  if (*duration && *requests) return fail("give --duration or --requests, not both");
  if (*duration) c.duration = **duration;
  c.requests = *requests;
  if (c.requests && *c.requests == 0) return fail("--requests must be at least 1");
  absl::StatusOr<std::optional<absl::Duration>> timeout = cl.TakeSeconds("timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) c.call.timeout = **timeout;

  absl::StatusOr<bool> shared = cl.TakeBool("shared-channel");
  if (!shared.ok()) return shared.status();
  c.shared_channel = *shared;
  if (auto s = cl.TakeString("seed")) {
    if (!absl::SimpleAtoi(*s, &c.seed)) return fail("--seed=", *s, ": expected an integer");
  }
  absl::StatusOr<bool> verify = cl.TakeBool("verify");
  if (!verify.ok()) return verify.status();
  c.verify = *verify;
  absl::StatusOr<bool> json = cl.TakeBool("json");
  if (!json.ok()) return json.status();
  c.json = *json;
  if (!cl.positional().empty()) return fail("unexpected argument ", cl.positional()[0]);
  if (absl::Status s = cl.CheckAllUsed(); !s.ok()) return s;
  return c;
}

// What one client saw. Merged after all threads finish, so no locking.
struct ClientStats {
  std::vector<double> latency_seconds;  // successful requests
  std::vector<double> server_seconds;
  std::uint64_t ok_bytes = 0;
  std::map<absl::StatusCode, std::uint64_t> failures;
  std::map<absl::StatusCode, std::string> first_message;
  std::uint64_t verify_failures = 0;
  std::string first_verify_message;
  std::string backend, device;
};

// Element counts per request: fixed, or log-uniform in bytes between the
// configured bounds, rounded down to whole rows (whole elements).
class SizePicker {
 public:
  SizePicker(const BenchConfig& c, std::uint64_t seed)
      : unit_elements_(std::max<std::uint64_t>(c.row_length, 1)),
        unit_bytes_(ops::SizeOf(c.dtype) * unit_elements_),
        log_min_(std::log(static_cast<double>(c.min_bytes))),
        log_max_(std::log(static_cast<double>(c.max_bytes))),
        fixed_(c.min_bytes == c.max_bytes),
        min_bytes_(c.min_bytes),
        rng_(seed) {}

  std::uint64_t MaxElements(std::uint64_t max_bytes) const {
    return max_bytes / unit_bytes_ * unit_elements_;
  }

  std::uint64_t Next() {
    std::uint64_t bytes = min_bytes_;
    if (!fixed_) {
      const double u = std::uniform_real_distribution<double>(log_min_, log_max_)(rng_);
      bytes = static_cast<std::uint64_t>(std::exp(u));
    }
    return std::max<std::uint64_t>(bytes / unit_bytes_, 1) * unit_elements_;
  }

  bool fixed() const { return fixed_; }

 private:
  std::uint64_t unit_elements_, unit_bytes_;
  double log_min_, log_max_;
  bool fixed_;
  std::uint64_t min_bytes_;
  std::mt19937_64 rng_;
};

// `ready` counts clients that have their data and connection; `go` opens
// once the clock has started (`start` is written before it opens).
void RunClient(const BenchConfig& c, int index, Client& client, std::latch& ready, std::latch& go,
               const absl::Time& start, std::atomic<std::uint64_t>& next_request,
               ClientStats& stats) {
  const std::uint64_t seed = c.seed + static_cast<std::uint64_t>(index);
  SizePicker sizes(c, seed);
  const std::uint64_t max_elements = sizes.MaxElements(c.max_bytes);
  HostBuffer buffer(max_elements * ops::SizeOf(c.dtype));
  FillRandom(c.dtype, seed, buffer.data(), max_elements);
  ArrayRef array{c.dtype, buffer.data(), max_elements, c.row_length};

  // With one size, the expected answer is the same for every request.
  std::optional<absl::StatusOr<v1::AggregateResponse>> fixed_expected;
  if (c.verify && sizes.fixed()) {
    array.length = sizes.Next();
    fixed_expected = ComputeReference(array, c.aggregations);
  }
  // Room for a typical run up front, so the timed loop rarely reallocates.
  const std::uint64_t expected_requests = c.requests ? *c.requests / c.clients + 1 : 4096;
  stats.latency_seconds.reserve(std::min<std::uint64_t>(expected_requests, 1 << 20));
  stats.server_seconds.reserve(stats.latency_seconds.capacity());
  // Connection setup is not part of what is measured. A client that cannot
  // connect shows up as UNAVAILABLE failures, so the result is not needed.
  client.WaitForConnected(absl::Seconds(10));
  ready.count_down();
  go.wait();
  const absl::Time deadline = start + c.duration;

  while (true) {
    if (c.requests) {
      if (next_request.fetch_add(1, std::memory_order_relaxed) >= *c.requests) break;
    } else if (absl::Now() >= deadline) {
      break;
    }
    array.length = sizes.Next();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<v1::AggregateResponse> response =
        client.Aggregate(array, c.aggregations, c.call);
    const double latency = absl::ToDoubleSeconds(absl::Now() - t0);
    if (!response.ok()) {
      const absl::StatusCode code = response.status().code();
      if (stats.failures[code]++ == 0) {
        stats.first_message[code] = std::string(response.status().message());
      }
      continue;
    }
    stats.latency_seconds.push_back(latency);
    stats.server_seconds.push_back(response->execution().server_seconds());
    stats.ok_bytes += array.size_bytes();
    if (stats.backend.empty()) {
      stats.backend = response->execution().backend();
      stats.device = response->execution().device();
    }
    if (c.verify) {
      absl::StatusOr<v1::AggregateResponse> expected =
          fixed_expected ? *fixed_expected : ComputeReference(array, c.aggregations);
      const absl::Status same =
          expected.ok() ? CompareResults(*expected, *response) : expected.status();
      if (!same.ok() && stats.verify_failures++ == 0) {
        stats.first_verify_message = std::string(same.message());
      }
    }
  }
}

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::string Millis(double seconds) { return absl::StrFormat("%.3f ms", seconds * 1e3); }

struct Summary {
  std::uint64_t ok = 0, failed = 0, verify_failed = 0, bytes = 0;
  double seconds = 0.0;
  std::vector<double> latency, server;  // sorted
  std::map<absl::StatusCode, std::uint64_t> failures;
  std::map<absl::StatusCode, std::string> first_message;
  std::string first_verify_message, backend, device;
};

Summary Summarize(std::vector<ClientStats>& all, double seconds) {
  Summary s;
  s.seconds = seconds;
  for (ClientStats& c : all) {
    s.latency.insert(s.latency.end(), c.latency_seconds.begin(), c.latency_seconds.end());
    s.server.insert(s.server.end(), c.server_seconds.begin(), c.server_seconds.end());
    s.bytes += c.ok_bytes;
    for (const auto& [code, n] : c.failures) {
      s.failures[code] += n;
      s.failed += n;
      s.first_message.emplace(code, c.first_message[code]);
    }
    s.verify_failed += c.verify_failures;
    if (s.first_verify_message.empty()) s.first_verify_message = c.first_verify_message;
    if (s.backend.empty()) {
      s.backend = c.backend;
      s.device = c.device;
    }
  }
  s.ok = s.latency.size();
  std::sort(s.latency.begin(), s.latency.end());
  std::sort(s.server.begin(), s.server.end());
  return s;
}

std::string ModeName(BenchMode m) {
  switch (m) {
    case BenchMode::kUnary: return "unary";
    case BenchMode::kStream: return "stream";
    case BenchMode::kAuto: break;
  }
  return "auto";
}

std::string SizeText(const BenchConfig& c) {
  if (c.min_bytes == c.max_bytes) return FormatBytes(c.min_bytes);
  return absl::StrCat(FormatBytes(c.min_bytes), " to ", FormatBytes(c.max_bytes), " (log-uniform)");
}

void PrintText(const BenchConfig& c, const Summary& s) {
  const double mean = s.latency.empty() ? 0.0
      : std::accumulate(s.latency.begin(), s.latency.end(), 0.0) / s.latency.size();
  absl::PrintF("tally bench: %d client%s x %s %s, ops %s, mode %s, %s\n", c.clients,
               c.clients == 1 ? "" : "s", SizeText(c), NameOf(c.dtype), c.ops_text, ModeName(c.mode),
               c.shared_channel ? "one shared connection" : "one connection per client");
  absl::PrintF("server       %s%s%s\n", s.backend.empty() ? "(no successful response)" : s.backend,
               s.device.empty() ? "" : " on ", s.device);
  absl::PrintF("requests     %d ok, %d failed%s in %.3f s\n", s.ok, s.failed,
               c.verify ? absl::StrCat(", ", s.verify_failed, " wrong") : "", s.seconds);
  absl::PrintF("throughput   %.3f GB/s, %.1f requests/s\n", s.bytes / s.seconds / 1e9,
               s.ok / s.seconds);
  absl::PrintF("latency      p50 %s  p99 %s  max %s  mean %s\n", Millis(Percentile(s.latency, 0.5)),
               Millis(Percentile(s.latency, 0.99)), Millis(s.latency.empty() ? 0 : s.latency.back()),
               Millis(mean));
  absl::PrintF("server time  p50 %s  p99 %s\n", Millis(Percentile(s.server, 0.5)),
               Millis(Percentile(s.server, 0.99)));
  for (const auto& [code, n] : s.failures) {
    absl::PrintF("failed       %d x %s, first: %s\n", n, absl::StatusCodeToString(code),
                 s.first_message.at(code));
  }
  if (s.verify_failed > 0) absl::PrintF("wrong        first: %s\n", s.first_verify_message);
}

void PrintJson(const BenchConfig& c, const Summary& s) {
  const auto num = [](double v) {
    return std::isfinite(v) ? DoubleText(v) : JsonQuote(DoubleText(v));
  };
  std::vector<std::string> failures;
  for (const auto& [code, n] : s.failures) {
    failures.push_back(absl::StrCat(JsonQuote(absl::StatusCodeToString(code)), ":", n));
  }
  const double mean = s.latency.empty() ? 0.0
      : std::accumulate(s.latency.begin(), s.latency.end(), 0.0) / s.latency.size();
  std::string out = absl::StrCat(
      "{\"target\":", JsonQuote(c.target), ",\"clients\":", c.clients,
      ",\"shared_channel\":", c.shared_channel ? "true" : "false",
      ",\"mode\":", JsonQuote(ModeName(c.mode)), ",\"dtype\":", JsonQuote(NameOf(c.dtype)),
      ",\"ops\":", JsonQuote(c.ops_text), ",\"min_bytes\":", c.min_bytes,
      ",\"max_bytes\":", c.max_bytes, ",\"row_length\":", c.row_length,
      ",\"backend\":", JsonQuote(s.backend), ",\"device\":", JsonQuote(s.device),
      ",\"requests\":{\"ok\":", s.ok, ",\"failed\":", s.failed);
  if (c.verify) absl::StrAppend(&out, ",\"wrong\":", s.verify_failed);
  absl::StrAppend(&out, "},\"failures\":{", absl::StrJoin(failures, ","), "}",
                  ",\"seconds\":", num(s.seconds), ",\"bytes\":", s.bytes,
                  ",\"gb_per_s\":", num(s.bytes / s.seconds / 1e9),
                  ",\"requests_per_s\":", num(s.ok / s.seconds),
                  ",\"latency_seconds\":{\"p50\":", num(Percentile(s.latency, 0.5)),
                  ",\"p99\":", num(Percentile(s.latency, 0.99)),
                  ",\"max\":", num(s.latency.empty() ? 0.0 : s.latency.back()),
                  ",\"mean\":", num(mean), "}",
                  ",\"server_seconds\":{\"p50\":", num(Percentile(s.server, 0.5)),
                  ",\"p99\":", num(Percentile(s.server, 0.99)), "}}\n");
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  absl::StatusOr<BenchConfig> config = cl.ok() ? ParseConfig(*cl) : cl.status();
  if (!config.ok()) {
    absl::FPrintF(stderr, "tally bench: %s\n(see tally bench --help)\n", config.status().message());
    return kExitUsage;
  }
  const BenchConfig& c = *config;

  // Separate channels get separate connections only with a local subchannel
  // pool (ChannelOptions::dedicated_connection); otherwise gRPC shares one.
  std::vector<std::unique_ptr<Client>> clients;
  std::shared_ptr<grpc::Channel> shared;
  if (c.shared_channel) shared = MakeChannel(c.target);
  for (int i = 0; i < c.clients; ++i) {
    clients.push_back(std::make_unique<Client>(
        shared ? shared : MakeChannel(c.target, ChannelOptions{.dedicated_connection = true})));
  }

  // Fail fast on a wrong address instead of reporting a run of UNAVAILABLE.
  if (!clients[0]->WaitForConnected(absl::Seconds(5))) {
    absl::FPrintF(stderr, "tally bench: cannot connect to %s within 5 s\n", c.target);
    return kExitFailure;
  }

  std::vector<ClientStats> stats(c.clients);
  std::latch ready(c.clients);
  std::latch go(1);
  absl::Time start;
  std::atomic<std::uint64_t> next_request{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < c.clients; ++i) {
    threads.emplace_back([&, i] {
      RunClient(c, i, *clients[i], ready, go, start, next_request, stats[i]);
    });
  }
  // Start the clock once every client has its data and connection.
  ready.wait();
  start = absl::Now();
  go.count_down();
  for (std::thread& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);

  const Summary summary = Summarize(stats, seconds);
  if (c.json) {
    PrintJson(c, summary);
  } else {
    PrintText(c, summary);
  }
  return summary.failed == 0 && summary.verify_failed == 0 && summary.ok > 0 ? kExitOk
                                                                            : kExitFailure;
}

}  // namespace tally::client::tool
