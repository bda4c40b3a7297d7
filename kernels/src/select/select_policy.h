// Tuning numbers of the selection and HyperLogLog passes, each with the
// reasoning or measurement behind it (H100 SXM 80GB, CUDA 13.0). Plain C++:
// the host planning code sizes scratch from the same numbers.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tally::kernels::select {

struct SelectPolicy {
  // Threads per block of the full passes (counting, gathering, top-k) and
  // blocks per SM their registers are cut for: 2 x 512 threads x kVecs x 16
  // bytes = 64 KB of loads in flight per SM, what the fused kernels found to
  // hold ~3 TB/s (policy.cuh: 64-96 KB per SM).
  static constexpr int kThreads = 512;
  static constexpr int kBlocksPerSm = 2;
  static constexpr int kVecs = 4;
  // Blocks per SM of the counting and gathering passes (the gathering pass
  // repeats the counting pass's grid, whose per-block counts place its
  // writes). Two: Nsight Compute on H100 (2^28 int32) saw them at 48%
  // achieved occupancy with 36% of cycles issuing nothing, but a third
  // block (32-bit keys' 72 KB of shared tables fit three) measured slower,
  // tally-kept-bench 2026-11-26: float32 median 1.136 ms against 1.065,
  // int32 1.010 against 0.927 (2^28 elements, median of 5).
  static constexpr int CountBlocksPerSm(int /*key_bytes*/) { return 2; }

  // Buckets of the counting pass, in shared memory (64 KB of counters plus
  // the 1024-bin table, so two blocks fit an SM). The sample spreads them
  // over where the keys are, so a bucket holds about n / 16384 elements and
  // the ranks' buckets, gathered, are a few MB for 2^28 elements.
  static constexpr int kBuckets = 16384;
  // Of which each of the kLevelBins bins keeps 2 (below and above its
  // sub-ranges) and the sample's shares round up by one at most per bin.
  static constexpr int kSubBuckets = kBuckets - 3 * 1024;

  // The sample: kStrata evenly spaced runs of kRun adjacent elements, so
  // that it reads whole sectors and still sees every part of the array.
  // 65536 keys: four per bucket on average, enough to place sub-ranges;
  // top-k's guess is one rank of it (a rank selection, rank_select.cuh).
  static constexpr std::uint32_t kStrata = 4096;
  static constexpr std::uint32_t kRun = 16;
  static constexpr std::uint32_t kSample = kStrata * kRun;

  // An order-statistics selection's sample: 2^20 keys (65,536 runs of 16,
  // 4 MB of 32-bit keys, a few microseconds to read), so that the ranks the
  // caller says it will ask for (Count's hints) can be placed closely
  // enough for the window pass to gather them: a rank at fraction f of
  // the elements lies within kHintSigmas binomial standard deviations,
  // sqrt(s f (1 - f)), of the sample's rank f s but with a probability of
  // about 1e-4 (then the counting pass follows, as without hints). For the
  // median of 2^28 elements the window is 2 x (4 x 512 + 8) of 2^20 sample
  // keys: about 1.05M elements gathered (4 MB of keys) and sorted.
  static constexpr std::uint32_t kSelectionSample = 65536 * kRun;
  static constexpr double kHintSigmas = 4.0;
  static constexpr double kHintExtra = 8.0;
  // Hints one Count takes (more, as 64 quantiles' windows would cover most
  // of the array, go without), and the share of the gathering room their
  // windows' sample keys may predict before the counting pass is taken
  // instead of the window pass.
  static constexpr int kMaxHints = 8;
  static constexpr double kHintRoomShare = 0.75;
  // Entries each warp of the window pass and of top-k's gathering pass
  // buffers in shared memory before it appends them to the list with one
  // atomic: 64 (4 KB a block of 32-bit keys; top-k's indices another 4 KB)
  // makes a median's 1M keys of 2^28 about 16K atomics.
  static constexpr int kWarpBuffer = 64;

  // Elements gathered for the final sort when the ranks' buckets are known:
  // at least 2^22, else n / 64 (16 MB of keys for 2^28 float32, twice for
  // the sort's buffers). 128 ranks' buckets hold about 128 x n / 16384
  // elements (2M of 2^28). Past the room the refining pass runs (a full
  // read) instead of gathering: only heavy duplicates, a sample that missed
  // a dense range, or thousands of ranks get there.
  static constexpr std::uint64_t Candidates(std::uint64_t n) {
    return std::min<std::uint64_t>(n, std::max<std::uint64_t>(std::uint64_t{1} << 22, n / 64));
  }
  // Top-k's exact fallback selects one rank: its bucket, about n / 16384
  // elements, fits 2^20 up to 2^34 elements.
  static constexpr std::uint64_t OneRankCandidates(std::uint64_t n) {
    return std::min<std::uint64_t>(n, std::uint64_t{1} << 20);
  }

  // Top-k's guess: the sample key of rank j from the top, j = 1.25 k s / n
  // plus 4 standard deviations plus 4, leaves at least k elements at or
  // above it except with a probability under 1e-4, and about 1.25 k + 4
  // sqrt(k n / s) + 4 n / s of them (for k = 65536 of 2^28: ~164K).
  static constexpr double kGuessMargin = 1.25;
  static constexpr double kGuessSigmas = 4.0;
  static constexpr double kGuessExtra = 4.0;
  // Room for the elements above the guess and for those equal to it: 4 k +
  // 2^16 each covers the guess's spread with room to spare (overflowing
  // costs an exact selection, three more passes, not a wrong answer).
  static constexpr std::uint64_t TopCandidates(std::uint64_t n, std::uint64_t k) {
    return std::min<std::uint64_t>(n, 4 * k + (std::uint64_t{1} << 16));
  }
  // Top-k's answer from its gathered entries of 32-bit keys (words of key
  // and complemented index, all distinct): where they are at most this many
  // times the k wanted, one sort of all of them, whose first k are the
  // answer; else a rank selection of the k-th word (eight launches over the
  // entries, 8 us each on an H200 whatever their count), the k at or above
  // it taken out and only those sorted. A CUB onesweep pass costs about the
  // same for 20K or 2M keys, so at k = 65,536 (about 164K gathered) the one
  // sort spares the selection's 64 us and the take's launch and costs the
  // larger sort's few microseconds; at k = 8 or 1,024 (about 20K and 10K
  // gathered) the selection of k stays. Measured (H200, 2^28 float32,
  // tally-kept-bench): topk and bottomk at k = 65,536 0.69-0.73 -> 0.65-0.66
  // ms a call.
  static constexpr std::uint64_t kSortAllTopEntries = 4;
  static constexpr std::uint64_t TopWordsRoom(std::uint64_t want) { return kSortAllTopEntries * want; }

  // Elements per top-k tile, whose ties are counted apart so that the
  // first ties by index can be found without gathering all of them: one
  // block iteration (kThreads x kVecs vectors of 16 bytes).
  static constexpr std::uint64_t TopTile(int elem_bytes) {
    return static_cast<std::uint64_t>(kThreads) * kVecs * (16 / elem_bytes);
  }
};

struct HllPolicy {
  // Each block's registers live in shared memory as 32-bit words up to
  // 2^15 (128 KB: a plain read and atomicMax, straight-line code), as bytes
  // raised by CAS up to 2^17 (128 KB); 2^18 registers go straight to global
  // memory (L2-resident, 1 MB). The word kind is the fast one: the byte
  // kind's CAS loop made warps diverge (16 of 32 threads active on average,
  // 937M instructions for 2^28 int32 at 2^12 registers, 1.6 ms on H100).
  static constexpr std::uint32_t kMaxWordPrecision = 15;
  static constexpr std::uint32_t kMaxBytePrecision = 17;
  static constexpr int kThreads = 512;
  static constexpr int kVecs = 4;
  // Threads of a block keeping its registers as words in shared memory:
  // 1024, so that two blocks (2 x 64 KB of registers at precision 14) fill
  // an SM's 2,048 threads, where blocks of 512 left three (75%); the kernel
  // takes 32 registers a thread, all two such blocks may have.
  static constexpr int kWordThreads = 1024;
  // Slots of each block's own set of distinct hashes in the exact
  // (small-count) pass: 32 KB, so that a block sends each of up to a few
  // thousand distinct values to the global set once.
  static constexpr std::uint32_t kLocalSlots = 4096;
  static constexpr int kLocalProbes = 8;
};

// DDSketch's counting pass (ddsketch/ddsketch_kernels.cuh). Each block
// counts in shared memory over a window of bucket indices per sign, placed
// at the index of the first element it reads (kWindow, about 165 binades at
// 1% accuracy, 64 KB; more for finer accuracies, up to a block's shared
// memory), 32-bit counts; elements outside it go to the global counts by
// atomics. One shared atomic an element bounds it
// (H100, 2^28 uniform in [-1000, 1000), 1%: 220-260 G elements/s whatever
// the element's size); measured and not kept: 2 or 4 copies of the window,
// warps taking turns (no faster), and lanes of a warp combining equal
// buckets by __match_any_sync first (2.5x slower).
struct DdSketchPolicy {
  static constexpr int kThreads = 512;
  static constexpr int kVecs = 4;
  static constexpr std::int32_t kWindow = 8192;  // the least window, per sign
  // Binades a window should span: it grows with the accuracy's buckets per
  // binade up to what a block's shared memory holds (0.1%: about 29,000
  // indices, 227 KB, one block an SM).
  static constexpr double kBinades = 160;
};

}  // namespace tally::kernels::select
