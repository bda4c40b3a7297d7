// The pinned staging pool: blocks come back in the order they were released,
// never while a stream may still read them, and an empty pool turns a
// request away after its wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "server/engine/cpu/thread_pool.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/pinned_pool.h"
#include "server/engine/cuda/staged_copy.h"
#include "tests/gpu/engine_test_util.h"

namespace tally::cuda {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBlock = 1 << 20;

struct PoolOnDevice0 {
  PinnedBuffer upstream;
  Stream stream;
  std::unique_ptr<PinnedPool> pool;
};

// A pool of `blocks` blocks and a stream on device 0.
void MakePool(int blocks, PoolOnDevice0* out) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(PinnedBuffer::Create(blocks * kBlock, &out->upstream), cudaSuccess);
  ASSERT_EQ(Stream::Create(&out->stream), cudaSuccess);
  absl::StatusOr<std::unique_ptr<PinnedPool>> pool = PinnedPool::Create(
      std::span(out->upstream.data(), out->upstream.size()), kBlock, /*device=*/0);
  ASSERT_TRUE(pool.ok()) << pool.status();
  out->pool = std::move(*pool);
}

// Holds `stream` for `ms` (a host function in stream order), then sets `done`.
void HoldStream(StreamView stream, int ms, std::atomic<bool>* done) {
  struct Hold {
    int ms;
    std::atomic<bool>* done;
  };
  auto hold = std::make_unique<Hold>(Hold{ms, done});
  ASSERT_EQ(cudaLaunchHostFunc(
                stream.get(),
                [](void* p) {
                  std::unique_ptr<Hold> h(static_cast<Hold*>(p));
                  std::this_thread::sleep_for(milliseconds(h->ms));
                  h->done->store(true);
                },
                hold.get()),
            cudaSuccess);
  hold.release();  // the host function owns it now
}

PinnedPool::Block MustAcquire(PinnedPool& pool) {
  absl::StatusOr<PinnedPool::Block> b = pool.Acquire(milliseconds(2000));
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : PinnedPool::Block{};
}

TEST(PinnedPool, HandsOutTheOldestReleaseFirst) {
  TALLY_REQUIRE_GPU();
  PoolOnDevice0 p;
  ASSERT_NO_FATAL_FAILURE(MakePool(3, &p));
  PinnedPool::Block a = MustAcquire(*p.pool);
  PinnedPool::Block b = MustAcquire(*p.pool);
  PinnedPool::Block c = MustAcquire(*p.pool);
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(a.data != b.data && b.data != c.data && a.data != c.data);
  EXPECT_EQ(p.pool->used_bytes(), 3 * kBlock);
  const std::byte* const b_data = b.data;
  const std::byte* const c_data = c.data;
  p.pool->ReleaseNow(b);
  ASSERT_TRUE(p.pool->Release(c, p.stream.view()).ok());
  p.pool->ReleaseNow(a);
  const PinnedPool::Block first = MustAcquire(*p.pool);
  const PinnedPool::Block second = MustAcquire(*p.pool);
  EXPECT_EQ(first.data, b_data);
  EXPECT_EQ(second.data, c_data);
  EXPECT_EQ(p.pool->used_bytes(), 2 * kBlock);  // a is still free
  p.pool->ReleaseNow(first);
  p.pool->ReleaseNow(second);
  EXPECT_EQ(p.pool->used_bytes(), 0u);
}

TEST(PinnedPool, WaitsForTheCopyThatStillReadsTheBlock) {
  TALLY_REQUIRE_GPU();
  PoolOnDevice0 p;
  ASSERT_NO_FATAL_FAILURE(MakePool(1, &p));
  PinnedPool::Block a = MustAcquire(*p.pool);
  ASSERT_TRUE(a);
  std::atomic<bool> copied{false};
  ASSERT_NO_FATAL_FAILURE(HoldStream(p.stream.view(), 300, &copied));
  ASSERT_TRUE(p.pool->Release(a, p.stream.view()).ok());
  PinnedPool::Block again = MustAcquire(*p.pool);
  EXPECT_EQ(again.data, a.data);
  EXPECT_TRUE(copied.load()) << "handed out before the stream that reads it was done";
  p.pool->ReleaseNow(again);
}

TEST(PinnedPool, EmptyPoolIsResourceExhaustedAfterTheWait) {
  TALLY_REQUIRE_GPU();
  PoolOnDevice0 p;
  ASSERT_NO_FATAL_FAILURE(MakePool(1, &p));
  PinnedPool::Block a = MustAcquire(*p.pool);
  ASSERT_TRUE(a);
  const Clock::time_point start = Clock::now();
  absl::StatusOr<PinnedPool::Block> none = p.pool->Acquire(milliseconds(50));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted) << none.status();
  EXPECT_GE(Clock::now() - start, milliseconds(45));
  p.pool->ReleaseNow(a);
}

// `sizes` bytes from device arrays to the host in one CopyAllToHost, `busy`
// of the pool's blocks lent elsewhere meanwhile; every byte where it
// belongs, in targets poisoned and emptied first.
void CopyAndCheck(PoolOnDevice0& p, const std::vector<std::size_t>& sizes, int busy, cpu::ThreadPool* copiers) {
  std::vector<std::vector<std::uint8_t>> want, got;
  std::vector<void*> device;
  std::vector<HostCopy> copies;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::vector<std::uint8_t>& w = want.emplace_back(sizes[i]);
    for (std::size_t j = 0; j < w.size(); ++j) w[j] = static_cast<std::uint8_t>(j * 31 + i * 7 + 1);
    void* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, std::max<std::size_t>(sizes[i], 1)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d, w.data(), w.size(), cudaMemcpyHostToDevice), cudaSuccess);
    device.push_back(d);
    got.emplace_back(sizes[i], std::uint8_t{0xEE});  // poisoned
  }
  std::vector<std::unique_ptr<VectorTarget<std::uint8_t>>> targets;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    targets.push_back(std::make_unique<VectorTarget<std::uint8_t>>(got[i]));
    copies.push_back(HostCopy{device[i], sizes[i], targets.back().get()});
  }
  std::vector<PinnedPool::Block> held;
  for (int b = 0; b < busy; ++b) held.push_back(MustAcquire(*p.pool));
  const absl::Status s = CopyAllToHost(*p.pool, p.stream.get(), copies, copiers);
  for (PinnedPool::Block& b : held) p.pool->ReleaseNow(b);
  ASSERT_TRUE(s.ok()) << s;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "array " << i << " of " << sizes.size() << ", " << sizes[i] << " bytes, " << busy
                               << " of the pool's blocks lent, " << (copiers ? "several copiers" : "one copier");
    ASSERT_EQ(cudaFree(device[i]), cudaSuccess);
  }
  EXPECT_EQ(p.pool->used_bytes(), 0u) << "a block was kept";
}

// Several device arrays to the host at once: together in one block where
// they fit it (odd sizes, an empty one), in batches of a block through two
// blocks, or one, where they do not, and plainly where the pool lends no
// block.
TEST(CopyAllToHost, EveryArrayArrivesWhole) {
  TALLY_REQUIRE_GPU();
  PoolOnDevice0 p;
  ASSERT_NO_FATAL_FAILURE(MakePool(2, &p));
  for (const std::vector<std::size_t>& sizes :
       {std::vector<std::size_t>{8, 0, 13, 4096, 1001}, std::vector<std::size_t>{kBlock / 2, kBlock / 2 + 40},
        std::vector<std::size_t>{3 * kBlock + 7, 5}, std::vector<std::size_t>{kBlock - 8, 24, 2 * kBlock + 16, 0, 7}}) {
    // Every block free (two take turns), one lent elsewhere (one block
    // alone), and both (plain copies).
    for (const int busy : {0, 1, 2}) ASSERT_NO_FATAL_FAILURE(CopyAndCheck(p, sizes, busy, nullptr));
  }
}

// With copiers the arrays' pieces are dealt in turn and copied out by
// several threads, a target's pieces in order: arrays of unequal lengths
// (some ending mid-block, one empty, one small enough to share a block),
// with every block of the pool free (waves of four batches in two sets),
// five or three (smaller waves), one (no second set) or none lent.
TEST(CopyAllToHost, SeveralCopiersKeepEachArraysOrder) {
  TALLY_REQUIRE_GPU();
  PoolOnDevice0 p;
  ASSERT_NO_FATAL_FAILURE(MakePool(8, &p));
  cpu::ThreadPool copiers(4);
  for (const std::vector<std::size_t>& sizes :
       {std::vector<std::size_t>{3 * kBlock + 7, 5 * kBlock + 3, kBlock / 3, 0, 2 * kBlock, 11 * kBlock + 1},
        std::vector<std::size_t>{9 * kBlock - 16}, std::vector<std::size_t>{kBlock / 2, kBlock / 2, kBlock / 2}}) {
    for (const int busy : {0, 3, 5, 7, 8}) ASSERT_NO_FATAL_FAILURE(CopyAndCheck(p, sizes, busy, &copiers));
  }
}

}  // namespace
}  // namespace tally::cuda
