// One pinned pool block being filled with host bytes: the one host copy of
// the streamed path (CudaReduction) and of dataset uploads (DeviceResident).
// The block is taken from the pool when the first byte arrives; whoever
// takes it when full copies it to the device and gives it back to the pool.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "server/engine/cuda/pinned_pool.h"
#include "server/engine/cuda/tuning.h"

namespace tally::cuda {

class StagingBlock {
 public:
  explicit StagingBlock(PinnedPool* pool) : pool_(pool) {}
  ~StagingBlock() {
    if (block_) pool_->ReleaseNow(block_);  // no pending work reads an unfilled block
  }
  StagingBlock(const StagingBlock&) = delete;
  StagingBlock& operator=(const StagingBlock&) = delete;

  // Copies as many of the `n` bytes at `p` as fit, taking a block from the
  // pool first if need be (waiting up to EnginePolicy::kPinnedWaitMs, then
  // RESOURCE_EXHAUSTED); returns how many it took.
  [[nodiscard]] absl::StatusOr<std::size_t> Fill(const std::byte* p, std::size_t n) {
    if (!block_) {
      absl::StatusOr<PinnedPool::Block> b = pool_->Acquire(std::chrono::milliseconds(EnginePolicy::kPinnedWaitMs));
      if (!b.ok()) return b.status();
      block_ = *b;
    }
    const std::size_t take = std::min(n, block_.size - filled_);
    std::memcpy(block_.data + filled_, p, take);
    filled_ += take;
    return take;
  }

  // The unfilled part of the block, at most `n` bytes, taking a block from
  // the pool first if need be (as Fill does), for the caller to write into
  // (several threads at once, each its own part) before Filled(). Sets
  // *took_block when a block was taken from the pool.
  [[nodiscard]] absl::StatusOr<std::span<std::byte>> Room(std::size_t n, bool* took_block) {
    *took_block = false;
    if (!block_) {
      absl::StatusOr<PinnedPool::Block> b = pool_->Acquire(std::chrono::milliseconds(EnginePolicy::kPinnedWaitMs));
      if (!b.ok()) return b.status();
      block_ = *b;
      *took_block = true;
    }
    return std::span<std::byte>(block_.data + filled_, std::min(n, block_.size - filled_));
  }
  // `n` bytes of Room() were written.
  void Filled(std::size_t n) { filled_ += n; }

  std::size_t filled() const { return filled_; }
  bool full() const { return block_ && filled_ == block_.size; }

  // Hands the block over with the bytes filled so far; the caller gives it
  // back to the pool (PinnedPool::Release after the copy that reads it).
  PinnedPool::Block Take(std::size_t* filled) {
    *filled = std::exchange(filled_, 0);
    return std::exchange(block_, PinnedPool::Block{});
  }

 private:
  PinnedPool* const pool_;
  PinnedPool::Block block_;
  std::size_t filled_ = 0;
};

}  // namespace tally::cuda
