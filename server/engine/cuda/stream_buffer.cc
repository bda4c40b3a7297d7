#include "server/engine/cuda/stream_buffer.h"

#include <mutex>
#include <set>

namespace tally::cuda {
namespace {

// The device's stream-ordered pool keeps up to this much of what the
// passes give back, instead of returning it to the driver at every
// synchronization (its default): a request's scratch (16 to 150 MB for 2^28
// elements) is then not mapped afresh each time. Memory the pool keeps is
// not free for datasets: a few hundred MB of 80 GB.
constexpr std::uint64_t kPoolKeepsBytes = std::uint64_t{512} << 20;

}  // namespace

cudaError_t KeepPoolMemory(int device) {
  static std::mutex mutex;
  static std::set<int> done;
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.count(device) != 0) return cudaSuccess;
  cudaMemPool_t pool = nullptr;
  TALLY_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t keep = kPoolKeepsBytes;
  TALLY_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  done.insert(device);
  return cudaSuccess;
}

}  // namespace tally::cuda
