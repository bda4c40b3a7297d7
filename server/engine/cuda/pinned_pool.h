// A pool of fixed-size pinned host blocks over an upstream pinned buffer
// (rmm's pool_memory_resource over pinned_host_memory_resource), with
// stream-ordered reuse: a block released after asynchronous work on a stream
// remembers an event recorded there, and is handed out again only once that
// event has completed. Nothing is allocated after Create().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/cuda/cuda_resources.h"

namespace tally::cuda {

class PinnedPool {
 public:
  // A borrowed block; give it back with Release() or ReleaseNow().
  struct Block {
    std::byte* data = nullptr;
    std::size_t size = 0;
    int index = -1;
    explicit operator bool() const { return index >= 0; }
  };

  // Cuts `upstream` (pinned, outliving the pool) into blocks of `block_bytes`;
  // their events live on `device`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PinnedPool>> Create(
      std::span<std::byte> upstream, std::size_t block_bytes, int device);

  // A free block whose last asynchronous use has completed. Waits up to
  // `wait` for one to be released, then RESOURCE_EXHAUSTED.
  [[nodiscard]] absl::StatusOr<Block> Acquire(std::chrono::milliseconds wait);
  // Gives the block back; it is reused after the work enqueued on `stream`
  // so far has completed (stream on the pool's device).
  [[nodiscard]] absl::Status Release(Block block, StreamView stream);
  // Gives back a block no pending work reads.
  void ReleaseNow(Block block);

  std::size_t blocks() const { return slots_.size(); }
  std::size_t block_bytes() const { return block_bytes_; }
  std::size_t total_bytes() const { return slots_.size() * block_bytes_; }
  std::size_t used_bytes() const;

 private:
  struct Slot {
    std::byte* data = nullptr;
    Event released;         // recorded at Release()
    bool pending = false;   // `released` was recorded and not yet waited on
  };
  PinnedPool() = default;
  void PushFree(int index);

  int device_ = 0;
  std::size_t block_bytes_ = 0;
  std::vector<Slot> slots_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  // FIFO: the oldest release is the likeliest done. Reusing the newest done
  // block instead (still in the CPU's cache) made the copy alone 1.2-1.5x
  // faster but end to end measured no better with 8 streams and ~8% slower
  // with one (docs/performance.md, "Reusing the newest staging block").
  std::deque<int> free_;
};

}  // namespace tally::cuda
