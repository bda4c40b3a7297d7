// What the front end records about every request, in one place: the log line
// for failures and the request metrics. Created when a request arrives,
// completed exactly once with its final status.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/metrics/metrics.h"
#include "spdlog/common.h"
#include "tally/rules/op.h"

namespace tally {

// Counts requests in progress, so a drain can wait for exactly those (and not
// for long-lived calls such as health watches).
class InFlightTracker {
 public:
  void Begin();
  void End();
  // True once no request is in progress; false if `deadline` came first.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);

 private:
  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;
};

// Logs `message` at `level` at most once per `cause` (a short fixed key,
// never the client's input) per 10 s, the next line saying how many were
// held back: for whatever a client can make happen over and over.
void LogLimited(const std::string& cause, spdlog::level::level_enum level, const std::string& message);
// Sends protobuf's own log (a message with a string that is not UTF-8, one
// line per message parsed) through LogLimited. Process-wide; once is enough.
void RouteProtobufLog();

class RequestRecord {
 public:
  RequestRecord(Metrics* metrics, Metrics::Method method, InFlightTracker& tracker);

  void SetOps(std::vector<rules::OpKind> ops) { ops_ = std::move(ops); }
  // The caller, once authenticated; until then the request counts as
  // anonymous.
  void SetIdentity(const std::string& identity);
  void AddBytes(std::uint64_t bytes);
  double Seconds() const;
  // Notes that the request reached `phase` now (a string literal). With
  // --log_level=trace, Complete() logs every phase's time since the start:
  // where a request's server time goes, on a live server.
  void Phase(const char* phase);
  // Logs a failure at a level that matches its cause and updates metrics.
  void Complete(const absl::Status& status, std::uint64_t elements);

 private:
  Metrics* metrics_;
  Metrics::Method method_;
  InFlightTracker& tracker_;
  std::chrono::steady_clock::time_point start_;
  std::vector<rules::OpKind> ops_;
  int identity_ = Metrics::kAnonymousIdentity;
  bool tracing_ = false;
  std::vector<std::pair<const char*, double>> phases_;
};

}  // namespace tally
