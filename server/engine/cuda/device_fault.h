// A fault for tests of losing a GPU under load (--fault_lose_gpu): after a
// delay, one device is marked lost exactly as a sticky CUDA error marks it
// (DevicePool::MarkLost), so that what follows (requests going to the other
// devices, health and metrics naming the lost one, nothing hanging) can be
// checked on any machine without breaking a GPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/engine/cuda/device_pool.h"

namespace tally::cuda {

struct LoseGpuFault {
  int device = 0;
  std::chrono::milliseconds after{0};
};

// "ORDINAL@SECONDS" (SECONDS may have a fraction); empty: no fault.
// INVALID_ARGUMENT naming --fault_lose_gpu for anything else.
[[nodiscard]] absl::StatusOr<std::optional<LoseGpuFault>> ParseLoseGpuFault(absl::string_view text);

// Marks `fault.device` lost in `pool` after `fault.after`, on a thread of
// its own; destroying it first cancels the fault.
class DeviceFault {
 public:
  DeviceFault(DevicePool* pool, LoseGpuFault fault);
  ~DeviceFault();
  DeviceFault(const DeviceFault&) = delete;
  DeviceFault& operator=(const DeviceFault&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cancelled_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tally::cuda
