// The direct path's last step (partitioned_groups.cuh's WriteGroups):
// the slots with rows numbered bucket by bucket, and each group's key,
// count, sum, extremes and mean written out in key order, on the device,
// whichever pass filled the slots (dense_groups.cu's copies, or the
// buckets of partitioned_groups.cu), and each group's first row in group
// order.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include "group/partitioned_groups.cuh"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::partitioned {
namespace {

using dense::KeyKind;
using dense::Slot;
using dense::Slots;

// Each bucket's groups (its slots with rows); one block a bucket.
constexpr int kNumberThreads = kBucketKeys / 2;
__global__ void __launch_bounds__(kNumberThreads) GroupsPerBucketKernel(const unsigned long long* count,
                                                                        unsigned* groups) {
  using Reduce = cub::BlockReduce<unsigned, kNumberThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const std::uint64_t first = std::uint64_t{blockIdx.x} * kBucketKeys + 2 * threadIdx.x;
  const unsigned mine = (count[first] != 0 ? 1u : 0u) + (count[first + 1] != 0 ? 1u : 0u);
  const unsigned total = Reduce(temp).Sum(mine);
  if (threadIdx.x == 0) groups[blockIdx.x] = total;
}

// Group g's key as `size` bytes of the key dtype (its bits' low bytes).
__device__ inline void StoreKey(std::byte* keys, std::uint64_t g, int size, std::uint64_t bits) {
  switch (size) {
    case 1: reinterpret_cast<std::uint8_t*>(keys)[g] = static_cast<std::uint8_t>(bits); break;
    case 2: reinterpret_cast<std::uint16_t*>(keys)[g] = static_cast<std::uint16_t>(bits); break;
    case 4: reinterpret_cast<std::uint32_t*>(keys)[g] = static_cast<std::uint32_t>(bits); break;
    default: reinterpret_cast<std::uint64_t*>(keys)[g] = bits; break;
  }
}

// Each bucket's groups written in key order from group_starts[bucket] on
// (from 0 where there is one bucket and no group_starts), the groups'
// number into found[0] and the first group's first row, 0, into start[0]:
// one copy back for the caller, and no launches to count a lone bucket's
// groups before it.
__global__ void __launch_bounds__(kNumberThreads) WriteGroupsKernel(Slots slots, const unsigned* group_starts,
                                                                    std::uint64_t lowest, KeyKind kind, int key_size,
                                                                    int scale, Groups out) {
  using Scan = cub::BlockScan<unsigned, kNumberThreads>;
  __shared__ typename Scan::TempStorage temp;
  const std::uint64_t first = std::uint64_t{blockIdx.x} * kBucketKeys + 2 * threadIdx.x;
  const unsigned flags[2] = {slots.count[first] != 0 ? 1u : 0u, slots.count[first + 1] != 0 ? 1u : 0u};
  unsigned before = 0, total = 0;
  Scan(temp).ExclusiveSum(flags[0] + flags[1], before, total);
  unsigned g = (group_starts != nullptr ? group_starts[blockIdx.x] : 0u) + before;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out.found[0] = group_starts != nullptr ? group_starts[gridDim.x] : total;
    out.start[0] = 0;
  }
  unsigned seen = 0;
  for (int e = 0; e < 2; ++e) {
    if (flags[e] == 0) continue;
    const std::uint64_t j = first + e;
    const Slot slot = Slot::Load(slots, j);
    StoreKey(out.keys, g, key_size, dense::KeyBits(lowest + j, kind));
    out.count[g] = slot.count;
    out.nan[g] = slot.special >> 2;
    out.infinities[g] = static_cast<std::uint8_t>(slot.special & 3u);
    const double sum = rules::keyed::FixedSumOf(rules::keyed::FixedWords(slot.hi, slot.lo), scale);  // the finite elements
    out.sum[g] = sum;
    out.mean[g] = __ddiv_rn(sum, __ull2double_rn(slot.count));
    out.min[g] = rules::keyed::FromOrdered(slot.low);
    out.max[g] = rules::keyed::FromOrdered(slot.high);
    seen |= (slot.special >> 2 != 0 ? 1u : 0u) | ((slot.special & 3u) != 0 ? 2u : 0u);
    ++g;
  }
  if (seen != 0) atomicOr(&out.found[1], seen);
}

}  // namespace

cudaError_t WriteGroups(const Layout& at, std::uint64_t lowest, KeyKind kind, int key_size, int scale,
                        cudaStream_t stream, DenseGroups* out) {
  const unsigned buckets = at.buckets;
  TALLY_CUDA_TRY(cudaMemsetAsync(at.out.found, 0, 2 * sizeof(unsigned), stream));
  const unsigned* group_starts = nullptr;
  if (buckets > 1) {
    GroupsPerBucketKernel<<<buckets, kNumberThreads, 0, stream>>>(at.slots.count, at.groups);
    TALLY_CUDA_CHECK_LAUNCH();
    ScanKernel<><<<1, kScanThreads, 0, stream>>>(at.groups, buckets, 1, at.group_starts);
    TALLY_CUDA_CHECK_LAUNCH();
    group_starts = at.group_starts;
  }
  WriteGroupsKernel<<<buckets, kNumberThreads, 0, stream>>>(at.slots, group_starts, lowest, kind, key_size, scale,
                                                            at.out);
  TALLY_CUDA_CHECK_LAUNCH();
  unsigned found[2] = {0, 0};  // groups, what they hold
  TALLY_CUDA_TRY(cudaMemcpyAsync(found, at.out.found, sizeof found, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  out->groups = found[0];
  // Each group's first row in group order (the first, 0, written above):
  // the counts' running sum, left on the stream for the caller's copy (on
  // the host this pass over 16M groups' 128 MB took a fifth of the
  // request).
  if (found[0] > 0) {
    std::size_t scan_bytes = at.scan_bytes;
    TALLY_CUDA_TRY(cub::DeviceScan::InclusiveSum(at.scan, scan_bytes, at.out.count, at.out.start + 1,
                                                 static_cast<int>(found[0]), stream));
  }
  out->any_nan = (found[1] & 1u) != 0;
  out->any_infinity = (found[1] & 2u) != 0;
  out->keys = at.out.keys;
  out->count = reinterpret_cast<const std::uint64_t*>(at.out.count);
  out->nan = reinterpret_cast<const std::uint64_t*>(at.out.nan);
  out->infinities = at.out.infinities;
  out->sum = at.out.sum;
  out->min = at.out.min;
  out->max = at.out.max;
  out->mean = at.out.mean;
  out->starts = reinterpret_cast<const std::uint64_t*>(at.out.start);
  return cudaSuccess;
}

}  // namespace tally::kernels::partitioned
