// The CUDA engine's tuning numbers, each with the reasoning or measurement
// behind it. The flag defaults in BackendOptions (backend_factory.h) cite
// these; bench/engine measures them on a real host.
#pragma once

#include <cstdint>

namespace tally::cuda {

struct EnginePolicy {
  // Device chunk buffers per lane: chunk k is staged on the host while k-1
  // copies and k-2 is reduced, so three keep every stage busy; a fourth
  // only adds latency (the host waits on chunk k-3's kernel before reusing
  // its buffer, which is long done at PCIe rates: the kernel reads a chunk
  // ~50x faster than PCIe delivers it).
  static constexpr int kChunkSlots = 3;

  // Pinned blocks one lane can hold at once: the block being filled plus one
  // per chunk slot whose copy may still be in flight.
  static constexpr int kBlocksPerLane = kChunkSlots + 1;

  // Default chunk (BackendOptions::chunk_bytes): 8 MiB. A cudaMemcpyAsync
  // costs ~5-10 us to issue and complete; at PCIe 5 x16 pinned H2D
  // (~50 GB/s on H100 hosts) 8 MiB takes ~170 us, so the fixed cost is
  // <6%, and Accumulate's launch overhead (a few us) hides behind the copy.
  // Smaller chunks cost throughput; bigger ones cost pinned memory per lane
  // (kBlocksPerLane x chunk) and first-byte latency.
  static constexpr std::uint64_t kDefaultChunkBytes = std::uint64_t{8} << 20;

  // Chunk sizes are kept a multiple of this (every dtype's size divides it,
  // and the kernels' vector loads want 16-byte aligned chunks).
  static constexpr std::uint64_t kChunkAlignment = 256;

  // Default small_request_bytes: 1 MiB. The GPU path's floor is a lane
  // checkout, a host memcpy into pinned memory (~10 GB/s), an H2D copy,
  // one launch per pass, a D2H of the state and a stream sync: ~40-60 us
  // plus ~140 us for 1 MiB. The CPU backend reduces 1 MiB in ~50-150 us
  // (5-20 GB/s depending on ops and threads) with no copies at all. So
  // below ~1 MiB the CPU is at least as fast; measure with bench/engine
  // (--small_request_bytes overrides).
  static constexpr std::uint64_t kDefaultSmallRequestBytes = std::uint64_t{1} << 20;

  // The other BackendOptions defaults (backend_factory.h):
  // - streams_per_device 16: a lane is held for a whole request (a 4 GiB
  //   stream at the ~2.5 GB/s one gRPC stream delivers: ~1.6 s), so lanes
  //   bound the concurrent requests per GPU, not the bandwidth. Measured on
  //   the H100 host (2026-11-22): with 4 lanes and a 100 ms wait, 8
  //   concurrent 4 GiB streams saw 12 of 16 requests refused, and 64 clients
  //   mixing 1 KiB..256 MiB saw 5114 of 13636 refused. 16 lanes take 16 x
  //   kBlocksPerLane x 8 MiB = 512 MiB of pinned staging and ~42 MiB of
  //   device memory each (3 chunk buffers, state, scratch).
  // - pinned_pool_bytes 1 GiB: the 16 lanes of one GPU, twice over; on more
  //   GPUs the lanes shrink to fit (logged).
  // - max_state_bytes 16 MiB: per lane on the device and pinned; holds
  //   every non-histogram op for ~200K rows, or a 65536-bin histogram for
  //   32 rows. Larger states go to the CPU backend (decided by the plan
  //   alone, so a request always gets the same bits).
  // - lane_wait 2 s: as long as the front end's admission wait; a busy GPU
  //   frees a lane every few hundred ms under the load above, and a client
  //   told RESOURCE_EXHAUSTED after 2 s can still retry within a deadline.

  // Default staging_copy_threads: 8. One thread copies pageable bytes into
  // pinned staging at ~5.3 GB/s on the H100 host, 8 at ~37-45 GB/s, 16 at
  // ~48 GB/s, the memory's limit (tally-staging-copy-bench, docs/
  // performance.md); pinned H2D runs at ~55 GB/s. Eight threads bring a
  // unary message's copy near the H2D rate without taking every core from
  // gRPC's receive threads.
  static constexpr int kDefaultStagingCopyThreads = 8;

  // Each copying thread takes at least this much of a staging block: the
  // hand-off (~2 us) is small against the ~100 us a thread spends copying
  // it, and a 4 MiB message is still cut into 8 pieces.
  static constexpr std::uint64_t kParallelCopyBytes = std::uint64_t{512} << 10;

  // How long a Consume may wait for a pinned block when the pool is empty
  // (only when --pinned_pool_bytes is smaller than the lanes need; the
  // backend sizes lanes so that it is not): then RESOURCE_EXHAUSTED.
  static constexpr int kPinnedWaitMs = 2000;

  // Scratch per lane beyond the largest a sampled plan needed at start
  // (kernel tuning may change shapes slightly): x2 + 1 MiB.
  static constexpr std::uint64_t kScratchHeadroomFactor = 2;
  static constexpr std::uint64_t kScratchHeadroomBytes = std::uint64_t{1} << 20;

  // Group-by tables that arrive in host memory (inline, a shared-memory
  // region) are copied to a GPU and grouped there from this many rows
  // (Backend::CopyToDevice). On the H200 host the host's grouping of 1e8
  // rows (int8 key of 100 values, int64 values: the h2o benchmark's q1)
  // took 1.67 s, 17 ns a row, where a pageable copy to the GPU costs about
  // 1 ns a row for those 9 bytes and the device's grouping under 0.2 ns;
  // the copy's fixed cost (a stream, the pool's allocation, a sync) is
  // tens of microseconds. 2^20 rows leaves small tables to the host, where
  // they answer in milliseconds anyway.
  static constexpr std::uint64_t kMinRowsToGroupOnDevice = std::uint64_t{1} << 20;

  // Integer keys that the direct pass does not take are numbered through a
  // hash table of their distinct values (kernels::NumberKeysByHash) where
  // their range needs more than this many bits, and sorted as they are
  // where it needs fewer. CUB's radix sort takes a pass per 8 bits of the
  // range: past 24 bits, four passes of 8 bytes a row or more (2^28 rows
  // of keys spread over 64 bits took 70-95 ms to group on an H200 by the
  // sort; 7.7-9.0 ms at 16 groups, 22-24 at 65,536 and 51-53 at 1M
  // through the table), where the table takes a read to insert and one to
  // look up. The 24 bits themselves are not measured against a sort.
  static constexpr int kHashKeysPastRangeBits = 24;
};

}  // namespace tally::cuda
