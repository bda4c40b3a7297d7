#include "server/engine/regions/sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace tally {
namespace {

struct Range {
  std::atomic<std::uintptr_t> begin{0};  // 0: slot free
  std::atomic<std::uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};

Range g_ranges[SigbusGuard::kMaxRanges];
struct sigaction g_previous;
std::once_flag g_installed;
std::mutex g_slots;  // Watch/Unwatch among themselves; the handler takes no lock

void PassOn(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: returning re-runs the faulting read, which now kills
  // the process as it would have without the guard.
  signal(sig, SIG_DFL);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (Range& r : g_ranges) {
    const std::uintptr_t begin = r.begin.load(std::memory_order_acquire);
    if (begin == 0 || at < begin || at >= r.end.load(std::memory_order_acquire)) continue;
    // Zero pages over the whole range: the faulting read completes, and so
    // does every other read of the range, now and later. The region's
    // owner reports the fault (and unmaps these pages in the end).
    void* p = mmap(reinterpret_cast<void*>(begin), r.end.load() - begin, PROT_READ,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) break;
    r.faulted.store(true, std::memory_order_release);
    return;
  }
  PassOn(sig, info, context);
}

void Install() {
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

absl::StatusOr<int> SigbusGuard::Watch(const void* base, std::size_t bytes) {
  std::call_once(g_installed, Install);
  std::lock_guard lock(g_slots);
  for (int i = 0; i < kMaxRanges; ++i) {
    Range& r = g_ranges[i];
    if (r.begin.load(std::memory_order_relaxed) != 0) continue;
    r.faulted.store(false, std::memory_order_relaxed);
    r.end.store(reinterpret_cast<std::uintptr_t>(base) + bytes, std::memory_order_relaxed);
    r.begin.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
    return i;
  }
  return absl::ResourceExhaustedError(absl::StrCat("no more than ", kMaxRanges, " host regions can be registered at once."));
}

void SigbusGuard::Unwatch(int slot) {
  std::lock_guard lock(g_slots);
  g_ranges[slot].begin.store(0, std::memory_order_release);
  g_ranges[slot].end.store(0, std::memory_order_release);
}

bool SigbusGuard::Faulted(int slot) { return g_ranges[slot].faulted.load(std::memory_order_acquire); }

}  // namespace tally
