// Transparent huge pages for a request's large host buffers. A buffer
// first touched in 4 KiB pages costs a page fault per page; advised before
// its first touch (MADV_HUGEPAGE), the kernel may back each whole 2 MiB of
// it with one huge page and one fault. Where the system's THP mode is
// "never" the advice does nothing; with "always" it was not needed.
// Measured on the CPU group-by of 1M groups (docs/performance.md, "Group-by").
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tally {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// madvise(`advice`) over the whole pages of `page` bytes inside
// [p, p + bytes), if there is one.
inline void AdviseWholePages(void* p, std::size_t bytes, std::uintptr_t page, int advice) {
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (begin + page - 1) / page * page;
  const std::uintptr_t last = (begin + bytes) / page * page;
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, advice);
}

// Advises the whole 2 MiB pages inside [p, p + bytes).
inline void AdviseHugePages(void* p, std::size_t bytes) { AdviseWholePages(p, bytes, kHugePageBytes, MADV_HUGEPAGE); }

// The whole 4 KiB pages inside [p, p + bytes) faulted in, writable, by the
// kernel in one call (MADV_POPULATE_WRITE, Linux 5.14), so that the writes
// that follow fault nothing: several threads can populate a buffer that
// one thread then fills. Where the kernel lacks it nothing happens (the
// writes fault the pages in as before).
inline void PopulateForWriting(void* p, std::size_t bytes) { AdviseWholePages(p, bytes, 4096, MADV_POPULATE_WRITE); }

// Room in `v` for `n` elements, the buffer advised before anything touches
// it, so that a resize or assign after it faults in huge pages; only for
// buffers of several huge pages.
template <typename T, typename A>
void ReserveHuge(std::vector<T, A>& v, std::size_t n) {
  if (n <= v.capacity()) return;
  v.reserve(n);
  if (v.capacity() * sizeof(T) >= 2 * kHugePageBytes) AdviseHugePages(v.data(), v.capacity() * sizeof(T));
}

}  // namespace tally
