// A fixed stretch of memory that jemalloc carves every arena's new extents
// from before it asks the system, so that gRPC's receive slices (allocated
// with malloc on gRPC's own threads) lie in memory the cuda backend has
// registered with CUDA once, at start. Its copies to the GPU then read the
// slices where they lie instead of a CPU copying each message into pinned
// staging first (docs/performance.md, "Receiving into pinned memory").
//
// Bounded: the stretch is mapped once, whole, and never grows; once jemalloc
// has taken all of it, new extents come from the system as before, and
// extents taken from it stay with jemalloc (never returned, purged or
// decommitted: pinned pages cannot be) for it to reuse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

namespace tally {

class ReceiveArena {
 public:
  // Maps `bytes` (rounded up to whole 2 MiB pages) and points the extent
  // hooks of every automatic jemalloc arena at it. Once per process, before
  // the server starts; the arena lives until the process ends.
  static absl::StatusOr<ReceiveArena*> Install(std::uint64_t bytes);

  std::span<std::byte> memory() const;
  // Bytes of it jemalloc has taken so far.
  std::uint64_t taken() const;

 private:
  ReceiveArena() = default;
};

}  // namespace tally
