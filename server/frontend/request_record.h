// What the front end records about every request, in one place: the log line
// for failures and the request metrics. Created when a request arrives,
// completed exactly once with its final status.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "server/metrics/metrics.h"
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
