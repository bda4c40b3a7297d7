// jemalloc's extent hooks (jemalloc(3), "arena.<i>.extent_hooks") for
// ReceiveArena. jemalloc asks its hooks for extents (runs of pages it cuts
// objects from, for small and large allocations alike), and to split, merge,
// commit, purge and release them. The hooks here hand out the arena's free
// ranges (first fit) and take released extents back; every extent outside
// it goes to the hooks jemalloc had before (the system's mmap), so extents
// from before the install, and those taken while the arena is used up,
// behave as they always did. The arena's pages are never purged or
// decommitted: pinned pages cannot be.
#include "server/receive_arena.h"

#include <jemalloc/jemalloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tally {
namespace {

constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;
// Free ranges the arena can track at once; a range given back past this is
// left with jemalloc (Dalloc declines it), never lost.
constexpr std::size_t kMaxFreeRanges = 1 << 16;

std::byte* g_base = nullptr;
std::uint64_t g_size = 0;
extent_hooks_t* g_previous = nullptr;  // jemalloc's default hooks

// The arena's free ranges, sorted by offset, never adjacent (given-back
// ranges merge with their neighbours). A fixed array under a mutex: the
// hooks run inside malloc, so nothing here may allocate.
struct Range {
  std::uint64_t offset;
  std::uint64_t size;
};
std::mutex g_mutex;
Range* g_free = nullptr;  // kMaxFreeRanges entries, mapped at Install()
std::size_t g_ranges = 0;
std::atomic<std::uint64_t> g_free_bytes{0};

bool Inside(const void* addr, std::size_t size) {
  const auto* p = static_cast<const std::byte*>(addr);
  return p >= g_base && p < g_base + g_size && size <= static_cast<std::size_t>(g_base + g_size - p);
}

// Takes [offset, offset + size) out of free range i (which holds it).
void TakeFrom(std::size_t i, std::uint64_t offset, std::uint64_t size) {
  const Range r = g_free[i];
  const Range before{r.offset, offset - r.offset};
  const Range after{offset + size, r.offset + r.size - offset - size};
  if (before.size > 0 && after.size > 0) {  // a new entry: Take() made sure there is room
    std::memmove(g_free + i + 2, g_free + i + 1, (g_ranges - i - 1) * sizeof(Range));
    g_free[i] = before;
    g_free[i + 1] = after;
    ++g_ranges;
  } else if (before.size > 0) {
    g_free[i] = before;
  } else if (after.size > 0) {
    g_free[i] = after;
  } else {
    std::memmove(g_free + i, g_free + i + 1, (g_ranges - i - 1) * sizeof(Range));
    --g_ranges;
  }
  g_free_bytes.fetch_sub(size, std::memory_order_relaxed);
}

// The offset of `size` free bytes aligned to `alignment` (at `want` when
// set), taken out of the free ranges; or -1.
std::int64_t Take(std::uint64_t size, std::uint64_t alignment, const std::byte* want) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (std::size_t i = 0; i < g_ranges; ++i) {
    const Range r = g_free[i];
    const std::uint64_t start = want != nullptr ? static_cast<std::uint64_t>(want - g_base)
                                                : (r.offset + alignment - 1) / alignment * alignment;
    if (start < r.offset || start > r.offset + r.size || size > r.offset + r.size - start) continue;
    const bool splits = start > r.offset && start + size < r.offset + r.size;
    if (splits && g_ranges == kMaxFreeRanges) continue;
    TakeFrom(i, start, size);
    return static_cast<std::int64_t>(start);
  }
  return -1;
}

// Gives [offset, offset + size) back, merged with its neighbours; false
// when the table is full and it would need a new entry.
bool GiveBack(std::uint64_t offset, std::uint64_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Range* at = std::lower_bound(g_free, g_free + g_ranges, offset,
                                     [](const Range& r, std::uint64_t o) { return r.offset < o; });
  const std::size_t i = static_cast<std::size_t>(at - g_free);
  const bool joins_before = i > 0 && g_free[i - 1].offset + g_free[i - 1].size == offset;
  const bool joins_after = i < g_ranges && offset + size == g_free[i].offset;
  if (joins_before && joins_after) {
    g_free[i - 1].size += size + g_free[i].size;
    std::memmove(g_free + i, g_free + i + 1, (g_ranges - i - 1) * sizeof(Range));
    --g_ranges;
  } else if (joins_before) {
    g_free[i - 1].size += size;
  } else if (joins_after) {
    g_free[i].offset = offset;
    g_free[i].size += size;
  } else {
    if (g_ranges == kMaxFreeRanges) return false;
    std::memmove(g_free + i + 1, g_free + i, (g_ranges - i) * sizeof(Range));
    g_free[i] = Range{offset, size};
    ++g_ranges;
  }
  g_free_bytes.fetch_add(size, std::memory_order_relaxed);
  return true;
}

// `size` bytes of the arena aligned to `alignment` (at `new_addr` when
// set), or, when it has none free, whatever the previous hooks give.
void* Alloc(extent_hooks_t*, void* new_addr, std::size_t size, std::size_t alignment, bool* zero, bool* commit,
            unsigned arena_ind) {
  const bool want_inside = new_addr == nullptr || Inside(new_addr, size);
  if (want_inside) {
    const std::int64_t offset =
        Take(size, std::max<std::size_t>(alignment, 1), static_cast<const std::byte*>(new_addr));
    if (offset >= 0) {
      std::byte* p = g_base + offset;
      if (*zero) std::memset(p, 0, size);  // given back memory holds old bytes
      *commit = true;
      return p;
    }
    if (new_addr != nullptr) return nullptr;
  }
  return g_previous->alloc(g_previous, new_addr, size, alignment, zero, commit, arena_ind);
}

// The arena's extents come back to its free ranges, for any jemalloc arena
// to take next (jemalloc releases an extent once its pages have been free
// for dirty_decay_ms); everything else goes to the previous hooks.
bool Dalloc(extent_hooks_t*, void* addr, std::size_t size, bool committed, unsigned arena_ind) {
  if (Inside(addr, size)) return !GiveBack(static_cast<std::uint64_t>(static_cast<std::byte*>(addr) - g_base), size);
  return g_previous->dalloc(g_previous, addr, size, committed, arena_ind);
}

void Destroy(extent_hooks_t*, void* addr, std::size_t size, bool committed, unsigned arena_ind) {
  if (Inside(addr, size)) return;
  if (g_previous->destroy != nullptr) g_previous->destroy(g_previous, addr, size, committed, arena_ind);
}

bool Commit(extent_hooks_t*, void* addr, std::size_t size, std::size_t offset, std::size_t length,
            unsigned arena_ind) {
  if (Inside(addr, size)) return false;  // always committed
  return g_previous->commit(g_previous, addr, size, offset, length, arena_ind);
}

bool Decommit(extent_hooks_t*, void* addr, std::size_t size, std::size_t offset, std::size_t length,
              unsigned arena_ind) {
  if (Inside(addr, size)) return true;  // pinned pages stay
  return g_previous->decommit == nullptr ||
         g_previous->decommit(g_previous, addr, size, offset, length, arena_ind);
}

bool PurgeLazy(extent_hooks_t*, void* addr, std::size_t size, std::size_t offset, std::size_t length,
               unsigned arena_ind) {
  if (Inside(addr, size)) return true;
  return g_previous->purge_lazy == nullptr ||
         g_previous->purge_lazy(g_previous, addr, size, offset, length, arena_ind);
}

bool PurgeForced(extent_hooks_t*, void* addr, std::size_t size, std::size_t offset, std::size_t length,
                 unsigned arena_ind) {
  if (Inside(addr, size)) return true;
  return g_previous->purge_forced == nullptr ||
         g_previous->purge_forced(g_previous, addr, size, offset, length, arena_ind);
}

bool Split(extent_hooks_t*, void* addr, std::size_t size, std::size_t size_a, std::size_t size_b, bool committed,
           unsigned arena_ind) {
  if (Inside(addr, size)) return false;
  return g_previous->split == nullptr ||
         g_previous->split(g_previous, addr, size, size_a, size_b, committed, arena_ind);
}

// Extents merge only with their own kind: never an arena extent with one
// from the system that happens to lie next to it.
bool Merge(extent_hooks_t*, void* addr_a, std::size_t size_a, void* addr_b, std::size_t size_b, bool committed,
           unsigned arena_ind) {
  const bool a = Inside(addr_a, size_a), b = Inside(addr_b, size_b);
  if (a != b) return true;
  if (a) return false;
  return g_previous->merge == nullptr ||
         g_previous->merge(g_previous, addr_a, size_a, addr_b, size_b, committed, arena_ind);
}

extent_hooks_t g_hooks = {Alloc, Dalloc, Destroy, Commit, Decommit, PurgeLazy, PurgeForced, Split, Merge};

}  // namespace

absl::StatusOr<ReceiveArena*> ReceiveArena::Install(std::uint64_t bytes, std::optional<unsigned> large_buffers) {
  if (g_base != nullptr) return absl::FailedPreconditionError("the receive arena is installed already.");
  if (bytes == 0) return absl::InvalidArgumentError("the receive arena needs at least one byte.");
  const std::uint64_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", size, " bytes for the receive arena."));
  }
  unsigned arenas = 0;
  std::size_t len = sizeof(arenas);
  extent_hooks_t* previous = nullptr;
  std::size_t hooks_len = sizeof(previous);
  if (mallctl("opt.narenas", &arenas, &len, nullptr, 0) != 0 ||
      mallctl("arena.0.extent_hooks", &previous, &hooks_len, nullptr, 0) != 0 || previous == nullptr) {
    munmap(p, size);
    return absl::InternalError("jemalloc's arenas or extent hooks cannot be read (mallctl).");
  }
  void* table = mmap(nullptr, kMaxFreeRanges * sizeof(Range), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
  if (table == MAP_FAILED) {
    munmap(p, size);
    return absl::ResourceExhaustedError("cannot map the receive arena's table of free ranges.");
  }
  g_free = static_cast<Range*>(table);
  g_free[0] = Range{0, size};
  g_ranges = 1;
  g_free_bytes.store(size, std::memory_order_relaxed);
  g_base = static_cast<std::byte*>(p);
  g_size = size;
  g_previous = previous;
  extent_hooks_t* hooks = &g_hooks;
  // Every automatic arena, in use yet or not: a thread may be given any.
  std::vector<unsigned> hooked;
  for (unsigned i = 0; i < arenas; ++i) hooked.push_back(i);
  if (large_buffers.has_value()) hooked.push_back(*large_buffers);
  for (const unsigned i : hooked) {
    const std::string name = absl::StrCat("arena.", i, ".extent_hooks");
    if (mallctl(name.c_str(), nullptr, nullptr, &hooks, sizeof(hooks)) != 0) {
      return absl::InternalError(absl::StrCat("jemalloc refused the receive arena's hooks for arena ", i, "."));
    }
  }
  static ReceiveArena arena;  // the one instance; its state is the hooks' globals above
  return &arena;
}

std::span<std::byte> ReceiveArena::memory() const { return {g_base, static_cast<std::size_t>(g_size)}; }

std::uint64_t ReceiveArena::taken() const { return g_size - g_free_bytes.load(std::memory_order_relaxed); }

}  // namespace tally
