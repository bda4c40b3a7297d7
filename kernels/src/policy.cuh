// Tuning numbers, one table per architecture, each with the measurement that
// chose it (H100 SXM 80GB, CUDA 13.0, 1 GiB float32 random input unless
// said otherwise; see docs/performance.md).
#pragma once

#include <cstdint>

namespace tally::kernels::detail {

struct PolicySm90 {
  // Threads per block of every kernel. 256: 8 warps keep the block reduce to
  // one shared step and let 2-4 blocks share an SM.
  static constexpr int kThreads = 256;
  // Blocks per SM each kernel's register budget is cut for
  // (__launch_bounds__). Full slice kernel (moments, with or without a
  // histogram): 2 (114 registers, no spills). Lean slice kernel: 4 (64 registers, no spills:
  // 64 KB of loads in flight per SM; at 2 blocks it reached 2741 GB/s for sum
  // vs CUB 3036, at 4 blocks 2766: occupancy was not what held it back; the
  // contiguous slice per block was, see AccumulateRange).
  // Team kernels: full 2 (128 registers), lean 3 (80 registers, 82 bytes of
  // spills outside the load loop; at 2 blocks rows of 32 float32 summed at
  // 2378 GB/s).
  static constexpr int kFullBlocksPerSm = 2;
  // Slice kernel with a histogram but no moments (kHist variant): 4 (64
  // registers; spills 36 bytes for float32, up to 144 for uint8, untimed): hist
  // 256 bins 2500 GB/s, 4096 bins 2025; at 3 (78 registers, no spills) 2328
  // and 1888.
  static constexpr int kHistBlocksPerSm = 4;
  static constexpr int kLeanBlocksPerSm = 4;
  // Sum, min and max alone (kSimple): 6 blocks per SM (40 registers, no
  // spills in the loop). sum/min/max at 6: 3049/3041/3045 GB/s (CUB
  // 3078/3073/3072); at 8 (32 registers, spills): 2982/2968/2966; the
  // general lean kernel at 4: 3025/3022/3023.
  static constexpr int kSimpleBlocksPerSm = 6;
  static constexpr int kTeamFullBlocksPerSm = 2;
  static constexpr int kTeamLeanBlocksPerSm = 3;
  // 16-byte loads each thread issues before it uses any (per tile), by
  // element size. 4 (64 B in flight per thread); 8 spills in both variants;
  // uint8 takes 2 (32 elements per tile), since 4 spilled 4 KB in the full
  // kernel (64 histogram slots live at once).
  static constexpr int VecsPerThread(int elem_bytes) { return elem_bytes == 1 ? 2 : 4; }
  // The histogram slice variant (kHist) takes 2 for every dtype: at 4
  // blocks/SM its spills drop (float32 36 -> 4 bytes) and hist 4096 bins
  // went 2035 -> 2238 GB/s, 65536 262 -> 301, fused five 2.89x -> 3.02x,
  // 256 bins unchanged (2532 vs 2519); 8 at 3 blocks/SM lost (256 bins
  // 2134).
  static constexpr int kHistVecsPerThread = 2;
  // Smallest slice one block takes: below this a whole array or row is one
  // block (the latency path, one launch, no partials).
  static constexpr std::int64_t kMinBytesPerBlock = 64 * 1024;
  // Rows up to this many bytes go to the team kernel (a team of 1..32 lanes
  // per row, many rows per warp); longer rows get one or more blocks each.
  static constexpr std::int64_t kTeamMaxRowBytes = 16 * 1024;
  // Team lanes are chosen so each lane loads about this many 16-byte vectors
  // of its row: 8 makes rows of 32 float32 one lane each (no shuffles, 8
  // loads in flight per lane); 2 gave 1012 GB/s there (4 lanes per row).
  static constexpr int kTeamVecsPerLane = 8;
  // RowVecKernel (rows of 2, 4 or 8 whole 16-byte vectors, lean ops): loads
  // per lane per round (8: 128 B in flight per lane, 48 KB of staging per
  // block), and blocks per SM its registers are cut for (3: 80 registers,
  // no spills; 4 spilled 32 bytes). Rows of 32 float32: 2720 and 2670 GB/s
  // in two runs (the team kernel, one lane per row: 2419).
  static constexpr int kRowVecLoads = 8;
  static constexpr int kRowVecBlocksPerSm = 3;
  // Shared-memory bytes of histogram counters one block may hold; more bins
  // are spread over a thread-block cluster (distributed shared memory).
  // 80 KB: 65536 bins take a cluster of 4 with 64 KB each, 3 blocks per SM.
  static constexpr std::int64_t kHistCountBytesPerBlock = 80 * 1024;
  // Bins up to this many get an edge table in shared memory (numpy's
  // linspace edges, computed once per block) instead of per-element edges.
  static constexpr std::uint32_t kEdgeTableMaxBins = 4096;
  // Run-length counting (one atomic per run of equal slots) for a block's
  // own shared counters. Off: one shared atomic per element. Uniform data
  // has no runs, and the compare-and-branch per element cost more than it
  // saved: hist 256 uniform 2093 -> 2328 GB/s, skewed (every value in one
  // bin, same-address atomics) 2473 -> 2391. Cluster and global counters
  // always use it (remote atomics are dear).
  static constexpr bool kSharedRunLength = false;
  // Histogram binning checks the quick guess of a group of elements (a
  // thread's 8 float32) with one branch, and sends the whole group down
  // the exact path when any element is near an edge. Above this chance per
  // element of being near an edge (2 * margin) each element branches on its
  // own instead: at 4096 bins over [0, 1) (chance 0.3%) groups took the
  // exact path in most warps and ran at 1780 GB/s, against 2279 for
  // per-element branches; at 256 bins (0.02%) groups ran at 2769 GB/s, per
  // element 2560.
  static constexpr double kHistGroupMaxNearEdge = 0.0005;
  // Histograms whose u32 counters exceed kHistCountBytesPerBlock and that
  // need no moments count in one block per SM holding every bin in 16 bits
  // (HistSink::kShared16: 65536 bins in 128 KB) instead of a cluster, whose
  // remote atomics held 65536 bins to 301 GB/s. The block has
  // kHistWideThreads threads, so that an SM still keeps 32 warps of loads
  // in flight; each thread loads HistWideVecs vectors per tile (uint8 1, so
  // that a tile stays within 16384 elements), and the block meets at a
  // barrier as often as Count16's bound needs (SliceKernel).
  static constexpr int kHistWideThreads = 1024;
  static constexpr int HistWideVecs(int elem_bytes) { return elem_bytes == 1 ? 1 : 2; }
  // Largest cluster (portable limit).
  static constexpr int kMaxCluster = 8;
};

using Policy = PolicySm90;  // the only tuned architecture; used for all.

}  // namespace tally::kernels::detail
