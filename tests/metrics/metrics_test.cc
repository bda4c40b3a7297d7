// tally::Metrics: names, labels and values as scraped, the exposer's HTTP
// endpoint, and promtool's verdict on the exposition text.
#include "server/metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace {

using Labels = std::map<std::string, std::string>;
using rules::OpKind;

struct Sample {
  std::string name;
  Labels labels;
  double value;
};

// Parses the text exposition format (no escapes inside label values needed
// for what Metrics emits, but they are handled anyway).
std::vector<Sample> Parse(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const size_t eq = line.find('=', i);
        std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;  // skip ="
        for (; line[j] != '"'; ++j) {
          if (line[j] == '\\') ++j;
          value += line[j];
        }
        s.labels[key] = value;
        i = j + 1;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    s.value = std::stod(line.substr(i + 1));
    out.push_back(std::move(s));
  }
  return out;
}

// The value of the one sample called `name` whose labels include `want`.
std::optional<double> Value(const std::string& text, const std::string& name, const Labels& want) {
  std::optional<double> found;
  for (const Sample& s : Parse(text)) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : want) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) match = false;
    }
    if (!match) continue;
    EXPECT_FALSE(found.has_value()) << "more than one " << name << " sample matches";
    found = s.value;
  }
  return found;
}

int CountSamples(const std::string& text, const std::string& name) {
  int n = 0;
  for (const Sample& s : Parse(text)) n += s.name == name;
  return n;
}

Metrics::Options Cpu() { return {.backend = "cpu", .device = "Test CPU", .version = "9.9.9"}; }

TEST(Metrics, BuildInfoCarriesVersionBackendAndDevice) {
  Metrics m(Cpu());
  const std::string text = m.Scrape();
  EXPECT_EQ(Value(text, "tally_build_info", {{"version", "9.9.9"}, {"backend", "cpu"},
                                             {"device", "Test CPU"}}),
            1.0);
}

TEST(Metrics, EveryFamilyIsPrefixedAndHasHelpAndType) {
  Metrics m(Cpu());
  m.HostToDevice(0, 1, 0.1);  // families with per-device children need one
  m.SetDeviceMemory(0, "G", 1, 2);
  m.SetDeviceServing("cuda:0", true);
  m.SetResidentDatasets("cuda:0", 1, 1, 0);
  const std::string text = m.Scrape();
  const std::vector<std::string> families = {
      "tally_build_info",           "tally_requests_total",
      "tally_aggregations_total",   "tally_request_duration_seconds",
      "tally_requests_in_flight",   "tally_admission_rejections_total",
      "tally_received_bytes_total", "tally_processed_elements_total",
      "tally_in_flight_bytes",      "tally_queue_wait_seconds",
      "tally_pinned_pool_capacity_bytes", "tally_pinned_pool_used_bytes",
      "tally_host_to_device_bytes_total", "tally_host_to_device_seconds_total",
      "tally_host_to_device_direct_bytes_total",
      "tally_kernel_seconds_total", "tally_device_memory_used_bytes",
      "tally_device_memory_capacity_bytes", "tally_dataset_resident_bytes",
      "tally_datasets",             "tally_dataset_limit_bytes",
      "tally_dataset_uploads_total", "tally_dataset_queries_total",
      "tally_dataset_evictions_total", "tally_dataset_expiries_total",
      "tally_dataset_deletions_total", "tally_quota_rejections_total",
      "tally_regions",               "tally_region_bytes",
      "tally_region_limit_bytes",    "tally_region_queries_total",
      "tally_routed_requests_total", "tally_device_serving",
      "tally_group_by_requests_total", "tally_group_by_rows_total", "tally_group_by_groups_total"};
  for (const auto& f : families) {
    EXPECT_NE(text.find("# HELP " + f + " "), std::string::npos) << f;
    EXPECT_NE(text.find("# TYPE " + f + " "), std::string::npos) << f;
  }
  int declared = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      ++declared;
      EXPECT_EQ(line.rfind("# TYPE tally_", 0), 0u) << line;
    }
  }
  EXPECT_EQ(declared, static_cast<int>(families.size()));
  // The backend is a constant label on every sample.
  for (const Sample& s : Parse(text)) EXPECT_EQ(s.labels.at("backend"), "cpu") << s.name;
}

TEST(Metrics, SuccessSeriesExistBeforeAnyRequest) {
  Metrics m(Cpu());
  const std::string text = m.Scrape();
  EXPECT_EQ(Value(text, "tally_requests_total", {{"method", "Aggregate"}, {"code", "OK"}}), 0.0);
  EXPECT_EQ(Value(text, "tally_requests_total", {{"method", "AggregateStream"}, {"code", "OK"}}),
            0.0);
  EXPECT_EQ(Value(text, "tally_requests_total", {{"method", "PutDataset"}, {"code", "OK"}}), 0.0);
  EXPECT_EQ(CountSamples(text, "tally_requests_total"), Metrics::kNumMethods);
  // Op series for the methods that carry aggregations only.
  // GroupBy and GroupByStream carry them too.
  EXPECT_EQ(CountSamples(text, "tally_aggregations_total"), 6 * rules::kNumOpKinds);
  EXPECT_EQ(Value(text, "tally_aggregations_total",
                  {{"method", "AggregateDataset"}, {"op", "histogram"}, {"code", "OK"}}),
            0.0);
  EXPECT_EQ(Value(text, "tally_aggregations_total",
                  {{"method", "AggregateStream"}, {"op", "sum_squares"}, {"code", "OK"}}),
            0.0);
}

TEST(Metrics, RequestsCountedByMethodOpAndCode) {
  Metrics m(Cpu());
  const std::array<OpKind, 2> two = {OpKind::kSum, OpKind::kHistogram};
  const std::array<OpKind, 1> one = {OpKind::kSum};
  for (int i = 0; i < 3; ++i) {
    m.RequestStarted(Metrics::Method::kAggregate);
    m.RequestFinished(Metrics::Method::kAggregate, two, 0, 0.001);
  }
  m.RequestStarted(Metrics::Method::kAggregateStream);
  m.RequestFinished(Metrics::Method::kAggregateStream, one, 3, 0.001);
  m.RequestStarted(Metrics::Method::kAggregate);
  m.RequestFinished(Metrics::Method::kAggregate, {}, 8, 0.001);
  m.RequestStarted(Metrics::Method::kAggregate);
  m.RequestFinished(Metrics::Method::kAggregate, {}, 99, 0.001);  // not a gRPC code

  const std::string t = m.Scrape();
  EXPECT_EQ(Value(t, "tally_requests_total", {{"method", "Aggregate"}, {"code", "OK"}}), 3.0);
  EXPECT_EQ(Value(t, "tally_requests_total",
                  {{"method", "AggregateStream"}, {"code", "INVALID_ARGUMENT"}}),
            1.0);
  EXPECT_EQ(Value(t, "tally_requests_total",
                  {{"method", "Aggregate"}, {"code", "RESOURCE_EXHAUSTED"}}),
            1.0);
  EXPECT_EQ(Value(t, "tally_requests_total", {{"method", "Aggregate"}, {"code", "UNKNOWN"}}), 1.0);
  EXPECT_EQ(Value(t, "tally_aggregations_total",
                  {{"method", "Aggregate"}, {"op", "sum"}, {"code", "OK"}}),
            3.0);
  EXPECT_EQ(Value(t, "tally_aggregations_total",
                  {{"method", "Aggregate"}, {"op", "histogram"}, {"code", "OK"}}),
            3.0);
  EXPECT_EQ(Value(t, "tally_aggregations_total",
                  {{"method", "Aggregate"}, {"op", "mean"}, {"code", "OK"}}),
            0.0);
  EXPECT_EQ(Value(t, "tally_aggregations_total",
                  {{"method", "AggregateStream"}, {"op", "sum"}, {"code", "INVALID_ARGUMENT"}}),
            1.0);
  EXPECT_EQ(Value(t, "tally_requests_in_flight", {{"method", "Aggregate"}}), 0.0);
}

TEST(Metrics, CodeNamesAreGrpcCanonical) {
  EXPECT_STREQ(Metrics::CodeName(0), "OK");
  EXPECT_STREQ(Metrics::CodeName(4), "DEADLINE_EXCEEDED");
  EXPECT_STREQ(Metrics::CodeName(14), "UNAVAILABLE");
  EXPECT_STREQ(Metrics::CodeName(16), "UNAUTHENTICATED");
  EXPECT_STREQ(Metrics::CodeName(-1), "UNKNOWN");
  EXPECT_STREQ(Metrics::CodeName(17), "UNKNOWN");
}

TEST(Metrics, InFlightRequestsAndBytes) {
  Metrics m(Cpu());
  m.RequestStarted(Metrics::Method::kAggregateStream);
  m.RequestStarted(Metrics::Method::kAggregateStream);
  m.RequestStarted(Metrics::Method::kAggregate);
  m.InFlightBytes(1000);
  m.InFlightBytes(24);
  m.InFlightBytes(-500);
  std::string t = m.Scrape();
  EXPECT_EQ(Value(t, "tally_requests_in_flight", {{"method", "AggregateStream"}}), 2.0);
  EXPECT_EQ(Value(t, "tally_requests_in_flight", {{"method", "Aggregate"}}), 1.0);
  EXPECT_EQ(Value(t, "tally_in_flight_bytes", {}), 524.0);
  m.RequestFinished(Metrics::Method::kAggregateStream, {}, 1, 0.5);
  t = m.Scrape();
  EXPECT_EQ(Value(t, "tally_requests_in_flight", {{"method", "AggregateStream"}}), 1.0);
  EXPECT_EQ(Value(t, "tally_requests_total", {{"method", "AggregateStream"}, {"code", "CANCELLED"}}),
            1.0);
}

TEST(Metrics, DurationHistogramBucketsFrom50usTo60s) {
  Metrics m(Cpu());
  for (double s : {40e-6, 50e-6, 0.003, 59.0, 61.0}) {
    m.RequestStarted(Metrics::Method::kAggregate);
    m.RequestFinished(Metrics::Method::kAggregate, {}, 0, s);
  }
  const std::string t = m.Scrape();
  std::vector<double> bounds;
  for (const Sample& s : Parse(t)) {
    if (s.name == "tally_request_duration_seconds_bucket" && s.labels.at("method") == "Aggregate" &&
        s.labels.at("le") != "+Inf") {
      bounds.push_back(std::stod(s.labels.at("le")));
    }
  }
  ASSERT_EQ(bounds.size(), Metrics::kDurationBuckets.size());
  EXPECT_DOUBLE_EQ(bounds.front(), 50e-6);
  EXPECT_DOUBLE_EQ(bounds.back(), 60.0);
  const Labels agg = {{"method", "Aggregate"}};
  auto bucket = [&](const std::string& le) {
    Labels l = agg;
    l["le"] = le;
    return Value(t, "tally_request_duration_seconds_bucket", l);
  };
  EXPECT_EQ(bucket("5e-05"), 2.0);  // le is inclusive: 40 us and 50 us
  EXPECT_EQ(bucket("0.005"), 3.0);
  EXPECT_EQ(bucket("60"), 4.0);
  EXPECT_EQ(bucket("+Inf"), 5.0);
  EXPECT_EQ(Value(t, "tally_request_duration_seconds_count", agg), 5.0);
  EXPECT_NEAR(*Value(t, "tally_request_duration_seconds_sum", agg), 40e-6 + 50e-6 + 0.003 + 120.0,
              1e-9);
  EXPECT_EQ(Value(t, "tally_request_duration_seconds_count", {{"method", "AggregateStream"}}), 0.0);
}

TEST(Metrics, ThroughputAndQueueCounters) {
  Metrics m(Cpu());
  m.BytesReceived(1 << 20);
  m.BytesReceived(5);
  m.ElementsProcessed(262144);
  m.AdmissionRejected();
  m.QueueWait(0.002);
  m.SetPinnedPool(64 << 20, 3 << 20);
  m.Routed(Metrics::Route::kGpu);
  m.Routed(Metrics::Route::kCpuLanesBusy);
  m.Routed(Metrics::Route::kCpuLanesBusy);
  const std::string t = m.Scrape();
  EXPECT_EQ(Value(t, "tally_received_bytes_total", {}), (1 << 20) + 5.0);
  EXPECT_EQ(Value(t, "tally_processed_elements_total", {}), 262144.0);
  EXPECT_EQ(Value(t, "tally_admission_rejections_total", {}), 1.0);
  EXPECT_EQ(Value(t, "tally_queue_wait_seconds_count", {}), 1.0);
  EXPECT_EQ(Value(t, "tally_queue_wait_seconds_bucket", {{"le", "0.001"}}), 0.0);
  EXPECT_EQ(Value(t, "tally_queue_wait_seconds_bucket", {{"le", "0.005"}}), 1.0);
  EXPECT_EQ(Value(t, "tally_pinned_pool_capacity_bytes", {}), 64.0 * (1 << 20));
  EXPECT_EQ(Value(t, "tally_pinned_pool_used_bytes", {}), 3.0 * (1 << 20));
  EXPECT_EQ(Value(t, "tally_routed_requests_total", {{"path", "gpu"}, {"reason", "cost"}}), 1.0);
  EXPECT_EQ(Value(t, "tally_routed_requests_total", {{"path", "cpu"}, {"reason", "cost"}}), 0.0);
  EXPECT_EQ(Value(t, "tally_routed_requests_total", {{"path", "cpu"}, {"reason", "lanes_busy"}}), 2.0);
}

TEST(Metrics, PerDeviceCountersAndMemory) {
  Metrics m({.backend = "cuda", .device = "NVIDIA H100 (0), NVIDIA H100 (1)", .version = "1"});
  m.HostToDevice(0, 1000, 0.25);
  m.HostToDevice(0, 24, 0.25);
  m.HostToDevice(1, 7, 0.125);
  m.HostToDevice(40, 9, 1.0);  // beyond the cached ordinals
  m.HostToDevice(40, 1, 1.0);
  m.KernelTime(1, 0.5);
  m.KernelTime(1, 0.25);
  m.HostToDeviceDirect(0, 1000);  // of device 0's 1024, copied from where received
  m.HostToDeviceDirect(40, 3);
  m.SetDeviceMemory(0, "NVIDIA H100 80GB HBM3", 100, 1000);
  m.SetDeviceMemory(0, "NVIDIA H100 80GB HBM3", 300, 1000);
  const std::string t = m.Scrape();
  EXPECT_EQ(Value(t, "tally_host_to_device_bytes_total", {{"device", "0"}, {"backend", "cuda"}}),
            1024.0);
  EXPECT_EQ(Value(t, "tally_host_to_device_seconds_total", {{"device", "0"}}), 0.5);
  EXPECT_EQ(Value(t, "tally_host_to_device_bytes_total", {{"device", "1"}}), 7.0);
  EXPECT_EQ(Value(t, "tally_host_to_device_bytes_total", {{"device", "40"}}), 10.0);
  EXPECT_EQ(Value(t, "tally_host_to_device_direct_bytes_total", {{"device", "0"}}), 1000.0);
  EXPECT_EQ(Value(t, "tally_host_to_device_direct_bytes_total", {{"device", "1"}}), 0.0);
  EXPECT_EQ(Value(t, "tally_host_to_device_direct_bytes_total", {{"device", "40"}}), 3.0);
  EXPECT_EQ(Value(t, "tally_kernel_seconds_total", {{"device", "1"}}), 0.75);
  EXPECT_EQ(Value(t, "tally_kernel_seconds_total", {{"device", "0"}}), 0.0);
  const Labels gpu0 = {{"device", "0"}, {"device_name", "NVIDIA H100 80GB HBM3"}};
  EXPECT_EQ(Value(t, "tally_device_memory_used_bytes", gpu0), 300.0);
  EXPECT_EQ(Value(t, "tally_device_memory_capacity_bytes", gpu0), 1000.0);
  // A lost device reads 0 beside one still serving.
  m.SetDeviceServing("cuda:0", true);
  m.SetDeviceServing("cuda:1", true);
  m.SetDeviceServing("cuda:1", false);
  const std::string after = m.Scrape();
  EXPECT_EQ(Value(after, "tally_device_serving", {{"place", "cuda:0"}}), 1.0);
  EXPECT_EQ(Value(after, "tally_device_serving", {{"place", "cuda:1"}}), 0.0);
}

TEST(Metrics, ConcurrentRecordingLosesNothing) {
  Metrics m(Cpu());
  constexpr int kThreads = 4, kEach = 5000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&m, i] {
      const std::array<OpKind, 1> op = {static_cast<OpKind>(i % rules::kNumOpKinds)};
      for (int j = 0; j < kEach; ++j) {
        m.RequestStarted(Metrics::Method::kAggregate);
        m.RequestFinished(Metrics::Method::kAggregate, op, j % 2 ? 0 : 13, 1e-4);
        m.HostToDevice(j % 3, 1, 0.0);
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string t = m.Scrape();
  EXPECT_EQ(Value(t, "tally_requests_total", {{"method", "Aggregate"}, {"code", "OK"}}),
            kThreads * kEach / 2.0);
  EXPECT_EQ(Value(t, "tally_requests_total", {{"method", "Aggregate"}, {"code", "INTERNAL"}}),
            kThreads * kEach / 2.0);
  double h2d = 0;
  for (const char* d : {"0", "1", "2"}) h2d += *Value(t, "tally_host_to_device_bytes_total", {{"device", d}});
  EXPECT_EQ(h2d, kThreads * kEach);
  EXPECT_EQ(Value(t, "tally_requests_in_flight", {{"method", "Aggregate"}}), 0.0);
}

// GET /metrics over a plain socket.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(Metrics, IdentityLabelIsBoundedAndNamesTheFirstIdentities) {
  Metrics::Options options = Cpu();
  options.max_identities = 2;
  Metrics m(options);
  const int alice = m.IdentitySlot("alice");
  const int bob = m.IdentitySlot("bob");
  const int carol = m.IdentitySlot("carol");  // past the limit
  const int dave = m.IdentitySlot("dave");
  EXPECT_EQ(m.IdentitySlot("alice"), alice);
  EXPECT_NE(alice, bob);
  EXPECT_EQ(carol, Metrics::kOtherIdentity);
  EXPECT_EQ(dave, Metrics::kOtherIdentity);
  EXPECT_EQ(m.IdentitySlot("anonymous"), Metrics::kAnonymousIdentity);
  for (int slot : {alice, bob, carol, dave, Metrics::kAnonymousIdentity}) {
    m.RequestStarted(Metrics::Method::kAggregate);
    m.RequestFinished(Metrics::Method::kAggregate, {}, 0, 0.001, slot);
    m.BytesReceived(10, slot);
  }
  m.QuotaRejected("--quota_streams");
  const std::string t = m.Scrape();
  const Labels ok = {{"method", "Aggregate"}, {"code", "OK"}};
  auto with = [&](const char* identity) {
    Labels l = ok;
    l["identity"] = identity;
    return l;
  };
  EXPECT_EQ(Value(t, "tally_requests_total", with("alice")), 1.0);
  EXPECT_EQ(Value(t, "tally_requests_total", with("bob")), 1.0);
  EXPECT_EQ(Value(t, "tally_requests_total", with("other")), 2.0);
  EXPECT_EQ(Value(t, "tally_requests_total", with("anonymous")), 1.0);
  EXPECT_EQ(Value(t, "tally_requests_total", with("carol")), std::nullopt);
  EXPECT_EQ(Value(t, "tally_received_bytes_total", {{"identity", "other"}}), 20.0);
  EXPECT_EQ(Value(t, "tally_received_bytes_total", {{"identity", "alice"}}), 10.0);
  EXPECT_EQ(Value(t, "tally_quota_rejections_total", {{"quota", "quota_streams"}}), 1.0);
  EXPECT_EQ(Value(t, "tally_quota_rejections_total", {{"quota", "quota_dataset_bytes"}}), 0.0);
}

TEST(Metrics, ServesOverHttpAndReportsBindFailures) {
  Metrics m(Cpu());
  EXPECT_TRUE(m.Serve("").ok());
  EXPECT_EQ(m.port(), 0);
  ASSERT_TRUE(m.Serve("127.0.0.1:0").ok());
  const int port = m.port();
  ASSERT_GT(port, 0);
  m.BytesReceived(77);
  const std::string body = HttpGet(port, "/metrics");
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body.substr(0, 200);
  EXPECT_NE(body.find("tally_received_bytes_total{backend=\"cpu\",identity=\"anonymous\"} 77"), std::string::npos);
  EXPECT_EQ(m.Serve("127.0.0.1:0").code(), absl::StatusCode::kFailedPrecondition);

  Metrics other(Cpu());
  const absl::Status taken = other.Serve("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(taken.code(), absl::StatusCode::kUnavailable) << taken;
  EXPECT_NE(taken.message().find(std::to_string(port)), std::string::npos) << taken;
  EXPECT_EQ(other.Serve("no-port").code(), absl::StatusCode::kInvalidArgument);
}

// Runs promtool check metrics on `text`; returns its exit status and output.
std::pair<int, std::string> Promtool(const std::string& text) {
  // Files of this process's own: ctest runs the tests that call this in
  // parallel, each in its own process, sharing TempDir().
  const std::string stem = testing::TempDir() + "/promtool-" + std::to_string(getpid());
  const std::string in = stem + ".txt", out = stem + ".out";
  std::ofstream(in) << text;
  const std::string cmd =
      std::string(TALLY_PROMTOOL) + " check metrics < " + in + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  std::remove(in.c_str());
  std::remove(out.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

TEST(Metrics, PromtoolAcceptsTheScrape) {
  if (std::string(TALLY_PROMTOOL).empty()) GTEST_SKIP() << "promtool not found";
  Metrics m({.backend = "cuda", .device = "GPU \"quoted\" \\ (0)", .version = "1.0.0"});
  const std::array<OpKind, 3> some = {OpKind::kMin, OpKind::kVariance, OpKind::kArgmax};
  m.RequestStarted(Metrics::Method::kAggregateStream);
  m.RequestFinished(Metrics::Method::kAggregateStream, some, 4, 2.0);
  m.HostToDevice(0, 10, 0.1);
  m.KernelTime(0, 0.1);
  m.SetDeviceMemory(0, "NVIDIA H200", 1, 2);
  m.QueueWait(1e-3);
  const auto [rc, out] = Promtool(m.Scrape());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << "promtool lint findings";
}

TEST(Metrics, PromtoolCatchesAMisnamedCounter) {
  if (std::string(TALLY_PROMTOOL).empty()) GTEST_SKIP() << "promtool not found";
  // The check above must be able to fail: a counter without _total.
  const auto [rc, out] = Promtool(
      "# HELP tally_bad_bytes A counter named like a gauge.\n"
      "# TYPE tally_bad_bytes counter\n"
      "tally_bad_bytes 1\n");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("_total"), std::string::npos) << out;
}

}  // namespace
}  // namespace tally
