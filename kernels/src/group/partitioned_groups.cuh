// The direct path's steps past a copy per lane (tally/kernels/group.h):
// the scratch's layout, the rows accumulated in buckets of kBucketKeys
// keys (partitioned_groups.cu), and the groups numbered and written out in
// key order on the device, whichever pass filled the slots
// (written_groups.cu).
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "group/dense_slots.cuh"
#include "tally/kernels/group.h"

namespace tally::kernels::partitioned {

// Keys a bucket holds: its slots in shared memory (28 bytes a key for
// float32 values, 36 for float64: dense::Packed) are 56 or 72 KiB, so
// three blocks share an SM.
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
  unsigned long long* start;  // each group's first row in group order, groups + 1 of them
  std::uint8_t* infinities;
  unsigned* found;  // [0]: the groups written; [1]: bit 0 a NaN in some group, bit 1 an infinity
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
  void* scan = nullptr;              // cub's scratch for summing the counts and the groups' rows
  std::size_t scan_bytes = 0;
  std::byte* moved = nullptr;        // the rows in their buckets (past kMaxInPlaceBuckets)
  Groups out{};
};

// out[0..n] = the exclusive sums of in[i] (divided by `per`, rounded up,
// where `per` is not 1), in one block of kScanThreads. (A template, so
// that each file that launches it has its own.)
constexpr int kScanThreads = 1024;
template <typename = void>
__global__ void __launch_bounds__(kScanThreads) ScanKernel(const unsigned* in, unsigned n, unsigned per,
                                                           unsigned* out) {
  using Scan = cub::BlockScan<unsigned, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  const unsigned strip = (n + kScanThreads - 1) / kScanThreads;
  const unsigned first = threadIdx.x * strip;
  const auto value = [&](unsigned i) { return per == 1 ? in[i] : (in[i] + per - 1) / per; };
  unsigned mine = 0;
  for (unsigned i = first; i < first + strip && i < n; ++i) mine += value(i);
  unsigned before = 0, total = 0;
  Scan(temp).ExclusiveSum(mine, before, total);
  for (unsigned i = first; i < first + strip && i < n; ++i) {
    out[i] = before;
    before += value(i);
  }
  if (threadIdx.x == 0) out[n] = total;
}

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
