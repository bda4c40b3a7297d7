// tally-server's memory allocator: jemalloc, set to hand freed memory back to
// the system within about a second, idle or not (server/allocator.cc).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace tally {

// Freed buffers of 8 MiB and more kept for reuse as smaller ones are (for
// dirty_decay_ms), not purged at once. Called once at start.
absl::Status KeepLargeBuffersForReuse();

// The allocator and its settings as jemalloc reports them, for the startup
// line: shows that the settings took effect.
std::string AllocatorDescription();

}  // namespace tally
