// The cuda backend's attachments (server/engine/attachment.h): host memory
// registered with CUDA once, so requests copy straight from it, and GPU
// memory of another process opened from its CUDA IPC handle, reduced in
// place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "server/engine/attachment.h"
#include "server/engine/cuda/device_pool.h"

namespace tally::cuda {

// Registers `bytes` (a read-only mapping) with CUDA, portable to every GPU.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Attachment>> AttachPinnedHost(std::span<const std::byte> bytes);

// Opens `handle` (a cudaIpcMemHandle_t's bytes) on GPU `device` of `pool`
// and checks that the allocation holds at least `bytes`.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Attachment>> AttachIpc(const DevicePool& pool,
                                                                    std::span<const std::byte> handle,
                                                                    int device, std::uint64_t bytes);

}  // namespace tally::cuda
