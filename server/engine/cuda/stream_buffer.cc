#include "server/engine/cuda/stream_buffer.h"

#include <atomic>
#include <mutex>
#include <set>

namespace tally::cuda {
namespace {

// The device's stream-ordered pool keeps up to this much of what the
// passes give back, instead of returning it to the driver at every
// synchronization (its default): a request's scratch is then not mapped
// afresh each time. Memory the pool keeps is not free for datasets. 512 MiB
// by default (--cuda_pool_keep_bytes): the quantile passes' 16 to 150 MB
// for 2^28 elements. A group-by of 2^28 rows lends about 6 GiB; mapping it
// afresh took three quarters of its time on an H200 (16 groups: 33 ms,
// 9 ms with 16 GiB kept; docs/performance.md): a server that groups large
// tables keeps more.
std::atomic<std::uint64_t> keep_bytes{std::uint64_t{512} << 20};

}  // namespace

void SetPoolKeepBytes(std::uint64_t bytes) { keep_bytes.store(bytes); }
std::uint64_t PoolKeepBytes() { return keep_bytes.load(); }

cudaError_t KeepPoolMemory(int device) {
  static std::mutex mutex;
  static std::set<int> done;
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.count(device) != 0) return cudaSuccess;
  cudaMemPool_t pool = nullptr;
  TALLY_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t keep = PoolKeepBytes();
  TALLY_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  done.insert(device);
  return cudaSuccess;
}

}  // namespace tally::cuda
