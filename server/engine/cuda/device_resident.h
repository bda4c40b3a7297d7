// The cuda backend's resident memory: one cudaMalloc on a GPU per dataset,
// filled from any Extent: host bytes through the device's pinned staging
// blocks on a lane's copy stream (the lane is held only while the upload
// runs), device bytes by a device-to-device copy.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "server/engine/cuda/device_pool.h"
#include "server/engine/resident.h"

namespace tally::cuda {

// `bytes` on GPU `device` of `pool` (which outlives the memory). Waits up to
// `lane_wait` for a lane when the upload starts. RESOURCE_EXHAUSTED when the
// GPU has not that much free.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateDeviceResident(
    DevicePool* pool, int device, std::uint64_t bytes, std::chrono::milliseconds lane_wait);

}  // namespace tally::cuda
