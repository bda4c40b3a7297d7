#include "server/engine/cuda/kept_streams.h"

#include <map>
#include <mutex>
#include <vector>

namespace tally::cuda {
namespace {

// The kept streams of each device, and the lock over them; never destroyed,
// as streams may be given back after main returns.
struct KeptStreams {
  std::mutex mutex;
  std::map<int, std::vector<cudaStream_t>> by_device;
};
KeptStreams& Kept() {
  static auto* kept = new KeptStreams;
  return *kept;
}

}  // namespace

cudaStream_t TakeKeptStream() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return nullptr;
  KeptStreams& kept = Kept();
  const std::lock_guard<std::mutex> lock(kept.mutex);
  std::vector<cudaStream_t>& streams = kept.by_device[device];
  if (streams.empty()) return nullptr;
  const cudaStream_t s = streams.back();
  streams.pop_back();
  return s;
}

cudaError_t KeepOrDestroyStream(cudaStream_t stream) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  {
    KeptStreams& kept = Kept();
    const std::lock_guard<std::mutex> lock(kept.mutex);
    std::vector<cudaStream_t>& streams = kept.by_device[device];
    if (streams.size() < static_cast<std::size_t>(kMaxKeptStreams)) {
      streams.push_back(stream);
      return cudaSuccess;
    }
  }
  return cudaStreamDestroy(stream);
}

}  // namespace tally::cuda
