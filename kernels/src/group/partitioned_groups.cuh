// The direct path's steps past a copy per lane (tally/kernels/group.h):
// the scratch's layout, the rows accumulated in buckets of kBucketKeys
// keys (partitioned_groups.cu), and the groups numbered and written out in
// key order on the device, whichever pass filled the slots.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "group/dense_slots.cuh"
#include "tally/kernels/group.h"

namespace tally::kernels::partitioned {

// Keys a bucket holds: its slots in shared memory (36 bytes a key) are 72
// KiB, so three blocks share an SM.
inline constexpr int kBucketBits = 11;
inline constexpr std::uint64_t kBucketKeys = std::uint64_t{1} << kBucketBits;

// The groups as they are written out (DenseGroups' arrays).
struct Groups {
  std::byte* keys;  // the key dtype's bytes (DenseGroups::keys)
  unsigned long long* count;
  unsigned long long* nan;
  double* sum;
  double* min;
  double* max;
  double* mean;
  std::uint8_t* infinities;
  unsigned* seen;  // bit 0: a NaN in some group, bit 1: an infinity
};

struct Layout {
  unsigned buckets = 0;
  int parts = 0;                     // blocks of the count and the move
  dense::Slots slots{};              // buckets x kBucketKeys
  unsigned* counts = nullptr;        // buckets x parts + 1, then summed in place
  unsigned* rows = nullptr;          // buckets
  unsigned* starts = nullptr;        // buckets + 1
  unsigned* item_starts = nullptr;   // buckets + 1
  unsigned* groups = nullptr;        // buckets
  unsigned* group_starts = nullptr;  // buckets + 1
  void* scan = nullptr;              // cub's scratch for summing the counts
  std::size_t scan_bytes = 0;
  std::byte* moved = nullptr;        // the rows in their buckets (past kMaxInPlaceBuckets)
  Groups out{};
};

// The scratch for `rows` rows of `value_size`-byte values over `range` keys
// (at `base`; sizes only where it is null).
Layout LayOut(std::uint64_t rows, std::uint64_t range, std::size_t value_size, void* base, std::size_t* used);

// The rows' sums, counts and extremes into `at.slots` (every slot empty
// before), for a range past kMaxLaneCopiesRange. T is float or double.
template <typename T>
cudaError_t Accumulate(const GroupKeys& keys, const T* values, const KeySpread& spread, int scale, const Layout& at,
                       cudaStream_t stream);

// The slots with rows, numbered bucket by bucket, written out in key order
// into `at.out` (keys of `key_size` bytes), and `out` pointed at them;
// synchronizes `stream`.
cudaError_t WriteGroups(const Layout& at, std::uint64_t lowest, dense::KeyKind kind, int key_size, int scale,
                        cudaStream_t stream, DenseGroups* out);

}  // namespace tally::kernels::partitioned
