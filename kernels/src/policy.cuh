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
  // histogram): 2 (114 registers, no spills). The lean, histogram and simple
  // slice kernels: below, with their measurements. What decides their speed
  // is the bytes of loads each SM keeps in flight: blocks x threads x
  // vectors per thread x 16 bytes (x 2 when the tiles are pipelined).
  // Team kernels: full 2 (128 registers), lean 3 (80 registers, 82 bytes of
  // spills outside the load loop; at 2 blocks rows of 32 float32 summed at
  // 2378 GB/s).
  static constexpr int kFullBlocksPerSm = 2;
  // Slice kernel with a histogram and other ops but no moments (kHist): 3
  // blocks per SM (85 registers), HistVecs 3, pipelined: 72 KB of loads in
  // flight per SM. Measured with a histogram alone, before kHistOnly took
  // those (2026-11-22, three runs each, CUB 256 bins 2992-3010 in the same
  // runs), 256 bins / 4096 bins GB/s:
  //   4 blocks x 2 vectors, not pipelined (32 KB)   2870      / 2695
  //   3 x 4, not pipelined (48 KB, 28 bytes spilled) 2819-2824 / 2655-2661
  //   3 x 2, pipelined (48 KB)                      2894-2899 / 2812-2815
  //   4 x 2, pipelined (64 KB, 68 bytes spilled)    2909-2922 / 2771-2788
  //   3 x 3, pipelined (72 KB, 20 bytes spilled)    2934-2936 / 2837-2843
  // and the fused five went from 4.30x to 4.59-4.60x the CUB calls. The
  // integer and uint8 kernels spill more with it (int32 56 -> 104 bytes,
  // uint8 68 -> 92; untimed). (Earlier, before the binning was cut to 20
  // instructions per element, 4 x 2 beat 4 x 4 and 3 x 8, which spilled.)
  static constexpr int kHistBlocksPerSm = 3;
  static constexpr bool kHistPipelined = true;  // kHist and kHistOnly
  // A histogram alone (kHistOnly): no sum, extremes or arg state, so 4
  // blocks per SM of HistOnlyVecs 3 pipelined fit in 64 registers without
  // spills (96 KB in flight per SM); 3 x 4 pipelined also spills nothing,
  // 5 x 2 spills 24 bytes. Measured beside kHist (3 x 3 pipelined) and CUB
  // in three runs (2026-11-22): 256 bins 4 x 3 3060-3065, 3 x 4 3059-3065,
  // 5 x 2 3037-3043, kHist 2932-2936 (CUB 2983-3015); 4096 bins 3000-3002,
  // 2987-2995, 2955-2965, 2829-2839. Part of the gain is the tail: with no
  // partial fields a block returns once its counts are added (no flags).
  static constexpr int kHistOnlyBlocksPerSm = 4;
  static constexpr int HistOnlyVecs(int elem_bytes) { return elem_bytes == 1 ? 2 : 3; }
  // Lean slice kernel (sum of squares, argmin, argmax and the rest): 3
  // blocks per SM, LeanVecs vectors per thread, not pipelined (96 KB in
  // flight per SM). argmax, CUB 2999-3007 in the same runs: 4 blocks x 4
  // not pipelined (64 KB) 2979-2986; 3 x 8 not pipelined 2987-2998; 2 x 8
  // pipelined 2992-3001; 4 x 8 (spills 24 bytes) 2975-2977; 3 x 4
  // pipelined 3000-3004, which was kept then. Once the warps shared their
  // argmax floor (ThreadAgg::ShareWarp: 96 -> 72 million warp
  // instructions for 1 GiB), side by side in two runs (2026-11-22, CUB
  // 3001-3007): 3 x 8 not pipelined 3022-3023 (4 GiB: 3109), 2 x 8
  // pipelined 3012-3016 (3096), 3 x 4 pipelined 3007-3010 (3085), 4 x 8
  // not pipelined 2985-2986 (3108), 4 x 4 pipelined 2977-2981 (3088).
  // 8-byte elements take 6 vectors (8 spilled 212 bytes in float64, whose
  // NaN rule is software; untimed), uint8 2 (elements one by one).
  static constexpr int kLeanBlocksPerSm = 3;
  static constexpr bool kLeanPipelined = false;
  static constexpr int LeanVecs(int elem_bytes) { return elem_bytes == 1 ? 2 : elem_bytes == 8 ? 6 : 8; }
  // Sum, min and max alone (kSimple): 3 blocks per SM (85 registers, no
  // spills), SimpleVecs 8 vectors per thread, not pipelined: 96 KB of loads
  // in flight per SM. sum/min/max against CUB in the same runs (2026-11-22,
  // three runs each): 6 blocks x 4 vectors 3058-3064 / 3052-3057 /
  // 3053-3061 (CUB 3071-3076); 4 x 8 3072-3080 / 3076-3079 / 3073-3077; 3 x 8
  // 3073-3080 / 3075-3082 / 3069-3080; pipelined 4 x 4 and 3 x 4 3054-3065;
  // 8 x 4 spills (2982). More blocks than fit at once (2x, 4x, 8x the
  // resident count, each then merging more partials) lost: 3025, 2996, 2928.
  static constexpr int kSimpleBlocksPerSm = 3;
  static constexpr int SimpleVecs(int elem_bytes) { return elem_bytes == 1 ? 4 : 8; }
  // A slice variant with the exact pass inside (SliceKernel's kExact, float32
  // and float64). At its variant's own bound the exact state spilled 36-848
  // bytes (ptxas, sm_90: kLean with squares 848, kHist 272 and 512 with
  // squares, kHistOnly 188 and 424, kSimple 36 and 356). 2 blocks per SM
  // (128 registers; float64 kLean with squares spills 104 bytes) against 3
  // (spilling), exact / fused pass on one H200, `tally-kernel-bench
  // 1073741824 exact`, two calls (docs/performance.md, "The exact pass
  // inside the fused kernels"), 2 / 3 blocks: float32 sum+max+hist:256
  // (kHist) 0.766 / 0.462-0.473, sum+hist:256 (kHistOnly) 0.848 / 0.830,
  // var+min+max+argmax (kLean, squares) 1.034-1.046 / 0.730-0.786,
  // sum+min+max+mean (kSimple) 1.305-1.330 / 1.315-1.316; float64, the same
  // plans, 0.734-0.735 / 0.809-0.810, 0.756 / 0.879, 0.763-0.768 /
  // 0.757-0.774, 1.190-1.198 / 1.320. So 3 for float64's sums alone outside
  // kLean, 2 for the rest: float64 with squares at 3 spilled 176-948 bytes
  // (kSimple 948), not timed.
  static constexpr int ExactFusedBlocksPerSm(int elem_bytes, bool lean, bool squares) {
    return elem_bytes == 8 && !lean && !squares ? 3 : 2;
  }
  // The slice kernel's tail: flags each thread loads before it checks any,
  // and partials the merging block loads at a time in kSimple and the lean
  // kernel (2: no spills in either; 4 spilled 48 bytes in kSimple at 6
  // blocks per SM; the histogram and full kernels load one at a time, for
  // their registers). With the loads one after another, sum measured
  // 3045-3049 GB/s, with these 3051-3057 (one run); 3058-3064 and 3074-3075
  // (another). The lean kernel's 2 at a time, on a faster H100 (CUB argmax
  // 3101-3105): argmax 3050-3051 -> 3053-3054 in five runs each.
  static constexpr int kTailFlagLoads = 4;
  static constexpr int kTailPartialLoads = 2;
  static constexpr int kTeamFullBlocksPerSm = 2;
  static constexpr int kTeamLeanBlocksPerSm = 3;
  // The masking variants (a validity mask, NaN-skipping ops). kNanSimple
  // (sums, extremes and counts, plain and NaN-skipping) is kSimple's shape:
  // 3 blocks per SM of SimpleVecs vectors, not pipelined, 96 KB of loads in
  // flight per SM, and each vector's 4-byte word of validity bits beside
  // them. kEvery, every field of both kinds, is kFull's: 2 blocks per SM
  // of VecsPerThread vectors; its team kernel likewise.
  static constexpr int kNanSimpleBlocksPerSm = 3;
  static constexpr int kEveryBlocksPerSm = 2;
  static constexpr int kTeamEveryBlocksPerSm = 2;
  // 16-byte loads each thread issues before it uses any (per tile), by
  // element size. 4 (64 B in flight per thread); 8 spills in both variants;
  // uint8 takes 2 (32 elements per tile), since 4 spilled 4 KB in the full
  // kernel (64 histogram slots live at once).
  static constexpr int VecsPerThread(int elem_bytes) { return elem_bytes == 1 ? 2 : 4; }
  // The histogram slice variant (kHist): see kHistBlocksPerSm. uint8 keeps
  // 2 (32 elements a group, ArgOp's bit mask).
  static constexpr int HistVecs(int elem_bytes) { return elem_bytes == 1 ? 2 : 3; }
  // Smallest slice one block takes: below this a whole array or row is one
  // block (the latency path, one launch, no partials).
  static constexpr std::int64_t kMinBytesPerBlock = 64 * 1024;
  // Whole arrays up to this size with sum, min and max only take
  // SmallKernel: one block, as the slice kernel would have used. 1K float32
  // sum, device time (events, median of 301, H100): slice kernel 5.9-6.1
  // us, SmallKernel 4.0-4.2, CUB's single-tile kernel 3.9-4.0, an empty
  // kernel 3.1-4.1; launch to result on the host 10.1-11.7 us against
  // CUB's 12.6-19.5.
  static constexpr std::int64_t kSmallMaxBytes = kMinBytesPerBlock;
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

namespace tally::kernels::detail {

// The variable-length segmented kernels (segmented/segmented_kernels.cuh):
// one table, H100 SXM, CUDA 13.0, 1 GiB float32, kSum, the kernel bench's
// "segmented csr" rows (2026-11-24; plain read ceiling 3067-3078 GB/s in the
// same runs). Times are the SegmentKernel's alone (Nsight Compute).
struct PolicySegmentedSm90 {
  // Consumer warps per block; one more warp copies tiles in (the producer).
  // Not varied.
  static constexpr int kConsumerWarps = 8;
  // Each consumer thread walks one chunk of a tile's elements, read by
  // 16-byte shared loads: an odd number of them, so that the lanes' chunks
  // start in different banks. With 8 (a 128-byte stride) the 8 lanes of each
  // load phase hit the same 4 banks: uniform 1-64 / 1K-64K 720 / 444 us;
  // with 7: 453 / 383 us. At most 32 elements (the boundary mask): 7 vectors
  // for 4- and 8-byte elements, 3 for 2-byte, 1 for 1-byte.
  static constexpr int ChunkVectors(int elem_bytes) { return elem_bytes >= 4 ? 7 : elem_bytes == 2 ? 3 : 1; }
  static constexpr int ChunkElements(int elem_bytes) { return ChunkVectors(elem_bytes) * 16 / elem_bytes; }
  // A tile holds at most 250 chunks' worth of elements (of the consumers'
  // 256: a tile's elements may start up to 15 bytes into their first
  // vector, and its weight pass its diagonal by less than an end's). Merge
  // items weigh what they cost in bytes: an element 1, a segment end (its
  // 8-byte offset) 8 / element size, so a tile's elements and offsets
  // together never pass TileWeight elements' bytes. Against unweighted
  // tiles of 3840 items (15 KB of float32 in a 30 KB stage): half the tiles,
  // and uniform 1K-64K 457 -> 444 us before the bank fix above.
  static constexpr int kTileChunks = 250;
  static constexpr int TileWeight(int elem_bytes) { return kTileChunks * ChunkElements(elem_bytes); }
  static constexpr int EndWeight(int elem_bytes) { return 8 / elem_bytes; }
  // Tiles in flight per block (shared-memory stages), and blocks per SM:
  // what shared memory holds (float32: 3 x 28 KB of stages + 16 KB of
  // boundary indices per block). A bulk-copy pipeline alone (consumers
  // summing every float) reached 3.1 TB/s with 1-2 blocks of 2-3 stages of
  // 16-30 KB per SM.
  static constexpr int kStages = 3;
  static constexpr int kBlocksPerSm = 2;
  // Fix-up of segments that span tiles: windows of up to this many tiles are
  // folded by one thread, longer ones by its whole warp. Not varied.
  static constexpr int kFixupThreads = 256;
  static constexpr int kShortWindow = 16;
};

using SegmentedPolicy = PolicySegmentedSm90;

}  // namespace tally::kernels::detail

namespace tally::kernels::detail {

// The fold pass (fold/fold_kernels.cuh: numpy.prod and count_nonzero, which
// have no fused implementation). Not tuned yet: chosen so that a piece is
// 32 elements per thread and a short row about 8 per lane; measured in
// docs/performance.md ("The fold pass").
struct PolicyFoldSm90 {
  static constexpr int kThreads = 256;
  // Blocks per SM the pieces kernel is launched with (a grid-stride loop).
  static constexpr int kBlocksPerSm = 8;
  // Elements a block reduces into one piece of a long row.
  static constexpr std::uint64_t kPieceElements = 8192;
  // Rows at least this long are cut into pieces; shorter ones take a group
  // of lanes each, about kElementsPerLane elements per lane, up to a warp.
  static constexpr std::uint64_t kLongRowElements = 4096;
  static constexpr std::uint64_t kElementsPerLane = 8;
};

using FoldPolicy = PolicyFoldSm90;

}  // namespace tally::kernels::detail
