#include "server/frontend/request_record.h"

#include <map>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace tally {
namespace {

// A client can repeat a failing call thousands of times a second (a query
// of a truncated region, a call during a drain); a log line each would bury
// everything else. So such lines are logged at most once per cause per
// interval: the first at once, then, at the next one after the interval,
// the latest with how many there were meanwhile.
constexpr auto kLimitedLogInterval = std::chrono::seconds(10);

class LimitedLog {
 public:
  static LimitedLog& Get() {
    static LimitedLog* log = new LimitedLog();  // never destroyed: requests may end during exit
    return *log;
  }

  void Log(const std::string& cause, spdlog::level::level_enum level, const std::string& message) {
    const auto now = std::chrono::steady_clock::now();
    std::uint64_t held_back = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Cause& c = causes_.size() < kMaxCauses || causes_.contains(cause) ? causes_[cause] : causes_["other"];
      if (c.seen && now - c.logged < kLimitedLogInterval) {
        ++c.held_back;
        return;
      }
      held_back = c.held_back;
      c = Cause{true, now, 0};
    }
    if (held_back == 0) {
      spdlog::log(level, "{}", message);
    } else {
      spdlog::log(level, "{} (and {} more like it in the last {} s)", message, held_back,
                  std::chrono::duration_cast<std::chrono::seconds>(kLimitedLogInterval).count());
    }
  }

 private:
  struct Cause {
    bool seen = false;
    std::chrono::steady_clock::time_point logged;
    std::uint64_t held_back = 0;  // not logged since then
  };
  std::mutex mu_;
  // Causes are few and fixed (a method and a code; protobuf's message
  // about a field), and bounded all the same.
  static constexpr std::size_t kMaxCauses = 1024;
  std::map<std::string, Cause> causes_;
};

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
  const auto spd = level >= google::protobuf::LOGLEVEL_FATAL   ? spdlog::level::critical
                   : level == google::protobuf::LOGLEVEL_ERROR ? spdlog::level::err
                   : level == google::protobuf::LOGLEVEL_WARNING ? spdlog::level::warn
                                                                 : spdlog::level::info;
  // A string field that is not UTF-8 is the sender's doing: gRPC refuses
  // the message, and protobuf says why each time.
  const bool clients = message.find("invalid UTF-8") != std::string::npos;
  LogLimited(absl::StrCat("protobuf ", file, ":", line, " ", message.substr(0, 120)),
             clients ? spdlog::level::info : spd,
             absl::StrCat("protobuf: ", message));
}

}  // namespace

void LogLimited(const std::string& cause, spdlog::level::level_enum level, const std::string& message) {
  LimitedLog::Get().Log(cause, level, message);
}

void RouteProtobufLog() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&ProtobufLog); });
}

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
      break;
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kUnauthenticated:
      // The client's doing (or a busy server's answer), returned with the
      // reason and counted in the metrics: no line at info level.
      spdlog::debug("request refused: {}", status.ToString());
      break;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      // Also the client's doing, or the server's state (a drain, a region's
      // object truncated, a call the backend does not serve), answered with
      // the reason; worth a line now and then, never one each.
      LogLimited(absl::StrCat(Metrics::MethodName(method_), " ", status.code()), spdlog::level::info,
                 absl::StrCat(Metrics::MethodName(method_), " refused: ", status.ToString()));
      break;
    default:
      LogLimited(absl::StrCat(Metrics::MethodName(method_), " ", status.code()), spdlog::level::err,
                 absl::StrCat(Metrics::MethodName(method_), " failed: ", status.ToString()));
      break;
  }
  if (metrics_ != nullptr) {
    if (status.ok()) metrics_->ElementsProcessed(elements);
    metrics_->RequestFinished(method_, ops_, static_cast<int>(status.code()), Seconds(), identity_);
  }
  tracker_.End();
}

}  // namespace tally
