#include "server/frontend/stream_watchdog.h"

#include <vector>

namespace tally {

StreamWatchdog::StreamWatchdog(std::chrono::milliseconds period) : period_(period) {
  if (period_.count() > 0) thread_ = std::thread([this] { Run(); });
}

StreamWatchdog::~StreamWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StreamWatchdog::Add(Watched* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.insert(stream);
}

void StreamWatchdog::Remove(Watched* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(stream);
}

void StreamWatchdog::Run() {
  std::vector<Watched*> batch;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, period_, [this] { return stop_; })) {
    batch.assign(streams_.begin(), streams_.end());
    for (Watched* s : batch) s->Ref();
    lock.unlock();
    const Clock::time_point now = Clock::now();
    for (Watched* s : batch) {
      s->CheckProgress(now);
      s->Unref();
    }
    lock.lock();
  }
}

}  // namespace tally
