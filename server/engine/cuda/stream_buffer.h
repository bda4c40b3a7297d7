// Device memory from a device's stream-ordered pool, for the passes that
// need scratch per request (the device passes of the functions that keep
// their own state, group-by's order by key): allocated and given back on
// the request's stream, so nothing waits for the whole device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "server/engine/cuda/cuda_resources.h"
#include "tally/kernels/cuda_error.h"

namespace tally::cuda {

// Device memory from the device's stream-ordered pool, given back on the
// stream that used it when the owner goes.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  StreamBuffer(StreamBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(o.size_), stream_(o.stream_), device_(o.device_) {}
  StreamBuffer& operator=(StreamBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = o.size_;
      stream_ = o.stream_;
      device_ = o.device_;
    }
    return *this;
  }
  ~StreamBuffer() { Reset(); }

  // On the current device, ordered on `stream`.
  [[nodiscard]] static cudaError_t Create(std::size_t bytes, StreamView stream, StreamBuffer* out) {
    StreamBuffer b;
    TALLY_CUDA_TRY(cudaGetDevice(&b.device_));
    b.stream_ = stream.get();
    if (bytes > 0) TALLY_CUDA_TRY(cudaMallocAsync(&b.data_, bytes, b.stream_));
    b.size_ = bytes;
    *out = std::move(b);
    return cudaSuccess;
  }
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  std::size_t size() const { return size_; }

 private:
  void Reset() {
    if (data_ == nullptr) return;
    ScopedDevice on(device_);
    TALLY_CUDA_CHECK_NOTHROW(cudaFreeAsync(std::exchange(data_, nullptr), stream_));
  }
  void* data_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

// Keeps up to PoolKeepBytes() of the device's pool between requests
// (once per device; the current one must be `device`).
[[nodiscard]] cudaError_t KeepPoolMemory(int device);

// What KeepPoolMemory keeps (BackendOptions::pool_keep_bytes, set once at
// start, before any request).
void SetPoolKeepBytes(std::uint64_t bytes);
std::uint64_t PoolKeepBytes();

}  // namespace tally::cuda
