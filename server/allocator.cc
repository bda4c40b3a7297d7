// jemalloc's settings for tally-server. glibc's malloc kept the memory of
// refused oversized messages (gRPC's receive slices, freed by threads other
// than the ones that allocated them, spread over per-thread arenas): after a
// minute of malformed traffic the idle server stayed at 300 MB where
// malloc_trim(0) brought it back to 20 MB. jemalloc's background thread
// returns freed pages after dirty_decay_ms, whether or not the server is
// busy; docs/performance.md has the figures.
#include "server/allocator.h"

#include <jemalloc/jemalloc.h>
#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/strings/str_cat.h"

// Read by jemalloc before its first allocation. retain:false: jemalloc asks
// for extents of the sizes it needs and releases each once its pages have
// been free for dirty_decay_ms, instead of growing each of its arenas in
// ever larger steps and keeping what it took; so the receive arena
// (receive_arena.h) is shared by every jemalloc arena, its memory going
// back to it within a second of being freed.
//
// narenas:4: jemalloc's default is four arenas per core, and gRPC's
// threads (about one per core) each allocate their receive slices from
// their own; on hosts of 32 and 64 cores a slice freed in one arena was
// rarely reused by the next thread's read, so nearly every received byte
// landed in a freshly mapped page: with 16 streams of 1 GiB the receiving
// threads sat in page faults waiting for the address space's lock, held
// by the mmap and munmap calls of the same churn (2 x H200 host, 32 cores,
// one GPU: 8.2 GB/s and 3.8M page faults in 12 s with the default; 13.2
// GB/s and 0.6M with 8 arenas). The same holds for a request's large
// buffers, which the next request, on another worker thread, reuses only
// if it allocates from the same arena: on a 2-core host a group-by of 4M
// rows into 65,536 groups took 22 ms with 1 arena, 27-32 with 4, 34-45
// with 8. Four keeps a few arenas for many threads' small allocations
// (their thread caches refill from them under a lock); docs/performance.md,
// "Several GPUs under load".
//
// oversize_threshold:2 MiB: buffers of 2 MiB and more share one arena
// (KeepLargeBuffersForReuse keeps its freed pages for reuse), whatever
// thread asks. Below jemalloc's 8 MiB a request's large vectors came from
// the asking thread's arena, and the next request, on another worker, found
// fresh pages: the 8 MB vectors of a GPU group-by's 1M groups took 24-25
// ms on an H200 host, 13.7-16.4 with this (docs/performance.md).
extern "C" {
const char* malloc_conf =
    "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,retain:false,narenas:4,"
    "oversize_threshold:2097152";
}

namespace tally {
namespace {

template <typename T>
bool Read(const char* name, T* value) {
  std::size_t size = sizeof(T);
  return mallctl(name, value, &size, nullptr, 0) == 0;
}

}  // namespace

absl::StatusOr<unsigned> LargeBufferArena() {
  // Found by asking where one lies; created by that allocation if it was
  // not yet.
  void* probe = malloc(std::size_t{16} << 20);
  if (probe == nullptr) return absl::ResourceExhaustedError("no memory to find jemalloc's large-buffer arena.");
  unsigned index = 0;
  std::size_t size = sizeof(index);
  const bool found = mallctl("arenas.lookup", &index, &size, &probe, sizeof(probe)) == 0;
  free(probe);
  if (!found) return absl::InternalError("jemalloc's arena for large buffers cannot be found (mallctl).");
  return index;
}

// jemalloc gives buffers of opt.oversize_threshold and more an arena of
// their own and, on free, purges their pages at once whatever dirty_decay_ms says (an
// extent's oversize_threshold: "purge eagerly"), so every request's large
// vectors were mapped and faulted in afresh: a 32 MiB buffer filled in
// 12 ms where a reused one takes 1 (128 MiB: 48 ms against 3; 2-core VM,
// docs/performance.md). The arena keeps them like the others: freed
// pages stay for dirty_decay_ms, for the next request to reuse, and the
// background thread returns them after that (one arena for all large
// buffers, so a request on any thread reuses another's).
absl::Status KeepLargeBuffersForReuse() {
  absl::StatusOr<unsigned> found = LargeBufferArena();
  if (!found.ok()) return found.status();
  const unsigned arena = *found;
  ssize_t decay_ms = 0;
  std::size_t size = sizeof(decay_ms);
  if (mallctl("opt.dirty_decay_ms", &decay_ms, &size, nullptr, 0) != 0) {
    return absl::InternalError("jemalloc's opt.dirty_decay_ms cannot be read (mallctl).");
  }
  std::size_t never = ~std::size_t{0} >> 1;  // no extent is oversize
  const std::string threshold = absl::StrCat("arena.", arena, ".oversize_threshold");
  const std::string decay = absl::StrCat("arena.", arena, ".dirty_decay_ms");
  if (mallctl(threshold.c_str(), nullptr, nullptr, &never, sizeof(never)) != 0 ||
      mallctl(decay.c_str(), nullptr, nullptr, &decay_ms, sizeof(decay_ms)) != 0) {
    return absl::InternalError(absl::StrCat("jemalloc refused the settings of arena ", arena, " (mallctl)."));
  }
  return absl::OkStatus();
}

std::string AllocatorDescription() {
  const char* version = nullptr;
  bool background = false;
  ssize_t decay_ms = 0;
  ssize_t large_decay_ms = 0;
  unsigned arenas = 0;
  std::size_t large_from = 0;
  absl::StatusOr<unsigned> large = LargeBufferArena();
  if (!Read("version", &version) || !Read("opt.background_thread", &background) ||
      !Read("opt.dirty_decay_ms", &decay_ms) || !Read("opt.narenas", &arenas) ||
      !Read("opt.oversize_threshold", &large_from) || !large.ok() ||
      !Read(absl::StrCat("arena.", *large, ".dirty_decay_ms").c_str(), &large_decay_ms)) {
    return "jemalloc (its settings could not be read)";
  }
  return absl::StrCat("jemalloc ", version, ", ", arenas, " arenas",
                      background ? ", background purge" : ", no background purge", " after ", decay_ms,
                      " ms, buffers of ", large_from >> 20, " MiB and more in one arena, after ", large_decay_ms, " ms");
}

}  // namespace tally
