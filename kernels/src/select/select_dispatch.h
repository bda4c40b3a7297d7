// The launchers of the selection's kernels, one instantiation per dtype
// (select_f32.cu, ...) and per key width (select_keys.cu): what the host
// planning in select_api.cc calls. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "select/keys.h"
#include "select/select_policy.h"

namespace tally::kernels::select {

// Counters per row of the counting pass (one row per block, then their
// sums): the buckets, then NaN's, then a slot no element counts in.
inline constexpr int kNanSlot = SelectPolicy::kBuckets;
inline constexpr int kCountSlots = SelectPolicy::kBuckets + 2;
// Segments (so ranks) one Select() takes: the refining pass gives each at
// least two of its buckets.
inline constexpr std::uint32_t kMaxSegments = SelectPolicy::kBuckets / 4;

// Keys each warp of the window pass buffers before appending them to the
// gathered list (SelectPolicy::kWarpBuffer).
inline constexpr int kWarpBuffer = SelectPolicy::kWarpBuffer;

// The passes' shared memory: the bin table, then the counters (counting),
// the map and the segments' cursors (gathering: `segments` of them when
// each block writes its own places, else none), or the map and the
// counters (refining).

template <typename K>
constexpr std::size_t CountSharedBytes() {
  return sizeof(Bin<K>) * kLevelBins + sizeof(std::uint32_t) * kCountSlots;
}
template <typename K>
constexpr std::size_t GatherSharedBytes(std::uint32_t segments) {
  return sizeof(Bin<K>) * kLevelBins + sizeof(std::uint32_t) * (SelectPolicy::kBuckets + segments);
}
template <typename K>
constexpr std::size_t RefineSharedBytes() {
  return sizeof(Bin<K>) * kLevelBins + sizeof(std::uint32_t) * (SelectPolicy::kBuckets + kCountSlots);
}

// The fractions of the non-NaN elements' ranks a selection will be asked
// for (Count's hints), ascending, by value to WindowRanksKernel.
struct GatherHints {
  int count = 0;
  double fraction[SelectPolicy::kMaxHints] = {};
};

// The windows of keys a window pass counts around and gathers (the hints'
// windows, WindowsFromRanksKernel's): `count` of them, ascending and apart; none
// when the pass should not run.
template <typename K>
struct Windows {
  std::uint32_t count = 0;
  K lo[SelectPolicy::kMaxHints] = {};
  K hi[SelectPolicy::kMaxHints] = {};
};

// What the window pass counts (zeroed by the caller): per window the
// numbers below its lowest key and those up to its highest, the NaN
// elements, and the keys inside the windows (all of them, kept or not).
struct WindowCounts {
  unsigned long long below[SelectPolicy::kMaxHints] = {};
  unsigned long long upto[SelectPolicy::kMaxHints] = {};
  unsigned long long nan = 0;
  std::uint32_t gathered = 0;
  std::uint32_t sampled_nan = 0;  // the sample's NaN keys (SampleKernel's, zeroed with these)
};

// Ranks one rank selection finds at once (rank_select.cuh): the ranks
// whose keys share the digits found so far count the next digit in 256
// counters of shared memory, 16 KB for 16 such groups.
inline constexpr int kMaxRankSelect = 16;
inline constexpr int kRankDigits = 256;

// Ranks handed to a rank selection by value (count 0: the ones a kernel
// wrote into its state before it).
struct RankArgs {
  std::uint32_t count = 0;
  std::uint64_t rank[kMaxRankSelect] = {};
};

// A rank selection in scratch: the keys at ranks rank[0, count) (ascending,
// equal ones allowed) of an unsorted array, a byte at a time from the top.
// Zeroed before its first level; a kernel may then write count and rank.
template <typename K>
struct RankSelect {
  static constexpr int kLevels = sizeof(K);
  std::uint32_t count;
  std::uint32_t lost;                     // set when a rank was not found (a wrong count or rank)
  std::uint64_t rank[kMaxRankSelect];     // then the rank among the keys with the digits found
  K key[kMaxRankSelect];                  // the digits found; after the last level, the keys
  std::uint32_t group[kMaxRankSelect];    // each rank's group: the ranks of one digits-so-far
  std::uint32_t groups;
  K prefix[kMaxRankSelect];               // each group's digits so far, ascending
  std::uint32_t finished[kLevels];        // blocks done with each level
  std::uint32_t counts[kLevels][kMaxRankSelect][kRankDigits];
};

// Where the window pass's windows come from in the sample's selected keys
// (WindowRanksKernel for WindowsFromRanksKernel): per hint the places of
// its lowest and highest key among the selection's ranks, or none past
// either end of the sample.
struct WindowPlan {
  int count = 0;
  double predicted = 0;   // sample keys the windows span
  std::uint32_t numbers = 0;  // sample keys that are numbers
  std::uint8_t lo_at[SelectPolicy::kMaxHints] = {};
  std::uint8_t hi_at[SelectPolicy::kMaxHints] = {};
  bool to_bottom[SelectPolicy::kMaxHints] = {};
  bool to_top[SelectPolicy::kMaxHints] = {};
};

template <typename K>
struct TopListsView {
  K* above_keys = nullptr;
  std::uint32_t* above_index = nullptr;
  std::uint32_t above_room = 0;
  K* equal_keys = nullptr;
  std::uint32_t* equal_index = nullptr;
  std::uint32_t equal_room = 0;
  std::uint32_t* counts = nullptr;      // [0] above, [1] equal, [2] the answer's entries taken
  std::uint32_t* tile_equal = nullptr;  // one per top tile
};

// The full passes over elements of type T (float, double, int32_t,
// int64_t, uint32_t, uint64_t). `grid` is FullGrid()'s.
template <typename T>
struct ElementPasses {
  using K = KeyOf<T>;
  // Blocks of a full pass on the current device (resident at once).
  [[nodiscard]] static cudaError_t FullGrid(int* blocks);
  // nan_keys (or null): the sample's NaN added there.
  [[nodiscard]] static cudaError_t Sample(const T* data, std::uint64_t n, KeyMode mode, K* out, std::uint32_t count,
                                          std::uint32_t* nan_keys, cudaStream_t stream);
  // Each block's counts into its row of block_counts (kCountSlots each).
  [[nodiscard]] static cudaError_t Count(const T* data, std::uint64_t n, KeyMode mode, const Bin<K>* table,
                                         std::uint32_t* block_counts, int grid, cudaStream_t stream);
  // The window pass (kNumbers) over *windows, `width` of them at most
  // (1, 2, 4 or 8): counts and gathered keys (WindowPassKernel).
  [[nodiscard]] static cudaError_t Windowed(const T* data, std::uint64_t n, const Windows<K>* windows, int width,
                                            K* keys, std::uint32_t room, WindowCounts* counts, int grid,
                                            cudaStream_t stream);
  // Blocks of the refining pass (one per SM).
  [[nodiscard]] static cudaError_t RefineGrid(int* blocks);
  [[nodiscard]] static cudaError_t Refine(const T* data, std::uint64_t n, KeyMode mode, const Bin<K>* table,
                                          const std::uint32_t* map, const Segment<K>* segments,
                                          std::uint32_t* block_counts, int grid, cudaStream_t stream);
  // `places`: KeyPasses::BlockPlaces' (the counting pass's grid), or null
  // after a refining pass (segment_fill zeroed then).
  [[nodiscard]] static cudaError_t Gather(const T* data, std::uint64_t n, KeyMode mode, const Bin<K>* table,
                                          const std::uint32_t* map, const Segment<K>* segments,
                                          std::uint32_t count, const std::uint32_t* places,
                                          const std::uint32_t* segment_start, std::uint32_t* segment_fill, K* out,
                                          int grid, cudaStream_t stream);
  [[nodiscard]] static cudaError_t TopGather(const T* data, std::uint64_t n, KeyMode mode, const K* threshold,
                                             const TopListsView<K>& lists, int grid, cudaStream_t stream);
  [[nodiscard]] static cudaError_t TopTies(const T* data, std::uint64_t n, KeyMode mode, const K* threshold,
                                           const TopListsView<K>& lists, int grid, cudaStream_t stream);
  // bits[i] = data[index[i]]'s bytes zero-extended, wide[i] = index[i].
  [[nodiscard]] static cudaError_t ElementBits(const T* data, const std::uint32_t* index, std::uint32_t count,
                                               std::uint64_t* bits, std::uint64_t* wide, cudaStream_t stream);
  // The same from top-k's words (TopEntriesInOrder's), index complemented
  // in their low half.
  [[nodiscard]] static cudaError_t WordBits(const T* data, const std::uint64_t* words, std::uint32_t count,
                                            std::uint64_t* bits, std::uint64_t* wide, cudaStream_t stream);
};

// The small passes over keys (std::uint32_t or std::uint64_t).
template <typename K>
struct KeyPasses {
  // The table from `count` sample keys (all-ones ones left out with
  // skip_high); hits, lows and highs are kLevelBins each of scratch.
  [[nodiscard]] static cudaError_t BuildTable(const K* sample, std::uint32_t count, bool skip_high,
                                              std::uint32_t* hits, K* lows, K* highs, Bin<K>* table,
                                              cudaStream_t stream);
  // The windows of `hints` (ascending) from `count` sample keys, unsorted,
  // counts->sampled_nan of them NaN (WindowRanksKernel, a rank selection
  // over the sample in `select`, WindowsFromRanksKernel).
  [[nodiscard]] static cudaError_t MakeWindows(const K* sample, std::uint32_t count, const WindowCounts* counts,
                                               const GatherHints& hints, std::uint64_t n, std::uint64_t room,
                                               RankSelect<K>* select, WindowPlan* plan, Windows<K>* out,
                                               cudaStream_t stream);
  // The keys at args' ranks (ascending, below count) of keys[0, count),
  // unsorted, into select->key on the stream (rank_select.cuh).
  [[nodiscard]] static cudaError_t SelectRanks(const K* keys, std::uint32_t count, const RankArgs& args,
                                               RankSelect<K>* select, cudaStream_t stream);
  // places[block][s] for the gathering pass (BlockPlacesKernel), with
  // segments[s].base holding the segment's bucket.
  [[nodiscard]] static cudaError_t BlockPlaces(const std::uint32_t* block_counts, int blocks,
                                               const Segment<K>* segments, std::uint32_t count,
                                               const std::uint32_t* segment_start, std::uint32_t* places,
                                               cudaStream_t stream);
  // CUB scratch for sorting `count` keys / top-k's (key, index) pairs.
  [[nodiscard]] static cudaError_t SortKeysBytes(std::uint32_t count, std::size_t* bytes);
  [[nodiscard]] static cudaError_t SortPairsBytes(std::uint32_t count, std::size_t* bytes);
  // Sorts keys[0, count) ascending, using alt as the other buffer; *sorted
  // is whichever holds the result.
  [[nodiscard]] static cudaError_t SortKeys(void* temp, std::size_t temp_bytes, K* keys, K* alt, std::uint32_t count,
                                            K** sorted, cudaStream_t stream);
  // Sorts (key, index) pairs by key descending, equal keys by index
  // ascending (two stable passes: index, then key).
  [[nodiscard]] static cudaError_t SortTop(void* temp, std::size_t temp_bytes, K* keys, K* keys_alt,
                                           std::uint32_t* index, std::uint32_t* index_alt, std::uint32_t count,
                                           K** keys_out, std::uint32_t** index_out, cudaStream_t stream);
  [[nodiscard]] static cudaError_t Pick(const K* keys, const std::uint32_t* pos, std::uint32_t count, K* out,
                                        cudaStream_t stream);
};

// Top-k's answer from its `held` gathered entries of 32-bit keys: the
// `want` largest (key, index) words (TopEntryAt), sorted largest first at
// the start of whichever of words and words_alt *sorted is: all held words
// sorted where they are at most SelectPolicy::TopWordsRoom(want) (the
// room words and words_alt each have), else found by a rank selection of
// the k-th and only those taken out and sorted. `taken` zeroed by the
// caller.
[[nodiscard]] cudaError_t TopEntriesInOrder(const std::uint32_t* keys, const std::uint32_t* index,
                                            std::uint32_t held, std::uint32_t want,
                                            RankSelect<std::uint64_t>* select, std::uint32_t* taken,
                                            std::uint64_t* words, std::uint64_t* words_alt, void* temp,
                                            std::size_t temp_bytes, std::uint64_t** sorted, cudaStream_t stream);
// CUB scratch for a sort of `want` words (TopEntriesInOrder's sort of up to
// TopWordsRoom(k) words).
[[nodiscard]] cudaError_t TopEntriesSortBytes(std::uint32_t want, std::size_t* bytes);

// counts[slot] = the sum of the blocks' rows (kCountSlots each).
[[nodiscard]] cudaError_t ReduceCounts(const std::uint32_t* block_counts, int blocks, std::uint32_t* counts,
                                       cudaStream_t stream);

}  // namespace tally::kernels::select
