// DeviceLane: allocation at start, and draining at the end of a request.
#include "server/engine/cuda/device_lane.h"

#include "absl/strings/str_cat.h"
#include "tally/kernels/cuda_error.h"

namespace tally::cuda {
namespace {

cudaError_t Allocate(const LaneSizes& sizes, Stream* copy, Stream* compute,
                     std::array<DeviceLane::Slot, EnginePolicy::kChunkSlots>* slots,
                     DeviceBuffer* state, DeviceBuffer* scratch) {
  TALLY_CUDA_TRY(Stream::Create(copy));
  TALLY_CUDA_TRY(Stream::Create(compute));
  for (DeviceLane::Slot& s : *slots) {
    TALLY_CUDA_TRY(DeviceBuffer::Create(sizes.chunk_bytes, &s.chunk));
    TALLY_CUDA_TRY(Event::Create(/*timing=*/true, &s.copy_start));
    TALLY_CUDA_TRY(Event::Create(/*timing=*/true, &s.copy_done));
    TALLY_CUDA_TRY(Event::Create(/*timing=*/true, &s.kernel_start));
    TALLY_CUDA_TRY(Event::Create(/*timing=*/true, &s.kernel_done));
  }
  TALLY_CUDA_TRY(DeviceBuffer::Create(sizes.state_bytes, state));
  TALLY_CUDA_TRY(DeviceBuffer::Create(sizes.scratch_bytes, scratch));
  return cudaSuccess;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceLane>> DeviceLane::Create(int device, int index,
                                                               const LaneSizes& sizes,
                                                               std::span<std::byte> result) {
  std::unique_ptr<DeviceLane> lane(new DeviceLane());
  lane->device_ = device;
  lane->index_ = index;
  lane->chunk_bytes_ = sizes.chunk_bytes;
  lane->result_ = result;
  ScopedDevice on(device);
  if (Allocate(sizes, &lane->copy_, &lane->compute_, &lane->slots_, &lane->state_,
               &lane->scratch_) != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA device ", device, " lane ", index, ": ", LastErrorWhere(),
                     " (lower --cuda_streams_per_device, --cuda_chunk_bytes or "
                     "--cuda_max_state_bytes)."));
  }
  return lane;
}

cudaError_t DeviceLane::Synchronize() {
  TALLY_CUDA_TRY(cudaStreamSynchronize(copy_.get()));
  TALLY_CUDA_TRY(cudaStreamSynchronize(compute_.get()));
  for (Slot& s : slots_) s.pending = false;
  return cudaSuccess;
}

}  // namespace tally::cuda
