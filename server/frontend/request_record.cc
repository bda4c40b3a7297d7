#include "server/frontend/request_record.h"

#include "spdlog/spdlog.h"

namespace tally {

void InFlightTracker::Begin() {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
}

void InFlightTracker::End() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--in_flight_ == 0) idle_.notify_all();
}

bool InFlightTracker::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_until(lock, deadline, [this] { return in_flight_ == 0; });
}

RequestRecord::RequestRecord(Metrics* metrics, Metrics::Method method, InFlightTracker& tracker)
    : metrics_(metrics),
      method_(method),
      tracker_(tracker),
      start_(std::chrono::steady_clock::now()),
      tracing_(spdlog::should_log(spdlog::level::trace)) {
  tracker_.Begin();
  if (metrics_ != nullptr) metrics_->RequestStarted(method_);
}

void RequestRecord::SetIdentity(const std::string& identity) {
  if (metrics_ != nullptr) identity_ = metrics_->IdentitySlot(identity);
}

void RequestRecord::AddBytes(std::uint64_t bytes) {
  if (metrics_ != nullptr) metrics_->BytesReceived(bytes, identity_);
}

double RequestRecord::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void RequestRecord::Phase(const char* phase) {
  if (tracing_) phases_.emplace_back(phase, Seconds());
}

void RequestRecord::Complete(const absl::Status& status, std::uint64_t elements) {
  if (tracing_) {
    std::string line;
    for (const auto& [phase, at] : phases_) line += fmt::format(" {} {:.3f} ms,", phase, at * 1e3);
    spdlog::trace("{}:{} done {:.3f} ms", Metrics::MethodName(method_), line, Seconds() * 1e3);
  }
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kUnauthenticated:
      // The client's doing (or a busy server's answer), returned with the
      // reason and counted in the metrics: no line at info level.
      if (!status.ok()) spdlog::debug("request refused: {}", status.ToString());
      break;
    default:
      spdlog::error("request failed: {}", status.ToString());
      break;
  }
  if (metrics_ != nullptr) {
    if (status.ok()) metrics_->ElementsProcessed(elements);
    metrics_->RequestFinished(method_, ops_, static_cast<int>(status.code()), Seconds(), identity_);
  }
  tracker_.End();
}

}  // namespace tally
