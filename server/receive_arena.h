// A fixed stretch of memory that jemalloc carves every arena's new extents
// from before it asks the system, so that gRPC's receive slices (allocated
// with malloc on gRPC's own threads) lie in memory the cuda backend has
// registered with CUDA once, at start. Its copies to the GPU then read the
// slices where they lie instead of a CPU copying each message into pinned
// staging first (docs/performance.md, "Receiving into pinned memory").
//
// Bounded: the stretch is mapped once, whole, and never grows. While
// jemalloc holds all of it, new extents come from the system as before;
// extents jemalloc releases (server/allocator.cc: a second after their
// pages were freed) come back to it for any thread to take next. Its pages
// stay resident: never purged or decommitted, as pinned pages cannot be.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/statusor.h"

namespace tally {

class ReceiveArena {
 public:
  // Maps `bytes` (rounded up to whole 2 MiB pages) and points the extent
  // hooks of every automatic jemalloc arena at it, and of `large_buffers`
  // (the arena of every thread's large buffers, LargeBufferArena in
  // server/allocator.h) where given: a receive slice is a buffer like any
  // other. Once per process, before the server starts; the arena lives
  // until the process ends.
  static absl::StatusOr<ReceiveArena*> Install(std::uint64_t bytes,
                                               std::optional<unsigned> large_buffers = std::nullopt);

  std::span<std::byte> memory() const;
  // Bytes of it jemalloc holds now.
  std::uint64_t taken() const;

 private:
  ReceiveArena() = default;
};

}  // namespace tally
