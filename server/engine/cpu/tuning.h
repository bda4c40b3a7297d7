// The CPU backend's fixed geometry. These numbers are part of the results'
// definition, not only of their speed: blocks and chunks sit at fixed
// row-relative positions, and floating-point partials are combined in a fixed
// order inside them, so changing a number below may change float results in
// their last bits (still deterministic, but not the same bits as before).
#pragma once

#include <cstddef>

namespace tally::cpu {

struct CpuPolicy {
  // Elements per block, the unit every op reduces with one fixed algorithm.
  // The ops that need a second look at the block (M2 about the block's mean,
  // argmin/argmax, histograms) take it while the block is in L1: 16 KiB of
  // float64. tally-cpu-bench, 1 GiB float32, AMD EPYC (Zen 4) VM, 2 threads:
  // 1024, 2048 and 4096 all gave 15-30 GB/s for sum, min, max and the three
  // fused, the spread being run-to-run noise of the shared VM, not the size.
  // uint8 block sums must fit 32 bits: kBlockElements * 255 < 2^32.
  static constexpr std::size_t kBlockElements = 2048;

  // Blocks per chunk, the unit of parallel work: a chunk's block partials are
  // folded in block order by one thread, chunk partials in chunk order by the
  // request's thread. 64 Ki elements (256 KiB of float32, ~10 us of work) per
  // task keeps the scheduling cost (one atomic, ~100 ns) far below the work.
  static constexpr std::size_t kChunkBlocks = 32;
  static constexpr std::size_t kChunkElements = kBlockElements * kChunkBlocks;

  // Rows of at most this many elements are reduced whole by one thread,
  // rows in parallel; longer rows are split across threads by chunk.
  static constexpr std::size_t kShortRowElements = kChunkElements;

  // Short rows are handed out in groups of about this many elements.
  static constexpr std::size_t kRowGroupElements = 64 * 1024;

  // Most chunk partials held at once by one request (bounded memory however
  // large a Consume() piece is).
  static constexpr std::size_t kMaxChunksPerDispatch = 1024;

  // Independent accumulators in a block's vector loops: 16 doubles fill two
  // 512-bit or four 256-bit registers, enough to hide the add latency.
  static constexpr int kLanes = 16;
  // uint8 sums in 32-bit lanes, so twice as many fit a register.
  static constexpr int kByteLanes = 32;
  // Lanes of float64's exact range pass where it takes no min or max (with
  // them, kLanes, FusedLanes' own): its sums are exact and its range a max
  // and a min, so any count gives the same bits. tally-cpu-bench
  // --dtype=float64 --threads=1, this 2-vCPU AMD EPYC VM, 2026-11-28, four
  // rounds: sum_squares 41.5-44.5 ms with 8 against 46.8-47.8 with 16, sum
  // 40.1-41.5 against 43.3-44.7, var 49.0-51.4 against 50.8-55.1.
  static constexpr int kFloat64RangeLanes = 8;
};

}  // namespace tally::cpu
