// The receive arena (server/receive_arena.h) in a process of its own, with
// jemalloc as its malloc as in tally-server: large allocations land in the
// arena until it is used up, then come from the system as before; memory
// from either side holds what was written to it; freed arena memory is
// reused, so the arena never grows past its size. And HostRuns and
// PlacementOfReceived, which tell the backends which received bytes lie in
// it.
#include "server/receive_arena.h"

#include <gtest/gtest.h>
#include <jemalloc/jemalloc.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "server/engine/host_runs.h"
#include "server/engine/received_memory.h"

// tally-server's settings (server/allocator.cc), which the arena relies on.
extern "C" {
const char* malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,retain:false";
}

namespace tally {
namespace {

// Every jemalloc arena's free pages released now, as decay would within
// dirty_decay_ms.
void ReleaseFreePages() {
  ASSERT_EQ(mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0), 0);  // 4096: MALLCTL_ARENAS_ALL
}

ReceiveArena* Arena() {
  static ReceiveArena* arena = [] {
    absl::StatusOr<ReceiveArena*> a = ReceiveArena::Install(std::uint64_t{64} << 20);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : nullptr;
  }();
  return arena;
}

bool Inside(const ReceiveArena& arena, const void* p, std::size_t n) {
  const std::span<std::byte> m = arena.memory();
  const auto* b = static_cast<const std::byte*>(p);
  return b >= m.data() && b + n <= m.data() + m.size();
}

TEST(ReceiveArena, LargeAllocationsLandInItUntilItIsFullThenComeFromTheSystem) {
  ReceiveArena* arena = Arena();
  ASSERT_NE(arena, nullptr);
  EXPECT_EQ(arena->memory().size(), std::size_t{64} << 20);
  EXPECT_FALSE(ReceiveArena::Install(1 << 20).ok());  // once per process
  // 192 MiB in slices of 64 KiB, as gRPC's receive slices: three times the arena.
  constexpr std::size_t kSlice = 64 << 10;
  std::vector<unsigned char*> slices;
  std::size_t inside = 0;
  for (std::size_t i = 0; i < 3 * 1024; ++i) {
    auto* p = static_cast<unsigned char*>(std::malloc(kSlice));
    ASSERT_NE(p, nullptr);
    std::memset(p, static_cast<int>(i & 0xff), kSlice);
    slices.push_back(p);
    if (Inside(*arena, p, kSlice)) ++inside;
  }
  EXPECT_GT(inside, 512u) << "at most half the arena holds slices";
  EXPECT_LT(inside, slices.size()) << "past the arena's size, slices come from the system";
  EXPECT_LE(arena->taken(), arena->memory().size());
  for (std::size_t i = 0; i < slices.size(); ++i) {
    ASSERT_EQ(slices[i][0], static_cast<unsigned char>(i & 0xff)) << i;
    ASSERT_EQ(slices[i][kSlice - 1], static_cast<unsigned char>(i & 0xff)) << i;
  }
  for (unsigned char* p : slices) std::free(p);
  // Released, the arena's memory comes back to it, and another thread (so
  // likely another jemalloc arena) gets it next.
  ReleaseFreePages();
  EXPECT_LT(arena->taken(), std::uint64_t{16} << 20);
  std::size_t again = 0;
  std::thread other([&] {
    slices.clear();
    for (std::size_t i = 0; i < 512; ++i) {
      slices.push_back(static_cast<unsigned char*>(std::malloc(kSlice)));
      std::memset(slices.back(), 7, kSlice);
      if (Inside(*arena, slices.back(), kSlice)) ++again;
    }
  });
  other.join();
  EXPECT_GT(again, 256u);
  for (unsigned char* p : slices) EXPECT_EQ(p[kSlice / 2], 7);
  for (unsigned char* p : slices) std::free(p);
  ReleaseFreePages();
  EXPECT_LT(arena->taken(), std::uint64_t{16} << 20);
}

TEST(ReceivedMemory, SlicesInTheRegisteredStretchArePinnedOthersPageable) {
  std::vector<std::byte> stretch(4096), elsewhere(64);
  const std::span<const std::byte> s(stretch);
  EXPECT_EQ(PlacementOfReceived(s.subspan(10, 100)), Placement::PageableHost());  // nothing registered
  SetPinnedReceiveMemory(s);
  EXPECT_EQ(PlacementOfReceived(s.subspan(10, 100)), Placement::PinnedHost());
  EXPECT_EQ(PlacementOfReceived(s), Placement::PinnedHost());
  EXPECT_EQ(PlacementOfReceived(s.subspan(4000, 96)), Placement::PinnedHost());
  EXPECT_EQ(PlacementOfReceived(std::span<const std::byte>(elsewhere)), Placement::PageableHost());
  // Straddling the end is not inside.
  EXPECT_EQ(PlacementOfReceived(std::span<const std::byte>(stretch.data() + 4000, 97)), Placement::PageableHost());
  SetPinnedReceiveMemory({});
  EXPECT_EQ(PlacementOfReceived(s.subspan(10, 100)), Placement::PageableHost());
}

TEST(HostRuns, TellWhichStretchesLieWhollyInPinnedMemory) {
  std::vector<std::byte> a(100), b(50), c(30);
  const std::vector<Extent> runs = {{std::span<const std::byte>(a), Placement::PinnedHost()},
                                    Extent::PageableHost(std::span<const std::byte>(b)),
                                    {std::span<const std::byte>(c), Placement::PinnedHost()}};
  const HostRuns view(runs);
  EXPECT_EQ(view.size(), 180u);
  EXPECT_EQ(view.pinned_bytes(), 130u);
  EXPECT_EQ(view.placement(), Placement::PageableHost());  // not every run is pinned
  EXPECT_TRUE(view.Pinned(0, 100));
  EXPECT_FALSE(view.Pinned(0, 101));
  EXPECT_FALSE(view.Pinned(99, 2));
  EXPECT_FALSE(view.Pinned(120, 10));
  EXPECT_TRUE(view.Pinned(150, 30));
  EXPECT_FALSE(view.Pinned(149, 31));
  EXPECT_TRUE(view.Pinned(42, 0));
  const std::vector<Extent> all = {{std::span<const std::byte>(a), Placement::PinnedHost()},
                                   {std::span<const std::byte>(c), Placement::PinnedHost()}};
  EXPECT_EQ(HostRuns(all).placement(), Placement::PinnedHost());
  const std::vector<Extent> none = {Extent::PageableHost(std::span<const std::byte>(b))};
  EXPECT_EQ(HostRuns(none).pinned_bytes(), 0u);
  EXPECT_FALSE(HostRuns(none).Pinned(0, 1));
}

}  // namespace
}  // namespace tally
