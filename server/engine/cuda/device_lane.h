// One lane of a GPU: what one request in progress uses on its device, all of
// it allocated at start. A copy stream and a compute stream, so that the H2D
// copy of chunk k overlaps the kernels on chunk k-1; kChunkSlots device chunk
// buffers, each with the events that order the two streams and time them;
// device state for the plan's passes, kernel scratch, and a pinned host
// buffer the state is finalized into.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/tuning.h"

namespace tally::cuda {

struct LaneSizes {
  std::size_t chunk_bytes = 0;    // each device chunk buffer
  std::size_t state_bytes = 0;    // device state (all passes together)
  std::size_t scratch_bytes = 0;  // kernel scratch
};

class DeviceLane {
 public:
  struct Slot {
    DeviceBuffer chunk;
    Event copy_start, copy_done;      // around the H2D copy, on the copy stream
    Event kernel_start, kernel_done;  // around the passes, on the compute stream
    bool pending = false;             // work recorded and not yet waited on
    std::uint64_t bytes = 0;          // the pending copy's size
  };

  // On `device`; `result` is pinned host memory of sizes.state_bytes that
  // outlives the lane.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DeviceLane>> Create(
      int device, int index, const LaneSizes& sizes, std::span<std::byte> result);

  int device() const { return device_; }
  int index() const { return index_; }
  StreamView copy_stream() const { return copy_.view(); }
  StreamView compute_stream() const { return compute_.view(); }
  Slot& slot(std::uint64_t chunk) { return slots_[chunk % slots_.size()]; }
  std::array<Slot, EnginePolicy::kChunkSlots>& slots() { return slots_; }
  std::byte* state() const { return state_.data(); }
  std::size_t state_bytes() const { return state_.size(); }
  std::byte* scratch() const { return scratch_.data(); }
  std::size_t scratch_bytes() const { return scratch_.size(); }
  std::byte* result() const { return result_.data(); }
  std::size_t chunk_bytes() const { return chunk_bytes_; }

  // Waits for everything enqueued on both streams; clears the slots.
  [[nodiscard]] cudaError_t Synchronize();

 private:
  DeviceLane() = default;

  int device_ = 0;
  int index_ = 0;
  std::size_t chunk_bytes_ = 0;
  Stream copy_;
  Stream compute_;
  std::array<Slot, EnginePolicy::kChunkSlots> slots_;
  DeviceBuffer state_;
  DeviceBuffer scratch_;
  std::span<std::byte> result_;
};

}  // namespace tally::cuda
