// Keeps a truncated shared-memory file from killing the server.
//
// A client may shrink (ftruncate) the shared-memory object it registered.
// The kernel then unmaps the cut pages from every mapping, and the next read
// of one by the server would raise SIGBUS. The guard catches SIGBUS at an
// address inside a watched range, maps zero pages over the whole range
// (so the read that faulted, and every later one, completes), and marks the
// range as faulted; the region code then fails the query that read it, and
// every later one, with a clear status. A SIGBUS anywhere else is passed to
// the handler installed before (or the default: the process dies, as it
// would have).
//
// The handler only reads a fixed table of atomics and calls mmap: no locks,
// no allocation. Watch() and Unwatch() are called at registration and at
// unmapping, never concurrently with a read of the same range (the region's
// owner outlives every query reading it).
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace tally {

class SigbusGuard {
 public:
  // Ranges watched at once (registered host regions).
  static constexpr int kMaxRanges = 4096;

  // Starts watching [base, base + bytes) (page-aligned base; the handler is
  // installed on first use). RESOURCE_EXHAUSTED when kMaxRanges are watched.
  [[nodiscard]] static absl::StatusOr<int> Watch(const void* base, std::size_t bytes);
  // Stops watching; before the range is unmapped.
  static void Unwatch(int slot);
  // Whether a read of the range has faulted since Watch().
  static bool Faulted(int slot);
};

}  // namespace tally
