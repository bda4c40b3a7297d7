// jemalloc's extent hooks (jemalloc(3), "arena.<i>.extent_hooks") for
// ReceiveArena. jemalloc asks its hooks for extents (runs of pages it cuts
// objects from, for small and large allocations alike), and to split, merge,
// commit, purge and release them. The hooks here hand out the arena's memory
// front to back and answer for it; every extent outside it goes to the hooks
// jemalloc had before (the system's mmap), so extents from before the
// install, and those after the arena is used up, behave as they always did.
#include "server/receive_arena.h"

#include <jemalloc/jemalloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"

namespace tally {
namespace {

constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;

std::byte* g_base = nullptr;
std::uint64_t g_size = 0;
std::atomic<std::uint64_t> g_next{0};  // offset of the first byte never handed out
extent_hooks_t* g_previous = nullptr;  // jemalloc's default hooks

bool Inside(const void* addr, std::size_t size) {
  const auto* p = static_cast<const std::byte*>(addr);
  return p >= g_base && p < g_base + g_size && size <= static_cast<std::size_t>(g_base + g_size - p);
}

// The next `size` bytes aligned to `alignment`, or nullptr when the arena
// has no room left (jemalloc then asks the previous hooks). `new_addr`, when
// set, asks for that address: granted only where the free space starts.
void* Alloc(extent_hooks_t*, void* new_addr, std::size_t size, std::size_t alignment, bool* zero, bool* commit,
            unsigned arena_ind) {
  if (alignment == 0) alignment = 1;
  std::uint64_t at = g_next.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint64_t start = (at + alignment - 1) / alignment * alignment;
    if (start > g_size || size > g_size - start) break;
    if (new_addr != nullptr && new_addr != g_base + start) break;
    if (g_next.compare_exchange_weak(at, start + size, std::memory_order_relaxed)) {
      *zero = true;  // never handed out before: still the zero pages of the mapping
      *commit = true;
      return g_base + start;
    }
  }
  return g_previous->alloc(g_previous, new_addr, size, alignment, zero, commit, arena_ind);
}

// For the arena's extents, `true` declines: jemalloc keeps them, committed,
// for reuse. Everything else goes to the previous hooks.
bool Dalloc(extent_hooks_t*, void* addr, std::size_t size, bool committed, unsigned arena_ind) {
  if (Inside(addr, size)) return true;
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

absl::StatusOr<ReceiveArena*> ReceiveArena::Install(std::uint64_t bytes) {
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
  g_base = static_cast<std::byte*>(p);
  g_size = size;
  g_previous = previous;
  extent_hooks_t* hooks = &g_hooks;
  // Every automatic arena, in use yet or not: a thread may be given any.
  for (unsigned i = 0; i < arenas; ++i) {
    const std::string name = absl::StrCat("arena.", i, ".extent_hooks");
    if (mallctl(name.c_str(), nullptr, nullptr, &hooks, sizeof(hooks)) != 0) {
      return absl::InternalError(absl::StrCat("jemalloc refused the receive arena's hooks for arena ", i, "."));
    }
  }
  static ReceiveArena arena;  // the one instance; its state is the hooks' globals above
  return &arena;
}

std::span<std::byte> ReceiveArena::memory() const { return {g_base, static_cast<std::size_t>(g_size)}; }

std::uint64_t ReceiveArena::taken() const { return std::min(g_next.load(std::memory_order_relaxed), g_size); }

}  // namespace tally
