// Group-by's device steps (server/engine/grouping over a cuda backend): the
// rows of a key column ordered by key, stably (each key's rows in table
// order), with the distinct keys and where each key's rows start; then any
// column's elements gathered in that order. The engine hands the gathered
// column to the segmented kernels with those starts as segment offsets, so
// every op that answers per segment answers per group, with the same bits
// as a segment holding those elements in that order.
// Plain C++ (no nvcc needed to include it).
//
//   kernels::GroupKeys keys{rules::DType::kInt32, d_keys, rows};
//   kernels::KeyBounds bounds;
//   kernels::BoundsOfKeys(keys, d_16_bytes, stream, &bounds);   // a read
//   size_t bytes = 0;
//   kernels::GroupByKeyScratchBytes(keys, bounds, &bytes);
//   kernels::KeyOrder order;
//   kernels::OrderByKey(keys, bounds, d_scratch, bytes, stream, d_rows, &order);
//   kernels::GatherRows(value_size, d_values, d_rows, rows, d_out, stream);
//
// Rules:
// - keys: every dtype (OrderedKeysSupported), rows below 2^31. Keys order
//   as pandas sorts groups: -0.0 and 0.0 are one key, and every NaN one key
//   after +inf (KeyOrder::nan_group says whether the last group is it;
//   the caller drops it for dropna).
// - The order is a least-significant-digit radix sort of (key - smallest),
//   keys taken as unsigned numbers of the same order, over only the bits
//   the keys' range needs (32-bit codes up to a range of 2^32, 64-bit past
//   it: sparse int64 keys, float64 keys), so it is stable and its cost
//   grows with log2(range), not with the number of groups or their skew.
// - Each group's key is the bytes of its first row's key, as the host's
//   steps answer it.
// - Nothing here allocates: `scratch` holds every intermediate array
//   (GroupByKeyScratchBytes: 32 bytes a row, 40 with 64-bit codes, and
//   CUB's temporary storage). BoundsOfKeys and OrderByKey synchronize
//   `stream` before returning (the range decides the sort's width, the
//   group count what is copied back).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tally/rules/dtype.h"

namespace tally::kernels {

struct GroupKeys {
  rules::DType dtype = rules::DType::kInt32;
  const void* data = nullptr;  // device memory, `rows` elements
  std::uint64_t rows = 0;
};

// Whether OrderByKey takes keys of `dtype`: every dtype.
[[nodiscard]] bool OrderedKeysSupported(rules::DType dtype);
// Whether the direct pass (SumByKey) and CombineKeys take keys of `dtype`:
// the integers and bool.
[[nodiscard]] bool GroupKeysSupported(rules::DType dtype);

// The keys' least and the range they span, as the unsigned numbers that
// order as the keys do.
struct KeyBounds {
  std::uint64_t lowest = 0;
  std::uint64_t range = 0;  // largest - lowest + 1; 0: the whole 2^64
};
inline constexpr std::size_t kKeyBoundsScratchBytes = 16;

// One read of the keys (1 to 2^31 - 1 rows); `scratch` kKeyBoundsScratchBytes
// of device memory.
[[nodiscard]] cudaError_t BoundsOfKeys(const GroupKeys& keys, void* scratch, cudaStream_t stream, KeyBounds* out);

[[nodiscard]] cudaError_t GroupByKeyScratchBytes(const GroupKeys& keys, const KeyBounds& bounds, std::size_t* bytes);

struct KeyOrder {
  std::uint64_t groups = 0;
  // Each group's key, as the key's element bytes (little-endian) in the
  // low bytes of a 64-bit word, in ascending key order.
  std::vector<std::uint64_t> keys;
  // Where each group's rows start in the order, and the rows in all
  // (groups + 1 entries, 0 first).
  std::vector<std::uint64_t> offsets;
  // Whether the last group holds the NaN keys (float keys only).
  bool nan_group = false;
};

// Writes the rows in key order to `rows_out` (device, keys.rows entries)
// and fills `out`.
[[nodiscard]] cudaError_t OrderByKey(const GroupKeys& keys, const KeyBounds& bounds, void* scratch,
                                     std::size_t scratch_bytes, cudaStream_t stream, std::uint32_t* rows_out,
                                     KeyOrder* out);

// Integer keys spread too wide for the direct pass (sparse int64 ids,
// say), numbered by a hash table of their distinct values: numbers_out
// (device, keys.rows entries) gets each row's group number, its key's
// place among the distinct keys in ascending order, which the direct pass
// and the order then take as keys of range `groups`. At most
// `most_groups` (1 to kMaxHashedGroups) distinct keys: past it nothing is
// numbered and `too_many` is set (the caller orders the rows instead).
// Key dtypes as GroupKeysSupported's, 1 to 2^31 - 1 rows. Scratch: a table
// of twice `most_groups` slots (a power of two, 12 bytes each), 24 bytes
// a group more and CUB's sort; synchronizes `stream`.
inline constexpr std::uint64_t kMaxHashedGroups = std::uint64_t{1} << 24;
struct HashedKeys {
  std::uint64_t groups = 0;
  bool too_many = false;
  // Each group's key as KeyOrder::keys has it, ascending.
  std::vector<std::uint64_t> keys;
};
[[nodiscard]] cudaError_t HashKeysScratchBytes(const GroupKeys& keys, std::uint64_t most_groups, std::size_t* bytes);
[[nodiscard]] cudaError_t NumberKeysByHash(const GroupKeys& keys, std::uint64_t most_groups, void* scratch,
                                           std::size_t scratch_bytes, cudaStream_t stream, std::uint32_t* numbers_out,
                                           HashedKeys* out);

// Each row's group: out[rows[i]] = g for the positions i of the order in
// [starts[g], starts[g + 1]), and `groups` for positions past
// starts[groups] (rows of a group dropped from the end). `rows` the
// order's n rows and `starts` its groups + 1 starts, both in device
// memory. Keys the direct pass does not take (floats, a range too wide)
// become keys it does: the group numbers 0 to groups. Does not synchronize.
[[nodiscard]] cudaError_t NumberRows(const std::uint32_t* rows, std::uint64_t n, const std::uint64_t* starts,
                                     std::uint64_t groups, std::uint32_t* out, cudaStream_t stream);

// out[i] = values[rows[i]] for i < n, elements of `element_size` bytes (1,
// 2, 4 or 8).
[[nodiscard]] cudaError_t GatherRows(std::size_t element_size, const void* values, const std::uint32_t* rows,
                                     std::uint64_t n, void* out, cudaStream_t stream);

// The direct path for the commonest questions: sums, counts, extremes and
// means of a float32 or float64 column per key (and their NaN-skipping
// forms), in a pass for the keys' spread (SpreadOfKeys) and one read of
// keys and values (SumByKey). What it gives per group is what those need:
// the elements, the NaN elements, which infinities appear, the sum of the
// finite elements, and the smallest and largest non-NaN element (-0.0 and
// 0.0 as 0.0; meaningless where every element is NaN). Integer
// accumulation throughout, so the answer is the same every time, whatever
// order the threads add in: the sum in fixed point at a scale from the
// largest finite magnitude and the row count (each element exact to about
// 2^-(92 - log2 rows) of the largest, rounded once at the end: closer to
// the exact sum than float64 adding in any order).
//
// Keys within kMaxLaneCopiesRange accumulate in each block's shared memory,
// a copy of each key's slot per lane of a warp (no two lanes add to one
// address, however few the keys), or for ranges of up to 8 keys per thread
// (plain adds, no atomics). Wider ones, up to kMaxPartitionedRange,
// are accumulated in buckets of 2,048 keys, each in a block's shared
// memory: rows read where they lie, a pass a bucket, for keys within
// kMaxInPlaceRange, else first moved into their buckets (the rows' order
// within a bucket is whatever the threads' is, which integer sums do not
// see); the groups are written out on the device. Wider ranges added
// straight to global memory were measured slower than the order by key
// under skew and at 1M groups
// (H200, 2^28 rows: 65,536 Zipf(1.1) keys 89.6 ms against the order's 17.7
// with the pool kept; 1M keys 173 ms against 92; docs/performance.md),
// which is why they are bucketed first.
inline constexpr std::uint64_t kMaxLaneCopiesRange = 32;
// Two buckets of 2,048 keys: past them moving the rows costs less than a
// pass over the table per bucket (kernels/src/group/partitioned_groups.cu
// has the measurements).
inline constexpr std::uint64_t kMaxInPlaceRange = 4096;
// The widest range the partitioned path takes: 2^26 keys, 2.75 GiB of
// slots (44 bytes a key), and no more than the rows make worth it
// (DenseGroupScratchBytes). The count and the move keep a counter per
// bucket in shared memory: 32,768 buckets, 128 KiB, one block an SM (the
// order by key took 3.37 s over 2^28 rows of 2^26 keys, H200, most of it
// the host's work per group; docs/performance.md).
inline constexpr std::uint64_t kMaxPartitionedRange = std::uint64_t{1} << 26;

struct DenseValues {
  rules::DType dtype = rules::DType::kFloat32;
  const void* data = nullptr;  // device memory, one element per key
};

// What the first read finds: the keys' range and the values' largest
// finite magnitude.
struct KeySpread {
  std::uint64_t lowest = 0;   // the smallest key as an order-preserving unsigned number
  std::uint64_t range = 0;    // largest - smallest + 1 (0 for 2^64)
  std::uint64_t largest = 0;  // the largest finite |value|'s bits (0 for none)
};
// Device scratch SpreadOfKeys needs.
inline constexpr std::size_t kKeySpreadScratchBytes = 256;

// Reads keys and values once and synchronizes `stream`.
// cudaErrorInvalidValue for keys or values the direct path does not take
// (key dtypes GroupKeysSupported takes, float32 or float64 values, 1 to 2^31 - 1
// rows).
[[nodiscard]] cudaError_t SpreadOfKeys(const GroupKeys& keys, const DenseValues& values, void* scratch,
                                       cudaStream_t stream, KeySpread* out);

// SumByKey's groups, in ascending key order: arrays of `groups` entries in
// device memory, inside the scratch SumByKey was given (valid while it is).
struct DenseGroups {
  std::uint64_t groups = 0;
  std::uint64_t range = 0;
  int scale = 0;
  bool any_nan = false;       // whether some group holds a NaN (else `nan` is all 0)
  bool any_infinity = false;  // whether some group holds an infinity (else `infinities` is all 0)
  const std::byte* keys = nullptr;       // each group's key: the key dtype's bytes, groups x its size
  const std::uint64_t* count = nullptr;  // elements
  const std::uint64_t* nan = nullptr;    // NaN elements
  const std::uint8_t* infinities = nullptr;  // bit 0: +inf among the elements, bit 1: -inf
  const double* sum = nullptr;  // of the finite elements
  const double* min = nullptr;  // of the non-NaN elements
  const double* max = nullptr;
  // sum / count: each group's mean where no group holds a NaN or an
  // infinity (the host's division, the same bits).
  const double* mean = nullptr;
  // Each group's first row in group order: groups + 1 of them, from 0 to
  // the rows counted (the groups as segments of the rows sorted by key).
  const std::uint64_t* starts = nullptr;
};

// The device scratch SumByKey needs for `spread`; cudaErrorInvalidValue
// (nothing recorded) where the direct path does not take it: a range past
// kMaxPartitionedRange, or past twice the rows and 65,536 more (slots
// that most rows would leave empty cost more than the order by key).
[[nodiscard]] cudaError_t DenseGroupScratchBytes(const GroupKeys& keys, rules::DType value_dtype,
                                                 const KeySpread& spread, std::size_t* bytes);
// Synchronizes `stream` before returning, but for the groups' `starts`,
// which are summed after that on `stream` (a copy on it finds them done).
[[nodiscard]] cudaError_t SumByKey(const GroupKeys& keys, const DenseValues& values, const KeySpread& spread,
                                   void* scratch, std::size_t scratch_bytes, cudaStream_t stream, DenseGroups* out);

// Composite keys (GROUP BY a, b, ...): the key columns combined into one
// 64-bit key per row, which the one-key steps above then group. Row r's key
// is the sum over columns c of (k_c[r] - lowest[c]) x stride[c], where k_c
// is the key as a 64-bit integer (sign-extended for signed dtypes, 0 or 1
// for bool) and stride[c] the product of the ranges of the columns after
// c: so the combined keys order as the key tuples do, the first column
// most significant, and each group's tuple is read back from its combined
// key by division (the engine's, host side).
inline constexpr std::size_t kMaxCombinedColumns = 8;
// Device scratch SpreadOfKeyColumns needs.
inline constexpr std::size_t kKeyColumnsScratchBytes = 2 * sizeof(std::uint64_t) * kMaxCombinedColumns;
struct KeyColumnsSpread {
  std::uint32_t columns = 0;
  std::uint64_t lowest[kMaxCombinedColumns] = {};  // the least key, as a 64-bit integer
  std::uint64_t range[kMaxCombinedColumns] = {};   // largest - least + 1 (0 for 2^64)
  bool fits = false;                 // whether the product of the ranges is below 2^64
  std::uint64_t combined_range = 0;  // that product, where it fits
};
// Reads each key column once and synchronizes `stream`. Key dtypes
// GroupKeysSupported takes, 1 to kMaxCombinedColumns columns of one row count;
// cudaErrorInvalidValue otherwise.
[[nodiscard]] cudaError_t SpreadOfKeyColumns(std::span<const GroupKeys> columns, void* scratch, cudaStream_t stream,
                                             KeyColumnsSpread* out);
// out[r] (device, rows entries) = row r's combined key, for a spread that
// fits. Does not synchronize.
[[nodiscard]] cudaError_t CombineKeys(std::span<const GroupKeys> columns, const KeyColumnsSpread& spread,
                                      std::uint64_t* out, cudaStream_t stream);

}  // namespace tally::kernels
