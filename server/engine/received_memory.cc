#include "server/engine/received_memory.h"

#include <atomic>

namespace tally {
namespace {

// Read on every received message, written twice per process: atomics, no lock.
std::atomic<const std::byte*> g_begin{nullptr};
std::atomic<const std::byte*> g_end{nullptr};

}  // namespace

void SetPinnedReceiveMemory(std::span<const std::byte> memory) {
  g_end.store(nullptr, std::memory_order_release);  // empty while it changes
  g_begin.store(memory.data(), std::memory_order_release);
  g_end.store(memory.empty() ? nullptr : memory.data() + memory.size(), std::memory_order_release);
}

Placement PlacementOfReceived(std::span<const std::byte> bytes) {
  const std::byte* end = g_end.load(std::memory_order_acquire);
  const std::byte* begin = g_begin.load(std::memory_order_acquire);
  if (end == nullptr || bytes.empty()) return Placement::PageableHost();
  const bool inside = bytes.data() >= begin && bytes.data() < end &&
                      bytes.size() <= static_cast<std::size_t>(end - bytes.data());
  return inside ? Placement::PinnedHost() : Placement::PageableHost();
}

}  // namespace tally
