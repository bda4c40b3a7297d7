#include "server/engine/cuda/device_fault.h"

#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tally::cuda {

absl::StatusOr<std::optional<LoseGpuFault>> ParseLoseGpuFault(absl::string_view text) {
  if (text.empty()) return std::nullopt;
  const std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits('@', 1));
  int device = -1;
  double seconds = -1.0;
  if (!absl::SimpleAtoi(parts.first, &device) || device < 0 || !absl::SimpleAtod(parts.second, &seconds) ||
      !std::isfinite(seconds) || seconds < 0 || seconds > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fault_lose_gpu=", text, ": expected ORDINAL@SECONDS, e.g. 1@10 to lose GPU 1 ten seconds after start."));
  }
  return LoseGpuFault{device, std::chrono::milliseconds(std::llround(seconds * 1000.0))};
}

DeviceFault::DeviceFault(DevicePool* pool, LoseGpuFault fault)
    : thread_([this, pool, fault] {
        std::unique_lock lock(mutex_);
        if (cancelled_.wait_for(lock, fault.after, [this] { return stop_; })) return;
        lock.unlock();
        pool->MarkLost(fault.device, "injected by --fault_lose_gpu (a test of losing a GPU)");
      }) {}

DeviceFault::~DeviceFault() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cancelled_.notify_all();
  thread_.join();
}

}  // namespace tally::cuda
