// The direct path's buckets (partitioned_groups.cuh). A key range too wide
// for one block's shared memory is cut into buckets of kBucketKeys keys,
// which does fit:
//   1. count each block's rows of each bucket (the blocks take the table
//      in `parts` contiguous parts), bucket by bucket then block by block,
//      so that one exclusive sum over the counts gives each block where
//      its rows of each bucket go;
//   2. how many items of at most kItemRows<false> rows each bucket is cut into
//      (one block accumulates an item);
//   3. move each row's key within its bucket and its value there: a
//      block's rows of a bucket go to its own part of the bucket, in
//      whatever order its threads take them, which the integer
//      accumulation does not see; no atomics outside the block;
//   4. accumulate each item in shared memory, then add its slots to the
//      global ones (stored outright where the item is its bucket's only
//      one);
//   5. (WriteGroups, written_groups.cu) number the groups, the slots with
//      rows, bucket by bucket, and write each group's key and values in
//      key order.
// Keys within one bucket skip 1 and 3: the items are read where they lie.
// So do keys within kMaxInPlaceBuckets buckets: step 4 runs once over the
// whole table with both buckets' slots in one block (kWideInPlace), or,
// where a block cannot hold them, once a bucket, each pass taking its
// bucket's rows and passing over the others' (a read of the table a
// bucket, against the count's and the move's read, write and read back,
// which cost about three passes).
// Otherwise every row is read twice from the table (the count and the
// move) and once from the buckets, beside SpreadOfKeys's read; nothing
// comes back to the host but the groups.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include <cstring>

#include "group/partitioned_groups.cuh"
#include "select/scratch.h"
#include "shared_memory.cuh"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::partitioned {
namespace {

using dense::FixedStep;
using dense::KeyKind;
using dense::KeyReader;
using dense::Packed;
using dense::PackedRows;
using dense::Slot;
using dense::Slots;

constexpr std::uint64_t kMaxBuckets = kMaxPartitionedRange / kBucketKeys;
// Buckets read in place, a pass each, rather than moved. Each pass costs
// about 1.45 ms over 2^28 rows, the moved path about 4.4 ms at any count
// of buckets (H200, int32 keys, float32 values, `tally-groupby-kernel-bench
// 28 3 4096,8192,12288,16384`, both in one call): 4,096 keys 3.13-3.16
// in place against 4.58-4.61 moved; 8,192 keys 6.04-6.07 against 4.40-4.43.
constexpr unsigned kMaxInPlaceBuckets = kMaxInPlaceRange / kBucketKeys;
static_assert(kMaxInPlaceRange % kBucketKeys == 0, "whole buckets read in place");
// Rows one block accumulates before it adds its slots to the global ones
// (an item): enough that the 2,048 slots' flush is a small part (uniform
// keys fill every slot of a bucket), few enough that a hot bucket spreads
// over many blocks, and at most PackedRows::kMaxRows, so that a slot's count
// fits the top 16 bits of its low word. Buckets read in place take the
// most (their passes flush half as often: H200, 2^28 rows, 2,048 keys
// 1.79-1.81 -> 1.60-1.61 ms, 4,096 keys 3.15-3.18 -> 2.91); moved buckets
// half of it, which 1M keys' buckets of about 69K rows a part need to
// spread over the blocks (all of it: 7.21 -> 7.70-8.02 ms; 65,536 keys
// unchanged).
template <bool kInPlace>
constexpr std::uint64_t kItemRows = kInPlace ? PackedRows::kMaxRows : 32768;
// Two buckets read in place take one pass of twice the slots (112 KiB of
// shared memory for float32 values, 144 for float64: one block an SM)
// with 1,024 threads, where the device's blocks may hold that much. H200,
// 2^28 rows, `tally-groupby-kernel-bench 28 3 3000,4096`, SumByKey against
// two passes in the same call: 3,000 keys 2.53-2.55 -> 1.43-1.45 ms,
// 4,096 keys 2.59-2.64 -> 1.48; with 512 threads the one pass took
// 2.29-2.34 ms (too few rows in flight an SM).
constexpr bool kWideInPlace = true;
constexpr int kWideThreads = 1024;
constexpr int kThreads = 512;
// The rows moved at a time: a part of the table whose moved rows fill 256
// MiB (2^25 float32 rows, 2^24 float64), then accumulated before the next
// part moves. The scratch stays within the device pool's default keep of
// 512 MiB, so a request does not map its scratch afresh (at 2^28 rows all
// at once, 2 GiB mapped for each request cost as much as the kernels at
// 65,536 keys), and bounded whatever the rows.
constexpr std::size_t kMovedBytes = std::size_t{256} << 20;
std::uint64_t ChunkRows(std::size_t moved_row_bytes) { return kMovedBytes / moved_row_bytes; }
// Rows a thread of the count and the move loads before it places them.
constexpr int kRowsPerThread = 4;

// A row in its bucket: the value and the key's place in the bucket.
template <typename T>
struct Moved {
  T value;
  std::uint32_t key;
};

__device__ inline std::uint64_t PartBegin(std::uint64_t n, unsigned part, unsigned parts) {
  return n / parts * part + (part < n % parts ? part : n % parts);
}

// A hot key's rows all add to one shared counter, which the hardware
// serialises within a warp: at most 32 steps, measured cheaper than
// grouping a warp's rows by bucket first (__match_any_sync) for every row.
template <int kBytes>
__global__ void __launch_bounds__(kThreads) CountKernel(KeyReader<kBytes> keys, std::uint64_t n,
                                                        std::uint64_t lowest, unsigned buckets, unsigned* counts) {
  extern __shared__ unsigned histogram[];
  for (unsigned j = threadIdx.x; j < buckets; j += blockDim.x) histogram[j] = 0;
  __syncthreads();
  const std::uint64_t begin = PartBegin(n, blockIdx.x, gridDim.x), end = PartBegin(n, blockIdx.x + 1, gridDim.x);
  for (std::uint64_t i = begin + threadIdx.x; i < end; i += kRowsPerThread * blockDim.x) {
    std::uint64_t k[kRowsPerThread];
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      const std::uint64_t at = i + u * blockDim.x;
      k[u] = at < end ? keys.Raw(at) : 0;
    }
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      if (i + u * blockDim.x < end) {
        atomicAdd(&histogram[static_cast<unsigned>((keys.Ordered(k[u]) - lowest) >> kBucketBits)], 1u);
      }
    }
  }
  __syncthreads();
  // Bucket by bucket, then block by block.
  for (unsigned j = threadIdx.x; j < buckets; j += blockDim.x) counts[j * gridDim.x + blockIdx.x] = histogram[j];
}

// Each bucket's rows and first row, from the summed counts (`parts` per
// bucket, one more entry at the end: the rows).
__global__ void BucketsKernel(const unsigned* places, unsigned buckets, unsigned parts, unsigned* rows,
                              unsigned* starts) {
  for (unsigned b = blockIdx.x * blockDim.x + threadIdx.x; b <= buckets; b += gridDim.x * blockDim.x) {
    starts[b] = places[std::uint64_t{b} * parts];
    if (b < buckets) rows[b] = places[std::uint64_t{b + 1} * parts] - places[std::uint64_t{b} * parts];
  }
}

template <typename T, int kBytes>
__global__ void __launch_bounds__(kThreads) MoveKernel(KeyReader<kBytes> keys, const T* __restrict__ values,
                                                       std::uint64_t n, std::uint64_t lowest, unsigned buckets,
                                                       const unsigned* places, Moved<T>* moved) {
  extern __shared__ unsigned next[];  // where this block's next row of each bucket goes
  for (unsigned j = threadIdx.x; j < buckets; j += blockDim.x) next[j] = places[j * gridDim.x + blockIdx.x];
  __syncthreads();
  const std::uint64_t begin = PartBegin(n, blockIdx.x, gridDim.x), end = PartBegin(n, blockIdx.x + 1, gridDim.x);
  for (std::uint64_t i = begin + threadIdx.x; i < end; i += kRowsPerThread * blockDim.x) {
    std::uint64_t k[kRowsPerThread];
    T v[kRowsPerThread];
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      const std::uint64_t at = i + u * blockDim.x;
      k[u] = at < end ? keys.Raw(at) : 0;
      v[u] = at < end ? values[at] : T{};
    }
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      if (i + u * blockDim.x >= end) continue;
      const std::uint64_t key = keys.Ordered(k[u]) - lowest;
      const unsigned at = atomicAdd(&next[static_cast<unsigned>(key >> kBucketBits)], 1u);
      moved[at] = Moved<T>{v[u], static_cast<std::uint32_t>(key & (kBucketKeys - 1))};
    }
  }
}

// The move for up to kSortedMoveBuckets buckets: each tile of kTileRows
// rows is first ordered by bucket in shared memory, then written out, so
// that a warp's writes are runs of rows of one bucket (whole sectors at 1M
// keys' 489 buckets: 8 rows of a bucket a tile on average) rather than 32
// rows to 32 places.
constexpr unsigned kSortedMoveBuckets = 1024;
constexpr int kTileRowsPerThread = 8;
constexpr unsigned kTileRows = kThreads * kTileRowsPerThread;

template <typename T>
std::size_t SortedMoveShared() {
  return 3 * kSortedMoveBuckets * sizeof(unsigned) + kTileRows * (sizeof(Moved<T>) + sizeof(std::uint16_t));
}

template <typename T, int kBytes>
__global__ void __launch_bounds__(kThreads) SortedMoveKernel(KeyReader<kBytes> keys, const T* __restrict__ values,
                                                             std::uint64_t n, std::uint64_t lowest,
                                                             unsigned buckets, const unsigned* places,
                                                             Moved<T>* moved) {
  extern __shared__ unsigned long long shared_words[];
  auto* staged = reinterpret_cast<Moved<T>*>(shared_words);           // the tile's rows by bucket
  auto* next = reinterpret_cast<unsigned*>(staged + kTileRows);       // where this block's next row of a bucket goes
  unsigned* count = next + kSortedMoveBuckets;                        // the tile's rows of a bucket
  unsigned* first = count + kSortedMoveBuckets;                       // where they start in the tile
  auto* staged_bucket = reinterpret_cast<std::uint16_t*>(first + kSortedMoveBuckets);
  using Scan = cub::BlockScan<unsigned, kThreads>;
  __shared__ typename Scan::TempStorage temp;
  constexpr int kPerThread = kSortedMoveBuckets / kThreads;
  for (unsigned j = threadIdx.x; j < kSortedMoveBuckets; j += blockDim.x) {
    next[j] = j < buckets ? places[j * gridDim.x + blockIdx.x] : 0;
    count[j] = 0;
  }
  __syncthreads();
  const std::uint64_t begin = PartBegin(n, blockIdx.x, gridDim.x), end = PartBegin(n, blockIdx.x + 1, gridDim.x);
  for (std::uint64_t tile = begin; tile < end; tile += kTileRows) {
    const unsigned rows = end - tile < kTileRows ? static_cast<unsigned>(end - tile) : kTileRows;
    unsigned bucket[kTileRowsPerThread], rank[kTileRowsPerThread];
    Moved<T> row[kTileRowsPerThread];
#pragma unroll
    for (int u = 0; u < kTileRowsPerThread; ++u) {
      const unsigned at = u * kThreads + threadIdx.x;
      if (at < rows) {
        const std::uint64_t key = keys.At(tile + at) - lowest;
        bucket[u] = static_cast<unsigned>(key >> kBucketBits);
        row[u] = Moved<T>{values[tile + at], static_cast<std::uint32_t>(key & (kBucketKeys - 1))};
      }
    }
#pragma unroll
    for (int u = 0; u < kTileRowsPerThread; ++u) {
      if (u * kThreads + threadIdx.x < rows) rank[u] = atomicAdd(&count[bucket[u]], 1u);
    }
    __syncthreads();
    unsigned mine[kPerThread], starts[kPerThread];
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) mine[e] = count[threadIdx.x * kPerThread + e];
    Scan(temp).ExclusiveSum(mine, starts);
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) first[threadIdx.x * kPerThread + e] = starts[e];
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kTileRowsPerThread; ++u) {
      if (u * kThreads + threadIdx.x >= rows) continue;
      const unsigned at = first[bucket[u]] + rank[u];
      staged[at] = row[u];
      staged_bucket[at] = static_cast<std::uint16_t>(bucket[u]);
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < rows; i += kThreads) {
      const unsigned b = staged_bucket[i];
      moved[next[b] + (i - first[b])] = staged[i];
    }
    __syncthreads();
    for (unsigned j = threadIdx.x; j < kSortedMoveBuckets; j += blockDim.x) {
      next[j] += count[j];
      count[j] = 0;
    }
    __syncthreads();
  }
}

// Elements a thread loads before it adds them (as dense_groups.cu's).
constexpr int kLoadsPerThread = 4;

// kInPlace: one bucket, the keys from `lowest` on, its items read from the
// table where they lie (`keys`, `values`), other keys' rows passed over;
// else from `moved`. `only`: the rows are the whole table's (not one
// part's of several). kSlots: the keys of a bucket (kBucketKeys; twice
// that for one pass over two buckets' keys in place, kWideInPlace).
template <typename T, bool kInPlace, int kBytes, std::uint64_t kSlots = kBucketKeys, int kBlockThreads = kThreads>
__global__ void __launch_bounds__(kBlockThreads) AccumulateKernel(const Moved<T>* __restrict__ moved,
                                                             KeyReader<kBytes> keys, const T* __restrict__ values,
                                                             std::uint64_t lowest, const unsigned* starts,
                                                             const unsigned* item_starts, unsigned buckets,
                                                             FixedStep step, bool only, Slots global) {
  constexpr std::uint64_t item_rows = kItemRows<kInPlace>;
  extern __shared__ unsigned long long shared[];
  const Packed<T> s = Packed<T>::At(shared, kSlots);
  const unsigned items = item_starts[buckets];
  // A block takes a run of consecutive items, so that most of its items
  // share a bucket: between two items of one bucket only the low words
  // (which hold the counts in their top 16 bits) go to the global slots;
  // the high words, extremes and specials stay and go once, when the block
  // leaves the bucket.
  const unsigned from = static_cast<unsigned>(std::uint64_t{items} * blockIdx.x / gridDim.x);
  const unsigned to = static_cast<unsigned>(std::uint64_t{items} * (blockIdx.x + 1) / gridDim.x);
  constexpr unsigned kNone = ~0u;
  unsigned held = kNone;  // the bucket whose slots the block holds
  // The held slots' high words, extremes and specials added to the global
  // ones (their low words and counts have gone already), and cleared.
  const auto leave = [&](unsigned bucket) {
    const std::uint64_t first = std::uint64_t{bucket} * kSlots;
    for (unsigned j = threadIdx.x; j < kSlots; j += blockDim.x) {
      s.Load(j).AtomicAddAllButLow(global, first + j);
      s.Clear(j);
    }
    __syncthreads();
  };
  for (unsigned j = threadIdx.x; j < kSlots; j += blockDim.x) s.Clear(j);
  __syncthreads();
  for (unsigned item = from; item < to; ++item) {
    // The bucket: the last whose first item is at most this one.
    unsigned lo = 0, hi = buckets - 1;
    while (lo < hi) {
      const unsigned mid = (lo + hi + 1) / 2;
      if (item_starts[mid] <= item) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const unsigned b = lo;
    if (held != kNone && held != b) leave(held);
    held = b;
    // The only item of its bucket in the only part of the table: its slots
    // are stored, not added.
    const bool alone = only && item_starts[b + 1] - item_starts[b] == 1;
    const std::uint64_t begin = starts[b] + std::uint64_t{item - item_starts[b]} * item_rows;
    const std::uint64_t end = begin + item_rows < starts[b + 1] ? begin + item_rows : starts[b + 1];
    for (std::uint64_t r = begin + threadIdx.x; r < end; r += kLoadsPerThread * blockDim.x) {
      std::uint64_t k[kLoadsPerThread];
      T v[kLoadsPerThread];
#pragma unroll
      for (int u = 0; u < kLoadsPerThread; ++u) {
        const std::uint64_t at = r + u * blockDim.x;
        if (at < end) {
          if constexpr (kInPlace) {
            k[u] = keys.Raw(at);
            v[u] = values[at];
          } else {
            const Moved<T> m = moved[at];
            k[u] = m.key;
            v[u] = m.value;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kLoadsPerThread; ++u) {
        if (r + u * blockDim.x >= end) continue;
        const std::uint64_t slot = kInPlace ? keys.Ordered(k[u]) - lowest : k[u];
        // In place, a row of another bucket's pass (below `lowest`, it wraps).
        if (kInPlace && slot >= kSlots) continue;
        s.Add(slot, v[u], step);
      }
    }
    __syncthreads();
    const std::uint64_t first = std::uint64_t{b} * kSlots;
    if (alone) {
      for (unsigned j = threadIdx.x; j < kSlots; j += blockDim.x) {
        const Slot slot = s.Load(j);
        if (slot.count != 0) slot.Store(global, first + j);
        s.Clear(j);
      }
      __syncthreads();
      held = kNone;
      continue;
    }
    // The low words and counts out, before a slot's count could pass 16
    // bits: the item's rows are at most PackedRows::kMaxRows.
    for (unsigned j = threadIdx.x; j < kSlots; j += blockDim.x) s.AtomicAddLow(j, global, first + j);
    __syncthreads();
  }
  if (held != kNone) leave(held);
}

}  // namespace

Layout LayOut(std::uint64_t rows, std::uint64_t range, std::size_t value_size, void* base, std::size_t* used) {
  const std::uint64_t buckets = (range + kBucketKeys - 1) / kBucketKeys;
  const std::uint64_t slots = buckets * kBucketKeys;
  const std::uint64_t most_groups = range < rows ? range : rows;
  select::Carver c(base);
  Layout at;
  at.buckets = static_cast<unsigned>(buckets);
  // The count and the move: two blocks an SM.
  at.parts = dense::SmCount() * 2;
  const std::uint64_t places = buckets * at.parts + 1;
  at.slots.hi = c.Take<unsigned long long>(slots);
  at.slots.lo = c.Take<unsigned long long>(slots);
  at.slots.count = c.Take<unsigned long long>(slots);
  at.slots.low = c.Take<unsigned long long>(slots);
  at.slots.high = c.Take<unsigned long long>(slots);
  at.slots.special = c.Take<unsigned int>(slots);
  at.counts = c.Take<unsigned>(places);
  at.rows = c.Take<unsigned>(buckets);
  at.starts = c.Take<unsigned>(buckets + 1);
  at.item_starts = c.Take<unsigned>(buckets + 1);
  at.groups = c.Take<unsigned>(buckets);
  at.group_starts = c.Take<unsigned>(buckets + 1);
  (void)cub::DeviceScan::ExclusiveSum(nullptr, at.scan_bytes, static_cast<unsigned*>(nullptr),
                                      static_cast<unsigned*>(nullptr), static_cast<int>(places));
  std::size_t starts_bytes = 0;  // the groups' first rows (WriteGroups)
  (void)cub::DeviceScan::InclusiveSum(nullptr, starts_bytes, static_cast<unsigned long long*>(nullptr),
                                      static_cast<unsigned long long*>(nullptr), static_cast<int>(most_groups));
  at.scan_bytes = at.scan_bytes > starts_bytes ? at.scan_bytes : starts_bytes;
  at.scan = c.Take<std::byte>(at.scan_bytes);
  // A row moved: the value and its key's place, padded as Moved<T> is.
  if (buckets > kMaxInPlaceBuckets) {
    const std::size_t moved_row = value_size == 4 ? 8 : 16;
    at.moved = c.Take<std::byte>((rows < ChunkRows(moved_row) ? rows : ChunkRows(moved_row)) * moved_row);
  }
  at.out.keys = c.Take<std::byte>(most_groups * sizeof(std::uint64_t));  // keys of up to 8 bytes
  at.out.count = c.Take<unsigned long long>(most_groups);
  at.out.nan = c.Take<unsigned long long>(most_groups);
  at.out.sum = c.Take<double>(most_groups);
  at.out.min = c.Take<double>(most_groups);
  at.out.max = c.Take<double>(most_groups);
  at.out.mean = c.Take<double>(most_groups);
  at.out.start = c.Take<unsigned long long>(most_groups + 1);
  at.out.infinities = c.Take<std::uint8_t>(most_groups);
  at.out.found = c.Take<unsigned>(2);
  *used = c.used();
  return at;
}

template <typename T>
cudaError_t Accumulate(const GroupKeys& keys, const T* values, const KeySpread& spread, int scale, const Layout& at,
                       cudaStream_t stream) {
  static_assert(sizeof(Moved<T>) == (sizeof(T) == 4 ? 8 : 16), "LayOut's size of a moved row");
  int key_bytes = 0;
  KeyKind kind{};
  if (!dense::KeyLayout(keys.dtype, &key_bytes, &kind) || at.buckets > kMaxBuckets) {
    return cuda::Record(cudaErrorInvalidValue, "Accumulate: keys not taken", __FILE__, __LINE__);
  }
  const unsigned buckets = at.buckets;
  const std::uint64_t rows = keys.rows;
  auto* moved = reinterpret_cast<Moved<T>*>(at.moved);
  return dense::VisitKeyWidth(key_bytes, [&](auto width) -> cudaError_t {
    constexpr int kBytes = decltype(width)::value;
    const KeyReader<kBytes> reader{keys.data, kind};
    const std::size_t slot_shared = kBucketKeys * Packed<T>::kBytes;
    const FixedStep step = FixedStep::Of(scale);
    // Moved rows carry their keys' places: one kernel for every key width.
    const auto in_place = AccumulateKernel<T, true, kBytes>;
    const auto from_moved = AccumulateKernel<T, false, 8>;
    const bool in_place_passes = buckets <= kMaxInPlaceBuckets;
    TALLY_CUDA_TRY(in_place_passes ? detail::AllowMostSharedMemory(in_place)
                                   : detail::AllowMostSharedMemory(from_moved));
    if (in_place_passes) {
      // The whole table as one bucket's rows, cut into items once; then a
      // pass a bucket, its keys from lowest + b x kBucketKeys into its slots.
      const unsigned both[2] = {0, static_cast<unsigned>(rows)};
      TALLY_CUDA_TRY(cudaMemcpyAsync(at.starts, both, sizeof both, cudaMemcpyHostToDevice, stream));
      TALLY_CUDA_TRY(cudaMemcpyAsync(at.rows, &both[1], sizeof(unsigned), cudaMemcpyHostToDevice, stream));
      ScanKernel<><<<1, kScanThreads, 0, stream>>>(at.rows, 1, static_cast<unsigned>(kItemRows<true>),
                                                   at.item_starts);
      TALLY_CUDA_CHECK_LAUNCH();
      // Two buckets' keys in one pass where a block's shared memory holds
      // their slots (112 or 144 KiB: one block an SM).
      const auto wide = AccumulateKernel<T, true, kBytes, 2 * kBucketKeys, kWideThreads>;
      int most_shared = 0, device = 0;
      TALLY_CUDA_TRY(cudaGetDevice(&device));
      TALLY_CUDA_TRY(cudaDeviceGetAttribute(&most_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
      if (kWideInPlace && buckets == 2 && 2 * slot_shared <= static_cast<std::size_t>(most_shared)) {
        TALLY_CUDA_TRY(detail::AllowMostSharedMemory(wide));
        wide<<<dense::SmCount(), kWideThreads, 2 * slot_shared, stream>>>(nullptr, reader, values, spread.lowest,
                                                                      at.starts, at.item_starts, 1, step, true,
                                                                      at.slots);
        TALLY_CUDA_CHECK_LAUNCH();
        return cudaSuccess;
      }
      for (unsigned b = 0; b < buckets; ++b) {
        const std::uint64_t first = std::uint64_t{b} * kBucketKeys;
        in_place<<<dense::SmCount() * 3, kThreads, slot_shared, stream>>>(
            nullptr, reader, values, spread.lowest + first, at.starts, at.item_starts, 1, step, true,
            dense::SlotsFrom(at.slots, first));
        TALLY_CUDA_CHECK_LAUNCH();
      }
      return cudaSuccess;
    }
    const auto accumulate_items = [&](bool only) -> cudaError_t {
      ScanKernel<><<<1, kScanThreads, 0, stream>>>(at.rows, buckets, static_cast<unsigned>(kItemRows<false>),
                                                   at.item_starts);
      TALLY_CUDA_CHECK_LAUNCH();
      from_moved<<<dense::SmCount() * 3, kThreads, slot_shared, stream>>>(
          moved, KeyReader<8>{nullptr, kind}, nullptr, spread.lowest, at.starts, at.item_starts, buckets, step,
          only, at.slots);
      TALLY_CUDA_CHECK_LAUNCH();
      return cudaSuccess;
    };
    const std::size_t bucket_shared = buckets * sizeof(unsigned);
    TALLY_CUDA_TRY(detail::AllowMostSharedMemory(CountKernel<kBytes>));
    const bool sorted_move = buckets <= kSortedMoveBuckets;
    TALLY_CUDA_TRY(sorted_move ? detail::AllowMostSharedMemory(SortedMoveKernel<T, kBytes>)
                               : detail::AllowMostSharedMemory(MoveKernel<T, kBytes>));
    const std::uint64_t places = std::uint64_t{buckets} * at.parts + 1;
    const std::uint64_t chunk = ChunkRows(sizeof(Moved<T>));
    for (std::uint64_t first = 0; first < rows; first += chunk) {
      const std::uint64_t n = rows - first < chunk ? rows - first : chunk;
      const KeyReader<kBytes> part{static_cast<const std::byte*>(keys.data) + first * kBytes, kind};
      CountKernel<kBytes><<<at.parts, kThreads, bucket_shared, stream>>>(part, n, spread.lowest, buckets, at.counts);
      TALLY_CUDA_CHECK_LAUNCH();
      TALLY_CUDA_TRY(cudaMemsetAsync(at.counts + places - 1, 0, sizeof(unsigned), stream));
      std::size_t scan_bytes = at.scan_bytes;
      TALLY_CUDA_TRY(cub::DeviceScan::ExclusiveSum(at.scan, scan_bytes, at.counts, at.counts,
                                                   static_cast<int>(places), stream));
      BucketsKernel<<<(buckets + 256) / 256, 256, 0, stream>>>(at.counts, buckets, at.parts, at.rows, at.starts);
      TALLY_CUDA_CHECK_LAUNCH();
      if (sorted_move) {
        SortedMoveKernel<T, kBytes><<<at.parts, kThreads, SortedMoveShared<T>(), stream>>>(
            part, values + first, n, spread.lowest, buckets, at.counts, moved);
      } else {
        MoveKernel<T, kBytes><<<at.parts, kThreads, bucket_shared, stream>>>(part, values + first, n, spread.lowest,
                                                                             buckets, at.counts, moved);
      }
      TALLY_CUDA_CHECK_LAUNCH();
      TALLY_CUDA_TRY(accumulate_items(n == rows));
    }
    return cudaSuccess;
  });
}

template cudaError_t Accumulate<float>(const GroupKeys&, const float*, const KeySpread&, int, const Layout&,
                                       cudaStream_t);
template cudaError_t Accumulate<double>(const GroupKeys&, const double*, const KeySpread&, int, const Layout&,
                                        cudaStream_t);

}  // namespace tally::kernels::partitioned
