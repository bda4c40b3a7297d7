#include "server/engine/cuda/kept_streams.h"

#include <map>
#include <mutex>
#include <vector>

namespace tally::cuda {
namespace {

std::mutex mutex;
std::map<int, std::vector<cudaStream_t>>& Kept() {
  static auto* kept = new std::map<int, std::vector<cudaStream_t>>;  // never destroyed: streams outlive main
  return *kept;
}

}  // namespace

cudaStream_t TakeKeptStream() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return nullptr;
  const std::lock_guard<std::mutex> lock(mutex);
  std::vector<cudaStream_t>& kept = Kept()[device];
  if (kept.empty()) return nullptr;
  const cudaStream_t s = kept.back();
  kept.pop_back();
  return s;
}

cudaError_t KeepOrDestroyStream(cudaStream_t stream) {
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    std::vector<cudaStream_t>& kept = Kept()[device];
    if (kept.size() < static_cast<std::size_t>(kMaxKeptStreams)) {
      kept.push_back(stream);
      return cudaSuccess;
    }
  }
  return cudaStreamDestroy(stream);
}

}  // namespace tally::cuda
