// tally-server's memory allocator: jemalloc, set to hand freed memory back to
// the system within about a second, idle or not (server/allocator.cc).
#pragma once

#include <string>

namespace tally {

// The allocator and its settings as jemalloc reports them, for the startup
// line: shows that the settings took effect.
std::string AllocatorDescription();

}  // namespace tally
