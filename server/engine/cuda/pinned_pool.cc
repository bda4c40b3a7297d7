// PinnedPool: fixed blocks, FIFO reuse, each block's event says when the GPU
// is done with it.
#include "server/engine/cuda/pinned_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tally/kernels/cuda_error.h"

namespace tally::cuda {
namespace {

absl::Status Internal(cudaError_t err, const char* what) {
  (void)err;
  return absl::InternalError(absl::StrCat("pinned pool: ", what, ": ", LastErrorWhere()));
}

cudaError_t CreateEvent(int device, Event* out) {
  ScopedDevice on(device);
  return Event::Create(/*timing=*/false, out);
}

cudaError_t Wait(const Event& e) {
  TALLY_CUDA_TRY(cudaEventSynchronize(e.get()));
  return cudaSuccess;
}

cudaError_t RecordOn(const Event& e, StreamView s) {
  TALLY_CUDA_TRY(cudaEventRecord(e.get(), s.get()));
  return cudaSuccess;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PinnedPool>> PinnedPool::Create(std::span<std::byte> upstream,
                                                               std::size_t block_bytes,
                                                               int device) {
  if (block_bytes == 0) return absl::InvalidArgumentError("pinned pool: block size is 0.");
  std::unique_ptr<PinnedPool> pool(new PinnedPool());
  pool->device_ = device;
  pool->block_bytes_ = block_bytes;
  const std::size_t n = upstream.size() / block_bytes;
  pool->slots_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    Slot& s = pool->slots_[i];
    s.data = upstream.data() + i * block_bytes;
    if (const cudaError_t err = CreateEvent(device, &s.released); err != cudaSuccess) {
      return Internal(err, "creating a block's event");
    }
    pool->free_.push_back(static_cast<int>(i));
  }
  return pool;
}

absl::StatusOr<PinnedPool::Block> PinnedPool::Acquire(std::chrono::milliseconds wait) {
  int index = -1;
  {
    std::unique_lock lock(mutex_);
    if (!freed_.wait_for(lock, wait, [&] { return !free_.empty(); })) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "pinned pool: all ", slots_.size(), " staging blocks of ", block_bytes_,
          " bytes stayed busy for ", wait.count(), " ms; raise --pinned_pool_bytes."));
    }
    index = free_.front();
    free_.pop_front();
  }
  Slot& s = slots_[static_cast<std::size_t>(index)];
  if (s.pending) {
    // The host is about to write the block: the copy that read it must be done.
    if (const cudaError_t err = Wait(s.released); err != cudaSuccess) {
      PushFree(index);
      return Internal(err, "waiting for a block's last copy");
    }
    s.pending = false;
  }
  return Block{s.data, block_bytes_, index};
}

absl::Status PinnedPool::Release(Block block, StreamView stream) {
  if (!block) return absl::OkStatus();
  Slot& s = slots_[static_cast<std::size_t>(block.index)];
  const cudaError_t err = RecordOn(s.released, stream);
  // Recorded or not, the block goes back: on failure the stream is broken
  // and the request fails; a later Acquire() then waits on nothing pending.
  s.pending = err == cudaSuccess;
  PushFree(block.index);
  if (err != cudaSuccess) return Internal(err, "recording a block's release");
  return absl::OkStatus();
}

void PinnedPool::ReleaseNow(Block block) {
  if (!block) return;
  PushFree(block.index);
}

void PinnedPool::PushFree(int index) {
  {
    std::lock_guard lock(mutex_);
    free_.push_back(index);
  }
  freed_.notify_one();
}

std::size_t PinnedPool::used_bytes() const {
  std::lock_guard lock(mutex_);
  return (slots_.size() - free_.size()) * block_bytes_;
}

}  // namespace tally::cuda
