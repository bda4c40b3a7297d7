// Where a received message's bytes lie. gRPC allocates its receive slices
// with malloc; with the receive arena installed (server/receive_arena.h),
// jemalloc takes them from one stretch of memory that the cuda backend
// registers with CUDA at start, so slices inside it are pinned host memory
// that its copies to the GPU read where they lie. Set once at start, by the
// backend that registered the stretch, and cleared before it unregisters.
#pragma once

#include <cstddef>
#include <span>

#include "server/engine/source.h"

namespace tally {

// `memory`: registered host memory received bytes may lie in; empty: none.
void SetPinnedReceiveMemory(std::span<const std::byte> memory);

// Pinned host memory when all of `bytes` lies in the registered stretch,
// else pageable.
Placement PlacementOfReceived(std::span<const std::byte> bytes);

}  // namespace tally
