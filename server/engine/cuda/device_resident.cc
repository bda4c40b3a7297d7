#include "server/engine/cuda/device_resident.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/cuda/staging_block.h"
#include "spdlog/spdlog.h"
#include "tally/kernels/cuda_error.h"

namespace tally::cuda {
namespace {

class DeviceResident final : public ResidentMemory {
 public:
  DeviceResident(DevicePool* pool, DeviceBuffer memory, std::chrono::milliseconds lane_wait)
      : pool_(pool),
        memory_(std::move(memory)),
        device_(memory_.device()),
        pinned_(&pool->pinned(device_)),
        lane_wait_(lane_wait),
        staging_(pinned_) {}

  ~DeviceResident() override {
    if (lease_) {
      ScopedDevice on(device_);
      (void)lease_->Synchronize();
    }
  }

  absl::Status Append(const Extent& piece) override {
    if (!failed_.ok()) return failed_;
    if (piece.size() > memory_.size() - written_ - staging_.filled()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: more than the ", memory_.size(), " bytes the dataset was declared with."));
    }
    if (!lease_) {
      double waited = 0.0;
      absl::StatusOr<DevicePool::Lease> lease = pool_->Checkout(lane_wait_, &waited, device_);
      if (!lease.ok()) return failed_ = lease.status();
      lease_ = std::move(*lease);
    }
    ScopedDevice on(device_);
    // Device bytes, and pinned host bytes (a shared-memory region), are
    // copied as they lie; pageable ones go through the staging blocks.
    if (piece.placement.memory != Memory::kPageableHost) {
      if (staging_.filled() > 0) {
        if (absl::Status s = Flush(); !s.ok()) return s;
      }
      if (piece.size() > 0 &&
          Record(cudaMemcpyAsync(memory_.data() + written_, piece.bytes.data(), piece.size(),
                                 cudaMemcpyDefault, lease_->copy_stream().get()),
                 "cudaMemcpyAsync(device or pinned host to device)", __FILE__, __LINE__) != cudaSuccess) {
        return Fail("copying device or pinned host bytes into a dataset");
      }
      written_ += piece.size();
      return absl::OkStatus();
    }
    const std::byte* p = piece.bytes.data();
    std::uint64_t n = piece.size();
    while (n > 0) {
      absl::StatusOr<std::size_t> took = staging_.Fill(p, n);
      if (!took.ok()) return failed_ = took.status();
      p += *took;
      n -= *took;
      if (staging_.full()) {
        if (absl::Status s = Flush(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Seal() override {
    if (!failed_.ok()) return failed_;
    if (written_ + staging_.filled() != memory_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("data: received ", written_ + staging_.filled(), " of the ",
                                                     memory_.size(), " bytes declared."));
    }
    if (!lease_) return absl::OkStatus();  // an empty dataset
    ScopedDevice on(device_);
    if (staging_.filled() > 0) {
      if (absl::Status s = Flush(); !s.ok()) return s;
    }
    if (Record(cudaStreamSynchronize(lease_->copy_stream().get()), "cudaStreamSynchronize(copy)",
               __FILE__, __LINE__) != cudaSuccess) {
      return Fail("waiting for a dataset's copies");
    }
    lease_.Reset();
    return absl::OkStatus();
  }

  Extent extent() const override {
    return Extent{{memory_.data(), memory_.size()}, Placement::Device(device_)};
  }

 private:
  // Copies the staged block to its place in the dataset; the block goes back
  // to the pool once the copy has read it.
  absl::Status Flush() {
    const StreamView copy = lease_->copy_stream();
    std::size_t bytes = 0;
    PinnedPool::Block block = staging_.Take(&bytes);
    if (Record(cudaMemcpyAsync(memory_.data() + written_, block.data, bytes, cudaMemcpyHostToDevice,
                               copy.get()),
               "cudaMemcpyAsync(staging to dataset)", __FILE__, __LINE__) != cudaSuccess) {
      pinned_->ReleaseNow(block);
      return Fail("copying an upload's bytes to the GPU");
    }
    written_ += bytes;
    if (absl::Status s = pinned_->Release(block, copy); !s.ok()) return failed_ = s;
    return absl::OkStatus();
  }

  absl::Status Fail(const char* what) {
    const std::string where = LastErrorWhere();
    (void)cudaGetLastError();
    spdlog::error("cuda backend: {} on {} failed: {}", what, pool_->DeviceName(device_), where);
    failed_ = absl::InternalError(absl::StrCat("CUDA error on ", pool_->DeviceName(device_), " while ",
                                               what, ": ", where));
    return failed_;
  }

  DevicePool* const pool_;
  const DeviceBuffer memory_;
  const int device_;
  PinnedPool* const pinned_;
  const std::chrono::milliseconds lane_wait_;
  DevicePool::Lease lease_;    // held while the upload runs
  StagingBlock staging_;       // host bytes on their way to the dataset
  std::uint64_t written_ = 0;  // bytes copied (or enqueued) into memory_
  absl::Status failed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateDeviceResident(DevicePool* pool, int device,
                                                                       std::uint64_t bytes,
                                                                       std::chrono::milliseconds lane_wait) {
  if (!pool->Uses(device)) {
    return absl::InvalidArgumentError(absl::StrCat("cuda backend: GPU ", device, " is not in use."));
  }
  ScopedDevice on(device);
  DeviceBuffer memory;
  if (DeviceBuffer::Create(bytes, &memory) != cudaSuccess) {
    const std::string where = LastErrorWhere();
    (void)cudaGetLastError();
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("GPU ", device, " could not allocate ", bytes,
                                                     " bytes for a dataset (", free, " of ", total,
                                                     " bytes free): ", where));
  }
  return std::make_unique<DeviceResident>(pool, std::move(memory), lane_wait);
}

}  // namespace tally::cuda
