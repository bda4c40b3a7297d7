// tally-server's memory allocator: jemalloc, set to hand freed memory back to
// the system within about a second, idle or not (server/allocator.cc).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tally {

// Freed buffers of 2 MiB and more (jemalloc's opt.oversize_threshold, set
// in allocator.cc) kept for reuse as smaller ones are (for dirty_decay_ms),
// not purged at once. Called once at start.
absl::Status KeepLargeBuffersForReuse();

// The jemalloc arena that every thread's buffers of 2 MiB and more come
// from.
absl::StatusOr<unsigned> LargeBufferArena();

// The allocator and its settings as jemalloc reports them, for the startup
// line: shows that the settings took effect.
std::string AllocatorDescription();

}  // namespace tally
