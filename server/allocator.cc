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
extern "C" {
const char* malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,retain:false,narenas:4";
}

namespace tally {
namespace {

template <typename T>
bool Read(const char* name, T* value) {
  std::size_t size = sizeof(T);
  return mallctl(name, value, &size, nullptr, 0) == 0;
}

}  // namespace

std::string AllocatorDescription() {
  const char* version = nullptr;
  bool background = false;
  ssize_t decay_ms = 0;
  unsigned arenas = 0;
  if (!Read("version", &version) || !Read("opt.background_thread", &background) ||
      !Read("opt.dirty_decay_ms", &decay_ms) || !Read("opt.narenas", &arenas)) {
    return "jemalloc (its settings could not be read)";
  }
  return std::string("jemalloc ") + version + ", " + std::to_string(arenas) + " arenas" +
         (background ? ", background purge" : ", no background purge") + " after " + std::to_string(decay_ms) + " ms";
}

}  // namespace tally
