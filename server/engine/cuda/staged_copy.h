// Device bytes into pageable host memory through two of a GPU's pinned
// staging blocks, so that the copy over the bus runs at pinned speed and
// overlaps the host's copy out of the other block. A plain cudaMemcpy into
// pageable memory goes through the driver's own staging one piece at a
// time: 3.4 GB/s for group-by's 640 MB of 16M groups on an H200
// (docs/performance.md, "Group-by").
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/cuda/pinned_pool.h"

namespace tally::cpu {
class ThreadPool;
}

namespace tally::cuda {

// Where a copy's bytes land on the host.
class HostTarget {
 public:
  virtual ~HostTarget() = default;
  // The bytes' next piece (the pieces come in order).
  virtual void Append(const std::byte* bytes, std::size_t n) = 0;
  // Room for all `n` bytes at once, for a plain copy.
  virtual std::byte* Whole(std::size_t n) = 0;
  // The storage the next pieces will fill, where it is already allocated
  // (empty where it is not): for advising the kernel only (its pages
  // populated before the copy), never written through.
  virtual std::span<std::byte> Room() { return {}; }
};

// A host vector as a copy's target: emptied, then filled piece by piece,
// each element written once. Sizing it first and copying over it wrote
// every byte twice, its zeros first: 9-15 ms of the host's 28 for the 40
// MB of 1M groups' arrays on an H200 host (docs/performance.md).
template <typename T>
class VectorTarget final : public HostTarget {
 public:
  explicit VectorTarget(std::vector<T>& v) : v_(v) { v_.clear(); }
  void Append(const std::byte* bytes, std::size_t n) override {
    const auto* first = reinterpret_cast<const T*>(bytes);
    v_.insert(v_.end(), first, first + n / sizeof(T));
  }
  std::byte* Whole(std::size_t n) override {
    v_.resize(n / sizeof(T));
    return reinterpret_cast<std::byte*>(v_.data());
  }
  std::span<std::byte> Room() override {
    return {reinterpret_cast<std::byte*>(v_.data() + v_.size()), (v_.capacity() - v_.size()) * sizeof(T)};
  }

 private:
  std::vector<T>& v_;
};

// One of several device arrays to bring to the host: `bytes` (a whole
// number of the target's elements) from `from`.
struct HostCopy {
  const void* from;
  std::size_t bytes;
  HostTarget* to;
};

// Every copy of `copies`, returning once each target holds its bytes:
// the copies cut into batches of one pinned block (small ones share a
// block: a group-by's few groups go over the bus together and the stream
// is waited for once, where a copy each waited for its own, about 10-20 us
// each on an H200 host). The batches go in waves, two sets of blocks taking
// turns so that one wave goes over the bus while the host copies the last
// one out. With `copiers`, a wave holds a batch for each of the pool's
// participants and the copies' pieces are dealt in turn, so that the
// pool's idle participants copy several targets out at once, each target's
// pieces in order (one thread copied out of pinned memory at 8-13 GB/s,
// the bus brings 55: the 700 MB of 16M groups' arrays, docs/
// performance.md); without, a wave is one batch. Falls back to plain
// copies where the pool lends no block within a moment (every block busy
// with streams): slower, never failing for it.
[[nodiscard]] absl::Status CopyAllToHost(PinnedPool& pinned, cudaStream_t stream, std::span<const HostCopy> copies,
                                         cpu::ThreadPool* copiers = nullptr);

}  // namespace tally::cuda
