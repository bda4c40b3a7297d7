// The selection's kernels: the sample, the bucket table built from it, the
// counting pass, the gathering of the ranks' buckets, and top-k's passes
// (the window pass is window_kernels.cuh).
// Each full pass reads the array once; the others touch a few MB.
#pragma once

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "select/for_each.cuh"
#include "select/keys.h"
#include "select/rank_select.cuh"
#include "select/select_dispatch.h"
#include "select/select_policy.h"

namespace tally::kernels::select {

using P = SelectPolicy;

// The sample's keys in mode M (kNumbers: NaN as the all-ones key, which no
// number has, for the table to skip): `count` keys (a multiple of kRun),
// every element when the array is no larger, else count / kRun runs of kRun
// elements, each run at a fixed pseudo-random place in its stratum. With
// nan_keys, the NaN among them added there.
template <typename T, KeyMode M>
__global__ void SampleKernel(const T* __restrict__ data, std::uint64_t n, KeyOf<T>* __restrict__ out,
                             std::uint32_t count, std::uint32_t* nan_keys) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool mine = i < count;
  std::uint64_t at = i;
  if (n > count) {
    const std::uint64_t strata = count / P::kRun;
    const std::uint64_t stratum = i / P::kRun;
    const std::uint64_t start = stratum * n / strata;
    const std::uint64_t len = (stratum + 1) * n / strata - start;
    std::uint64_t h = (stratum + 1) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    at = start + h % (len - P::kRun + 1) + i % P::kRun;
  }
  const T x = mine ? data[at] : T{0};
  if (nan_keys != nullptr) {  // every lane is here: blocks of whole warps
    const unsigned nan = __ballot_sync(0xffffffffu, mine && IsNan(x));
    if (threadIdx.x % 32 == 0 && nan != 0) atomicAdd(nan_keys, static_cast<std::uint32_t>(__popc(nan)));
  }
  if (mine) out[i] = KeyIn<M == KeyMode::kNumbers ? KeyMode::kNanHigh : M>(x);
}

// What the sample says of each bin: how many of its keys fall there, and
// their least and greatest (stats: hits[kLevelBins], then lows, then highs,
// set to 0, all-ones and 0 by the caller). Blocks of kLevelBins threads over
// slices of the sample, so that bins many keys share do not serialize one
// block's atomics.
template <typename K>
__global__ void __launch_bounds__(kLevelBins)
    SampleLevelsKernel(const K* __restrict__ sample, std::uint32_t count, bool skip_high, std::uint32_t* hits,
                       K* lows, K* highs) {
  __shared__ std::uint32_t h[kLevelBins];
  __shared__ K lo[kLevelBins], hi[kLevelBins];
  const int b = threadIdx.x;
  h[b] = 0;
  lo[b] = static_cast<K>(~K{0});
  hi[b] = 0;
  __syncthreads();
  const std::uint32_t i = blockIdx.x * kLevelBins + b;
  if (i < count) {
    const K key = sample[i];
    if (!(skip_high && key == static_cast<K>(~K{0}))) {
      const std::uint32_t level = LevelOf(key);
      atomicAdd(&h[level], 1u);
      AtomicMinKey(&lo[level], key);
      AtomicMaxKey(&hi[level], key);
    }
  }
  __syncthreads();
  if (h[b] != 0) {
    atomicAdd(&hits[b], h[b]);
    AtomicMinKey(&lows[b], lo[b]);
    AtomicMaxKey(&highs[b], hi[b]);
  }
}

// The bucket table from the sample's bins: each bin gets sub-ranges over its
// sample's [min, max] in proportion to its share of the sample, so that
// buckets hold about equal numbers of elements; a bin the sample missed has
// one bucket (all of it above an empty one). One block of kLevelBins threads.
template <typename K>
__global__ void __launch_bounds__(kLevelBins)
    BuildTableKernel(const std::uint32_t* __restrict__ hits, const K* __restrict__ lows,
                     const K* __restrict__ highs, Bin<K>* __restrict__ table) {
  using Scan = cub::BlockScan<std::uint32_t, kLevelBins>;
  __shared__ typename Scan::TempStorage temp;
  const int b = threadIdx.x;
  const std::uint32_t mine = hits[b];
  std::uint32_t total = 0, ignored = 0;
  Scan(temp).ExclusiveSum(mine, ignored, total);
  __syncthreads();
  K lo = static_cast<K>(static_cast<K>(b) << (kKeyBits<K> - kLevelBits));
  std::uint32_t nsub = 0, shift = 0;
  if (mine != 0) {
    const std::uint64_t share = std::uint64_t{mine} * P::kSubBuckets / total;
    const std::uint64_t want = std::min<std::uint64_t>(kMaxSubRanges, std::max<std::uint64_t>(1, share));
    const K span = highs[b] - lows[b];
    while ((span >> shift) >= want) ++shift;
    lo = lows[b];
    nsub = static_cast<std::uint32_t>(span >> shift) + 1;
  }
  std::uint32_t base = 0;
  Scan(temp).ExclusiveSum(nsub + 2u, base);
  table[b] = MakeBin<K>(lo, base, nsub, shift);
}

// The counting pass: every element's bucket counted in shared memory (NaN,
// in kNumbers, in kNanSlot), each block's counts written to its own row. A
// thread adds runs of equal buckets at once, which keeps sorted or constant
// arrays from piling atomics on one counter.
template <typename T, KeyMode M>
__global__ void __launch_bounds__(P::kThreads, P::CountBlocksPerSm(sizeof(T)))
    CountKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, const Bin<KeyOf<T>>* __restrict__ table,
                std::uint32_t* __restrict__ block_counts) {
  using K = KeyOf<T>;
  extern __shared__ uint4 shared_raw[];
  Bin<K>* bins = reinterpret_cast<Bin<K>*>(shared_raw);
  std::uint32_t* counts = reinterpret_cast<std::uint32_t*>(bins + kLevelBins);
  for (int i = threadIdx.x; i < kLevelBins; i += P::kThreads) bins[i] = table[i];
  for (int i = threadIdx.x; i < kCountSlots; i += P::kThreads) counts[i] = 0;
  __syncthreads();
  std::uint32_t run_bucket = kCountSlots - 1, run = 0;
  ForEach<T, P::kThreads, P::kVecs>(data, n, aligned, [&](T x, std::uint64_t, bool valid) {
    const K key = KeyIn<M>(x);
    std::uint32_t bucket = BucketIn(bins[LevelOf(key)], key);
    if (M == KeyMode::kNumbers && IsNan(x)) bucket = kNanSlot;
    if (!valid) bucket = kCountSlots - 1;
    if (bucket != run_bucket) {
      atomicAdd(&counts[run_bucket], run);
      run_bucket = bucket;
      run = 0;
    }
    ++run;
  });
  atomicAdd(&counts[run_bucket], run);
  __syncthreads();
  std::uint32_t* row = block_counts + std::uint64_t{blockIdx.x} * kCountSlots;
  for (int i = threadIdx.x; i < kCountSlots; i += P::kThreads) row[i] = counts[i];
}

// The segment of `key` among the map entry's (sorted by lo), or -1.
template <typename K>
__device__ __forceinline__ int FindSegment(const Segment<K>* __restrict__ segments, std::uint32_t entry, K key) {
  std::uint32_t lo = entry & 0xffffu, hi = lo + (entry >> 16);
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (segments[mid].lo <= key) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return key >= segments[lo].lo && key <= segments[lo].hi ? static_cast<int>(lo) : -1;
}

// The refining pass: the elements of the segments counted in their
// sub-ranges, each block's counts in its own row. Only when the ranks'
// buckets are too full to gather: one block per SM for its shared tables.
template <typename T, KeyMode M>
__global__ void __launch_bounds__(P::kThreads, 1)
    RefineKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, const Bin<KeyOf<T>>* __restrict__ table,
                 const std::uint32_t* __restrict__ map, const Segment<KeyOf<T>>* __restrict__ segments,
                 std::uint32_t* __restrict__ block_counts) {
  using K = KeyOf<T>;
  extern __shared__ uint4 shared_raw[];
  Bin<K>* bins = reinterpret_cast<Bin<K>*>(shared_raw);
  std::uint32_t* entries = reinterpret_cast<std::uint32_t*>(bins + kLevelBins);
  std::uint32_t* counts = entries + P::kBuckets;
  for (int i = threadIdx.x; i < kLevelBins; i += P::kThreads) bins[i] = table[i];
  for (int i = threadIdx.x; i < P::kBuckets; i += P::kThreads) entries[i] = map[i];
  for (int i = threadIdx.x; i < kCountSlots; i += P::kThreads) counts[i] = 0;
  __syncthreads();
  std::uint32_t run_bucket = kCountSlots - 1, run = 0;  // heavy duplicates are what brings us here
  ForEach<T, P::kThreads, P::kVecs>(data, n, aligned, [&](T x, std::uint64_t, bool valid) {
    if (!valid || (M == KeyMode::kNumbers && IsNan(x))) return;
    const K key = KeyIn<M>(x);
    const std::uint32_t entry = entries[BucketIn(bins[LevelOf(key)], key)];
    if (entry == 0) return;
    const int s = FindSegment(segments, entry, key);
    if (s < 0) return;
    const Segment<K> seg = segments[s];
    const K d = static_cast<K>((key - seg.lo) >> seg.shift);
    const std::uint32_t bucket = seg.base + (d < seg.nsub ? static_cast<std::uint32_t>(d) : seg.nsub - 1);
    if (bucket != run_bucket) {
      atomicAdd(&counts[run_bucket], run);
      run_bucket = bucket;
      run = 0;
    }
    ++run;
  });
  atomicAdd(&counts[run_bucket], run);
  __syncthreads();
  std::uint32_t* row = block_counts + std::uint64_t{blockIdx.x} * kCountSlots;
  for (int i = threadIdx.x; i < kCountSlots; i += P::kThreads) row[i] = counts[i];
}

// Where each block of the gathering pass puts each segment's elements: the
// segment's start plus what the blocks before it counted in the segment's
// bucket (segments[s].base) in the counting pass, whose grid and walk the
// gathering pass repeats. One warp per segment.
template <typename K>
__global__ void BlockPlacesKernel(const std::uint32_t* __restrict__ block_counts, int blocks,
                                  const Segment<K>* __restrict__ segments, std::uint32_t count,
                                  const std::uint32_t* __restrict__ segment_start, std::uint32_t* __restrict__ places) {
  const std::uint32_t s = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (s >= count) return;
  const std::uint32_t bucket = segments[s].base;
  std::uint32_t before = segment_start[s];
  for (int first = 0; first < blocks; first += 32) {
    const int r = first + lane;
    const std::uint32_t c = r < blocks ? block_counts[std::uint64_t(r) * kCountSlots + bucket] : 0;
    std::uint32_t inclusive = c;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const std::uint32_t up = __shfl_up_sync(0xffffffffu, inclusive, d);
      if (lane >= d) inclusive += up;
    }
    if (r < blocks) places[std::uint64_t(r) * count + s] = before + inclusive - c;
    before += __shfl_sync(0xffffffffu, inclusive, 31);
  }
}

// The gathering pass: the keys of the elements in the segments, each
// segment's into its place, segments in key order. With `places`
// (BlockPlacesKernel's) each block fills its own part of each segment,
// counting in shared memory; without, warps reserve places with global
// atomics (after a refining pass, when the blocks' counts are of other
// ranges).
template <typename T, KeyMode M>
__global__ void __launch_bounds__(P::kThreads, P::CountBlocksPerSm(sizeof(T)))
    GatherKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, const Bin<KeyOf<T>>* __restrict__ table,
                 const std::uint32_t* __restrict__ map, const Segment<KeyOf<T>>* __restrict__ segments,
                 std::uint32_t count, const std::uint32_t* __restrict__ places,
                 const std::uint32_t* __restrict__ segment_start, std::uint32_t* __restrict__ segment_fill,
                 KeyOf<T>* __restrict__ out) {
  using K = KeyOf<T>;
  extern __shared__ uint4 shared_raw[];
  Bin<K>* bins = reinterpret_cast<Bin<K>*>(shared_raw);
  std::uint32_t* entries = reinterpret_cast<std::uint32_t*>(bins + kLevelBins);
  std::uint32_t* cursor = entries + P::kBuckets;
  for (int i = threadIdx.x; i < kLevelBins; i += P::kThreads) bins[i] = table[i];
  for (int i = threadIdx.x; i < P::kBuckets; i += P::kThreads) entries[i] = map[i];
  if (places != nullptr) {
    for (std::uint32_t s = threadIdx.x; s < count; s += P::kThreads) {
      cursor[s] = places[std::uint64_t{blockIdx.x} * count + s];
    }
  }
  __syncthreads();
  ForEach<T, P::kThreads, P::kVecs>(data, n, aligned, [&](T x, std::uint64_t, bool valid) {
    const K key = KeyIn<M>(x);
    std::uint32_t entry = entries[BucketIn(bins[LevelOf(key)], key)];
    if (!valid || (M == KeyMode::kNumbers && IsNan(x))) entry = 0;
    if (places != nullptr) {
      if (entry == 0) return;
      const int s = FindSegment(segments, entry, key);
      if (s >= 0) out[atomicAdd(&cursor[s], 1u)] = key;
      return;
    }
    const int segment = entry != 0 ? FindSegment(segments, entry, key) : -1;
    const bool take = segment >= 0;
    if (__ballot_sync(0xffffffffu, take) == 0) return;
    // Lanes of one segment reserve their places together.
    const unsigned peers = __match_any_sync(0xffffffffu, static_cast<unsigned>(segment));
    if (!take) return;
    const int leader = __ffs(peers) - 1;
    std::uint32_t base = 0;
    if (static_cast<int>(threadIdx.x % 32) == leader) base = atomicAdd(&segment_fill[segment], __popc(peers));
    base = __shfl_sync(peers, base, leader);
    out[segment_start[segment] + base + __popc(peers & LanesBelow())] = key;
  });
}

// keys[pos[i]] for each i: the sorted candidates at the ranks' places.
template <typename K>
__global__ void PickKernel(const K* __restrict__ keys, const std::uint32_t* __restrict__ pos, std::uint32_t count,
                           K* __restrict__ out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) out[i] = keys[pos[i]];
}

// One pass: elements whose key is above *threshold or equal to it, into
// their lists, with the count of equal ones per tile (tile_equal zeroed by
// the caller; each warp adds its own). The elements above go through each
// warp's buffer (WarpBuffer: about 1.25 k + 4 sqrt(k n / s) of them, one
// atomic a step where a warp took one was a same-address atomic for most of
// them at k = 65536); the equal ones, few unless the data repeats, append
// directly.
template <typename T, KeyMode M>
__global__ void __launch_bounds__(P::kThreads, P::kBlocksPerSm)
    TopGatherKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, const KeyOf<T>* __restrict__ threshold,
                    TopListsView<KeyOf<T>> lists) {
  using K = KeyOf<T>;
  __shared__ K staged_keys[kWarpBuffer * (P::kThreads / 32)];
  __shared__ std::uint32_t staged_index[kWarpBuffer * (P::kThreads / 32)];
  K* const keys = staged_keys + kWarpBuffer * (threadIdx.x / 32);
  std::uint32_t* const index = staged_index + kWarpBuffer * (threadIdx.x / 32);
  WarpBuffer<kWarpBuffer> staged;
  const auto drain = [&] {
    staged.Drain(&lists.counts[0], [&](std::uint32_t slot, std::uint64_t place) {
      if (place < lists.above_room) {
        lists.above_keys[place] = keys[slot];
        lists.above_index[place] = index[slot];
      }
    });
  };
  const K t = *threshold;
  std::uint32_t equal = 0;
  ForEachTile<T, P::kThreads, P::kVecs>(
      data, n, aligned,
      [&](T x, std::uint64_t i, bool valid) {
        const K key = KeyIn<M>(x);
        const bool above = valid && key > t;
        const bool same = valid && key == t;
        equal += same ? 1 : 0;
        if (__ballot_sync(0xffffffffu, above || same) == 0) return;
        const std::uint32_t slot = staged.Slot(above, drain);
        if (slot != ~0u) {
          keys[slot] = key;
          index[slot] = static_cast<std::uint32_t>(i);
        }
        const std::uint32_t e = WarpAppend(same, &lists.counts[1]);
        if (same && e < lists.equal_room) {
          lists.equal_keys[e] = key;
          lists.equal_index[e] = static_cast<std::uint32_t>(i);
        }
      },
      [&](std::uint64_t tile) {
        const std::uint32_t warp = __reduce_add_sync(0xffffffffu, equal);
        if (warp != 0 && threadIdx.x % 32 == 0) atomicAdd(&lists.tile_equal[tile], warp);
        equal = 0;
      });
  if (staged.used > 0) drain();
}

// The elements of the first tiles (n cut to their end) equal to *threshold,
// into the equal list: the ties of lowest index when there are too many to
// gather all of them.
template <typename T, KeyMode M>
__global__ void __launch_bounds__(P::kThreads, P::kBlocksPerSm)
    TopTiesKernel(const T* __restrict__ data, std::uint64_t n, bool aligned, const KeyOf<T>* __restrict__ threshold,
                  TopListsView<KeyOf<T>> lists) {
  using K = KeyOf<T>;
  const K t = *threshold;
  ForEach<T, P::kThreads, P::kVecs>(data, n, aligned, [&](T x, std::uint64_t i, bool valid) {
    const bool same = valid && KeyIn<M>(x) == t;
    const std::uint32_t e = WarpAppend(same, &lists.counts[1]);
    if (same && e < lists.equal_room) {
      lists.equal_keys[e] = t;
      lists.equal_index[e] = static_cast<std::uint32_t>(i);
    }
  });
}

// Where top-k's i-th entry lies: its index (the pair sorts' order), or the
// low half of its word complemented (TopEntryAt's, sorted).
struct IndexAt {
  const std::uint32_t* index;
  __device__ __forceinline__ std::uint32_t operator()(std::uint32_t i) const { return index[i]; }
};
struct WordIndexAt {
  const std::uint64_t* words;
  __device__ __forceinline__ std::uint32_t operator()(std::uint32_t i) const {
    return static_cast<std::uint32_t>(~words[i]);
  }
};

// The bytes of data[at(i)], zero-extended, and the index widened: the
// answer's two arrays as top-k's caller takes them.
template <typename T, typename At>
__global__ void ElementBitsKernel(const T* __restrict__ data, At at, std::uint32_t count,
                                  std::uint64_t* __restrict__ bits, std::uint64_t* __restrict__ wide) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) {
    const std::uint32_t index = at(i);
    bits[i] = static_cast<std::uint64_t>(BitsOf(data[index]));
    wide[i] = index;
  }
}

}  // namespace tally::kernels::select
