// The hostile-client tests' fixture: a real server (CPU backend, loopback)
// started per test, a well-behaved client measured alone and then under
// attack, and the checks that the server held on and gave everything back.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"

#include "tests/integration/hostile_clients.h"
#include "tests/integration/server_fixture.h"

namespace tally::testing {

// Requests per measurement of the well-behaved client (half unary, half
// streams); its p99 is then the second-worst request.
constexpr int kRequests = 100;
// Below this, a p99 counts as served normally whatever the unloaded one
// was: a refused request takes --admission_wait_ms (2 s) to be refused.
constexpr double kLatencyFloorSeconds = 0.5;

// A real shared-memory object of `bytes` bytes, unlinked when it goes.
class ShmObject {
 public:
  ShmObject(const std::string& name, std::size_t bytes) : name_("/" + name) {
    const int fd = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ok_ = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    if (fd >= 0) ::close(fd);
  }
  ~ShmObject() { ::shm_unlink(name_.c_str()); }
  bool ok() const { return ok_; }
  // As a client that shrinks its object under a registered region does.
  bool Truncate(std::size_t bytes) {
    const int fd = ::shm_open(name_.c_str(), O_RDWR, 0600);
    const bool done = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    if (fd >= 0) ::close(fd);
    return done;
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool ok_ = false;
};

// The server's log lines while it lives, kept to be read by the test: a
// sink on spdlog's default logger, which the server logs to.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100000)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  // The lines at `level` or above that contain `text`.
  std::vector<std::string> Lines(const std::string& text, spdlog::level::level_enum level = spdlog::level::trace) {
    std::vector<std::string> out;
    for (const spdlog::details::log_msg_buffer& m : sink_->last_raw()) {
      const std::string line(m.payload.data(), m.payload.size());
      if (m.level >= level && line.find(text) != std::string::npos) out.push_back(line);
    }
    return out;
  }
  int Count(spdlog::level::level_enum level) {
    int n = 0;
    for (const spdlog::details::log_msg_buffer& m : sink_->last_raw()) n += m.level >= level;
    return n;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

class HostileClientTest : public ServerFixture {
 protected:
  void SetUp() override {}  // each test starts its own server
  // The log capture outlives the server, which may log until it is gone.
  void TearDown() override {
    server_.reset();
    log_.reset();
  }

  // Captures the server's log from here until the test ends.
  LogCapture& CaptureLog() {
    if (!log_) log_ = std::make_unique<LogCapture>();
    return *log_;
  }

  void Start(ServerConfig config) {
    StartServer(config);
    target_ = "127.0.0.1:" + std::to_string(server_->port());
  }

  // The well-behaved client alone, after a few requests to warm up.
  hostile::ServedRun Unloaded() {
    hostile::WellBehavedClient(channel_, 4);
    hostile::ServedRun run = hostile::WellBehavedClient(channel_, kRequests);
    EXPECT_EQ(run.failures, 0) << run.Summary();
    return run;
  }

  void ExpectServedAsUnloaded(const hostile::ServedRun& unloaded, const hostile::ServedRun& attacked) {
    std::printf("well-behaved client, unloaded:     %s\nwell-behaved client, under attack: %s\n",
                unloaded.Summary().c_str(), attacked.Summary().c_str());
    EXPECT_EQ(attacked.failures, 0) << attacked.Summary();
    EXPECT_EQ(static_cast<int>(attacked.seconds.size()), kRequests);
    const double limit = std::max(2 * unloaded.Percentile(99), kLatencyFloorSeconds);
    EXPECT_LE(attacked.Percentile(99), limit) << "unloaded: " << unloaded.Summary()
                                              << "\nunder attack: " << attacked.Summary();
  }

  // Everything the attack held has gone back.
  void ExpectNothingHeld() {
    EXPECT_TRUE(MetricReaches("tally_in_flight_bytes", 0)) << Metric("tally_in_flight_bytes");
    EXPECT_TRUE(MetricReaches("tally_requests_in_flight", 0)) << Metric("tally_requests_in_flight");
  }

  std::string target_;
  std::unique_ptr<LogCapture> log_;
};

}  // namespace tally::testing
