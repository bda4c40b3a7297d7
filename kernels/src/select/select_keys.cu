// The selection's small passes over keys: the table from the sample, the
// hints' windows, the counts' column sums, CUB's sorts of the gathered keys,
// and the picks.
#include <cub/device/device_radix_sort.cuh>

#include "select/select_dispatch.h"
#include "select/rank_select.cuh"
#include "select/select_kernels.cuh"
#include "select/window_kernels.cuh"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::select {

// counts[b] += the blocks' counts of slot b: blockIdx.y takes a group of
// kReduceRows rows, so that the column sums run wide.
inline constexpr int kReduceRows = 16;
__global__ void ReduceCountsKernel(const std::uint32_t* __restrict__ block_counts, int blocks,
                                   std::uint32_t* __restrict__ counts) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= kCountSlots) return;
  const int first = blockIdx.y * kReduceRows;
  const int last = min(blocks, first + kReduceRows);
  std::uint32_t s = 0;
  for (int r = first; r < last; ++r) s += block_counts[std::uint64_t(r) * kCountSlots + b];
  if (s != 0) atomicAdd(&counts[b], s);
}

template <typename K>
cudaError_t KeyPasses<K>::BuildTable(const K* sample, std::uint32_t count, bool skip_high, std::uint32_t* hits,
                                     K* lows, K* highs, Bin<K>* table, cudaStream_t stream) {
  TALLY_CUDA_TRY(cudaMemsetAsync(hits, 0, sizeof(std::uint32_t) * kLevelBins, stream));
  TALLY_CUDA_TRY(cudaMemsetAsync(lows, 0xff, sizeof(K) * kLevelBins, stream));
  TALLY_CUDA_TRY(cudaMemsetAsync(highs, 0, sizeof(K) * kLevelBins, stream));
  if (count > 0) {
    SampleLevelsKernel<K><<<(count + kLevelBins - 1) / kLevelBins, kLevelBins, 0, stream>>>(sample, count, skip_high,
                                                                                             hits, lows, highs);
    TALLY_CUDA_CHECK_LAUNCH();
  }
  BuildTableKernel<K><<<1, kLevelBins, 0, stream>>>(hits, lows, highs, table);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename K>
cudaError_t KeyPasses<K>::MakeWindows(const K* sample, std::uint32_t count, const WindowCounts* counts,
                                      const GatherHints& hints, std::uint64_t n, std::uint64_t room,
                                      RankSelect<K>* select, WindowPlan* plan, Windows<K>* out,
                                      cudaStream_t stream) {
  TALLY_CUDA_TRY(cudaMemsetAsync(select, 0, sizeof(RankSelect<K>), stream));
  WindowRanksKernel<K><<<1, 1, 0, stream>>>(count, counts, hints, select, plan);
  TALLY_CUDA_CHECK_LAUNCH();
  TALLY_CUDA_TRY(LaunchRankSelect<K>(KeysAt<K>{sample}, count, RankArgs{}, select, stream));
  WindowsFromRanksKernel<K><<<1, 1, 0, stream>>>(select, plan, n, room, out);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename K>
cudaError_t KeyPasses<K>::SelectRanks(const K* keys, std::uint32_t count, const RankArgs& args,
                                      RankSelect<K>* select, cudaStream_t stream) {
  TALLY_CUDA_TRY(cudaMemsetAsync(select, 0, sizeof(RankSelect<K>), stream));
  return LaunchRankSelect<K>(KeysAt<K>{keys}, count, args, select, stream);
}

template <typename K>
cudaError_t KeyPasses<K>::BlockPlaces(const std::uint32_t* block_counts, int blocks, const Segment<K>* segments,
                                      std::uint32_t count, const std::uint32_t* segment_start,
                                      std::uint32_t* places, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  constexpr int kWarps = 8;
  BlockPlacesKernel<K><<<(count + kWarps - 1) / kWarps, kWarps * 32, 0, stream>>>(block_counts, blocks, segments,
                                                                                 count, segment_start, places);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename K>
cudaError_t KeyPasses<K>::SortKeysBytes(std::uint32_t count, std::size_t* bytes) {
  cub::DoubleBuffer<K> keys(nullptr, nullptr);
  *bytes = 0;
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, *bytes, keys, static_cast<int>(count), 0, kKeyBits<K>));
  return cudaSuccess;
}

template <typename K>
cudaError_t KeyPasses<K>::SortPairsBytes(std::uint32_t count, std::size_t* bytes) {
  cub::DoubleBuffer<K> keys(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> index(nullptr, nullptr);
  std::size_t by_index = 0, by_key = 0;
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, by_index, index, keys, static_cast<int>(count)));
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairsDescending(nullptr, by_key, keys, index, static_cast<int>(count)));
  *bytes = std::max(by_index, by_key);
  return cudaSuccess;
}

template <typename K>
cudaError_t KeyPasses<K>::SortKeys(void* temp, std::size_t temp_bytes, K* keys, K* alt, std::uint32_t count,
                                   K** sorted, cudaStream_t stream) {
  cub::DoubleBuffer<K> buffers(keys, alt);
  if (count > 1) {
    TALLY_CUDA_TRY(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, buffers, static_cast<int>(count), 0,
                                                  kKeyBits<K>, stream));
  }
  *sorted = buffers.Current();
  return cudaSuccess;
}

template <typename K>
cudaError_t KeyPasses<K>::SortTop(void* temp, std::size_t temp_bytes, K* keys, K* keys_alt, std::uint32_t* index,
                                  std::uint32_t* index_alt, std::uint32_t count, K** keys_out,
                                  std::uint32_t** index_out, cudaStream_t stream) {
  cub::DoubleBuffer<K> k(keys, keys_alt);
  cub::DoubleBuffer<std::uint32_t> i(index, index_alt);
  if (count > 1) {
    // Radix sorts are stable: by index first, then by key, leaves equal
    // keys in index order.
    TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, i, k, static_cast<int>(count), 0, 32, stream));
    TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, k, i, static_cast<int>(count), 0,
                                                             kKeyBits<K>, stream));
  }
  *keys_out = k.Current();
  *index_out = i.Current();
  return cudaSuccess;
}

template <typename K>
cudaError_t KeyPasses<K>::Pick(const K* keys, const std::uint32_t* pos, std::uint32_t count, K* out,
                               cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  PickKernel<K><<<(count + 255) / 256, 256, 0, stream>>>(keys, pos, count, out);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

// Top-k's entries whose word (TopEntryAt) is at least the k-th largest,
// *kth: exactly `want` of them (words are distinct), into words[0, want)
// in no order (taken zeroed by the caller).
__global__ void TakeTopEntriesKernel(TopEntryAt entries, std::uint32_t held, const std::uint64_t* __restrict__ kth,
                                     std::uint32_t want, std::uint32_t* taken, std::uint64_t* __restrict__ words) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const std::uint64_t w = i < held ? entries(i) : 0;
  const bool take = i < held && w >= *kth;
  const std::uint32_t at = WarpAppend(take, taken);
  if (take && at < want) words[at] = w;
}

// Every held entry's word, in the entries' order.
__global__ void TopWordsKernel(TopEntryAt entries, std::uint32_t held, std::uint64_t* __restrict__ words) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < held) words[i] = entries(i);
}

cudaError_t TopEntriesSortBytes(std::uint32_t want, std::size_t* bytes) {
  cub::DoubleBuffer<std::uint64_t> words(nullptr, nullptr);
  *bytes = 0;
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortKeysDescending(nullptr, *bytes, words, static_cast<int>(want)));
  return cudaSuccess;
}

cudaError_t TopEntriesInOrder(const std::uint32_t* keys, const std::uint32_t* index, std::uint32_t held,
                              std::uint32_t want, RankSelect<std::uint64_t>* select, std::uint32_t* taken,
                              std::uint64_t* words, std::uint64_t* words_alt, void* temp, std::size_t temp_bytes,
                              std::uint64_t** sorted, cudaStream_t stream) {
  *sorted = words;
  if (want == 0 || held < want) return cuda::Record(cudaErrorInvalidValue, "top-k holds fewer entries than it wants",
                                                    __FILE__, __LINE__);
  const TopEntryAt entries{keys, index};
  cub::DoubleBuffer<std::uint64_t> buffers(words, words_alt);
  if (held <= SelectPolicy::TopWordsRoom(want)) {
    // Few enough to sort all: the first `want` of them are the answer.
    TopWordsKernel<<<(held + 255) / 256, 256, 0, stream>>>(entries, held, words);
    TALLY_CUDA_CHECK_LAUNCH();
    if (held > 1) {
      TALLY_CUDA_TRY(cub::DeviceRadixSort::SortKeysDescending(temp, temp_bytes, buffers, static_cast<int>(held), 0,
                                                              64, stream));
    }
    *sorted = buffers.Current();
    return cudaSuccess;
  }
  RankArgs args;
  args.count = 1;
  args.rank[0] = held - want;  // the k-th largest word, counted from the smallest
  TALLY_CUDA_TRY(cudaMemsetAsync(select, 0, sizeof(RankSelect<std::uint64_t>), stream));
  TALLY_CUDA_TRY(LaunchRankSelect<std::uint64_t>(entries, held, args, select, stream));
  TakeTopEntriesKernel<<<(held + 255) / 256, 256, 0, stream>>>(entries, held, &select->key[0], want, taken,
                                                                 words);
  TALLY_CUDA_CHECK_LAUNCH();
  if (want > 1) {
    TALLY_CUDA_TRY(cub::DeviceRadixSort::SortKeysDescending(temp, temp_bytes, buffers, static_cast<int>(want), 0, 64,
                                                            stream));
  }
  *sorted = buffers.Current();
  return cudaSuccess;
}

cudaError_t ReduceCounts(const std::uint32_t* block_counts, int blocks, std::uint32_t* counts, cudaStream_t stream) {
  TALLY_CUDA_TRY(cudaMemsetAsync(counts, 0, sizeof(std::uint32_t) * kCountSlots, stream));
  const dim3 grid((kCountSlots + 255) / 256, (blocks + kReduceRows - 1) / kReduceRows);
  ReduceCountsKernel<<<grid, 256, 0, stream>>>(block_counts, blocks, counts);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

template struct KeyPasses<std::uint32_t>;
template struct KeyPasses<std::uint64_t>;

}  // namespace tally::kernels::select
