// Move-only RAII owners of CUDA streams, events, device and pinned host
// buffers, with cheap non-owning views (rmm's cuda_stream / cuda_stream_view).
// Each owner is created on the current device and freed on the device it was
// created on; a failed free is reported, never thrown.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "server/engine/cuda/kept_streams.h"
#include "tally/kernels/cuda_error.h"

namespace tally::cuda {

// Makes `device` current for the scope, restoring the previous one after.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) TALLY_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
    else previous_ = -1;
  }
  ~ScopedDevice() {
    if (previous_ >= 0) TALLY_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

// A borrowed stream.
class StreamView {
 public:
  StreamView() = default;
  explicit StreamView(cudaStream_t s) : stream_(s) {}
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Base of the owners below: one handle, a device, a deleter.
template <typename Handle, cudaError_t (*kDestroy)(Handle)>
class Owned {
 public:
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : handle_(std::exchange(o.handle_, Handle{})), device_(o.device_) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      Reset();
      handle_ = std::exchange(o.handle_, Handle{});
      device_ = o.device_;
    }
    return *this;
  }
  ~Owned() { Reset(); }

  Handle get() const { return handle_; }
  int device() const { return device_; }
  explicit operator bool() const { return handle_ != Handle{}; }

 protected:
  void Reset() {
    if (handle_ == Handle{}) return;
    ScopedDevice on(device_);
    TALLY_CUDA_CHECK_NOTHROW(kDestroy(handle_));
    handle_ = Handle{};
  }
  Handle handle_{};
  int device_ = 0;
};

// A non-blocking stream (does not synchronize with the legacy default
// stream), given back for reuse when its owner goes (kept_streams.h).
class Stream : public Owned<cudaStream_t, KeepOrDestroyStream> {
 public:
  // On the current device: one given back earlier, else a new one.
  [[nodiscard]] static cudaError_t Create(Stream* out) {
    Stream s;
    TALLY_CUDA_TRY(cudaGetDevice(&s.device_));
    s.handle_ = TakeKeptStream();
    if (s.handle_ == nullptr) TALLY_CUDA_TRY(cudaStreamCreateWithFlags(&s.handle_, cudaStreamNonBlocking));
    *out = std::move(s);
    return cudaSuccess;
  }
  StreamView view() const { return StreamView(handle_); }
};

class Event : public Owned<cudaEvent_t, cudaEventDestroy> {
 public:
  // On the current device. `timing`: usable with cudaEventElapsedTime
  // (slightly dearer to record).
  [[nodiscard]] static cudaError_t Create(bool timing, Event* out) {
    Event e;
    TALLY_CUDA_TRY(cudaGetDevice(&e.device_));
    TALLY_CUDA_TRY(cudaEventCreateWithFlags(
        &e.handle_, timing ? cudaEventDefault : cudaEventDisableTiming));
    *out = std::move(e);
    return cudaSuccess;
  }
};

inline cudaError_t FreeHost(void* p) { return cudaFreeHost(p); }
inline cudaError_t FreeDevice(void* p) { return cudaFree(p); }

// Bytes and their size; the owner frees them with kFree.
template <cudaError_t (*kFree)(void*)>
class Buffer : public Owned<void*, kFree> {
 public:
  Buffer() = default;
  // The size moves with the bytes (the source is left empty, size 0).
  Buffer(Buffer&& o) noexcept : Owned<void*, kFree>(std::move(o)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      Owned<void*, kFree>::operator=(std::move(o));
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  std::size_t size() const { return size_; }
  std::byte* data() const { return static_cast<std::byte*>(this->handle_); }

 protected:
  std::size_t size_ = 0;
};

// Device memory on the current device (cudaMalloc: only at start).
class DeviceBuffer : public Buffer<FreeDevice> {
 public:
  [[nodiscard]] static cudaError_t Create(std::size_t bytes, DeviceBuffer* out) {
    DeviceBuffer b;
    TALLY_CUDA_TRY(cudaGetDevice(&b.device_));
    if (bytes > 0) TALLY_CUDA_TRY(cudaMalloc(&b.handle_, bytes));
    b.size_ = bytes;
    *out = std::move(b);
    return cudaSuccess;
  }
};

// Page-locked host memory usable from every device (cudaHostAlloc: only at
// start).
class PinnedBuffer : public Buffer<FreeHost> {
 public:
  [[nodiscard]] static cudaError_t Create(std::size_t bytes, PinnedBuffer* out) {
    PinnedBuffer b;
    TALLY_CUDA_TRY(cudaGetDevice(&b.device_));
    if (bytes > 0) TALLY_CUDA_TRY(cudaHostAlloc(&b.handle_, bytes, cudaHostAllocPortable));
    b.size_ = bytes;
    *out = std::move(b);
    return cudaSuccess;
  }
};

}  // namespace tally::cuda
