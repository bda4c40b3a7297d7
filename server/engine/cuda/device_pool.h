// Every GPU the backend uses: its lanes, its share of the pinned staging
// pool, and whether it is still usable. Requests check a lane out (the
// least-busy device first), waiting a bounded time when every lane is busy,
// and give it back when they end.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/device_lane.h"
#include "server/engine/cuda/pinned_pool.h"
#include "server/engine/lane_slots.h"

namespace tally::cuda {

struct DevicePoolOptions {
  std::vector<int> devices;          // CUDA ordinals, checked and distinct
  std::uint64_t pinned_pool_bytes = 0;  // staging, split evenly over devices
  std::uint64_t chunk_bytes = 0;     // a multiple of EnginePolicy::kChunkAlignment
  int lanes_per_device = 0;
  std::uint64_t state_bytes = 0;     // per lane
};

class DevicePool {
 public:
  class Lease;

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DevicePool>> Create(
      const DevicePoolOptions& options);
  ~DevicePool();

  // A lane, waiting up to `wait` for one to be free: RESOURCE_EXHAUSTED
  // after that, UNAVAILABLE when every device is lost. `waited` gets the
  // seconds spent waiting. `only_device` >= 0: a lane of that device (the
  // one that holds the data), UNAVAILABLE when it is lost.
  [[nodiscard]] absl::StatusOr<Lease> Checkout(std::chrono::milliseconds wait, double* waited,
                                               int only_device = -1);

  // A sticky error: no new request goes to `device`, and DeviceHealth() says
  // why. Requests holding its lanes finish (with the error) and give them back.
  void MarkLost(int device, const std::string& why);
  // UNAVAILABLE when every device is lost (nothing can run), naming them.
  absl::Status Health() const;
  // UNAVAILABLE when `device` is lost, saying why.
  absl::Status DeviceHealth(int device) const;

  // The staging blocks of `device` (the pool is thread-safe, so a const
  // pool lends them too).
  PinnedPool& pinned(int device) const;
  // The staging pool over all devices.
  std::uint64_t pinned_total() const;
  std::uint64_t pinned_used() const;

  const std::vector<int>& ordinals() const { return ordinals_; }
  // Whether `device` is one of the GPUs the pool uses.
  bool Uses(int device) const { return Find(device) != nullptr; }
  // "NVIDIA H100 80GB HBM3 (0)"
  const std::string& DeviceName(int device) const;
  // "NVIDIA H100 80GB HBM3"
  const std::string& Model(int device) const;
  int lanes_per_device() const { return lanes_per_device_; }
  std::uint64_t chunk_bytes() const { return chunk_bytes_; }
  std::uint64_t state_bytes() const { return state_bytes_; }
  // The scratch every lane has (the smallest over devices).
  std::size_t scratch_bytes() const { return scratch_bytes_; }

 private:
  struct Device {
    int ordinal = 0;
    std::string name;  // the model, from cudaGetDeviceProperties
    std::string label; // "name (ordinal)"
    std::unique_ptr<PinnedPool> pinned;
    std::vector<std::unique_ptr<DeviceLane>> lanes;  // lane i is LaneSlots' lane i of this place
    std::string lost_why;  // empty while the device serves (LaneSlots holds the lanes' side)
  };
  DevicePool() = default;
  Device* Find(int ordinal);
  const Device* Find(int ordinal) const;
  void Return(DeviceLane* lane);

  std::vector<int> ordinals_;
  int lanes_per_device_ = 0;
  std::uint64_t chunk_bytes_ = 0;
  std::uint64_t state_bytes_ = 0;
  std::size_t scratch_bytes_ = 0;
  PinnedBuffer upstream_;  // the one pinned allocation: staging + lane results

  mutable std::mutex mutex_;  // devices_' lost_why
  std::vector<Device> devices_;
  std::unique_ptr<LaneSlots> slots_;  // free lanes; place i is devices_[i]
};

// A checked-out lane; destroying it gives the lane back (the holder has
// drained the lane's streams first).
class DevicePool::Lease {
 public:
  Lease() = default;
  Lease(DevicePool* pool, DeviceLane* lane) : pool_(pool), lane_(lane) {}
  Lease(Lease&& o) noexcept : pool_(o.pool_), lane_(std::exchange(o.lane_, nullptr)) {}
  Lease& operator=(Lease&& o) noexcept {
    if (this != &o) {
      Reset();
      pool_ = o.pool_;
      lane_ = std::exchange(o.lane_, nullptr);
    }
    return *this;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { Reset(); }

  DeviceLane* lane() const { return lane_; }
  DeviceLane* operator->() const { return lane_; }
  explicit operator bool() const { return lane_ != nullptr; }
  void Reset() {
    if (lane_ != nullptr) pool_->Return(std::exchange(lane_, nullptr));
  }

 private:
  DevicePool* pool_ = nullptr;
  DeviceLane* lane_ = nullptr;
};

}  // namespace tally::cuda
