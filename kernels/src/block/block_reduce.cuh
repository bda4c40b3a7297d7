// Block level: warps reduce by shuffles, then warp 0 reduces the warps'
// results from shared memory. The result is valid in thread 0.
#pragma once

#include "../warp/team_reduce.cuh"

namespace tally::kernels::detail {

template <rules::DType D>
struct BlockReduceStorage {
  alignas(16) unsigned char bytes[32 * sizeof(Partial<D>)];
};

template <rules::DType D>
__device__ Partial<D> BlockReduce(Partial<D> p, const Want& w, BlockReduceStorage<D>& storage) {
  auto* slots = reinterpret_cast<Partial<D>*>(storage.bytes);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  p = TeamReduce(p, 32, w);
  __syncthreads();  // the storage may still be read by a previous reduce
  if (lane == 0) slots[warp] = p;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    p = lane < warps ? slots[lane] : IdentityPartial<D>();
    p = TeamReduce(p, 32, w);
  }
  return p;
}

}  // namespace tally::kernels::detail
