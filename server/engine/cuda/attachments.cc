#include "server/engine/cuda/attachments.h"

#include <cuda.h>  // types of cuMemGetAddressRange, reached through the runtime (no libcuda link)
#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/engine/cuda/cuda_resources.h"
#include "tally/kernels/cuda_error.h"

namespace tally::cuda {
namespace {

absl::Status CudaFailure(cudaError_t err, const std::string& what) {
  (void)cudaGetLastError();  // neither call leaves a sticky error; clear the last one
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")."));
}

class PinnedHostAttachment final : public Attachment {
 public:
  explicit PinnedHostAttachment(std::span<const std::byte> bytes) : bytes_(bytes) {}
  ~PinnedHostAttachment() override {
    TALLY_CUDA_CHECK_NOTHROW(cudaHostUnregister(const_cast<std::byte*>(bytes_.data())));
  }
  Extent extent() const override { return {bytes_, Placement::PinnedHost()}; }

 private:
  std::span<const std::byte> bytes_;
};

class IpcAttachment final : public Attachment {
 public:
  IpcAttachment(void* base, std::uint64_t bytes, int device)
      : base_(base), bytes_(bytes), device_(device) {}
  ~IpcAttachment() override {
    ScopedDevice on(device_);
    TALLY_CUDA_CHECK_NOTHROW(cudaIpcCloseMemHandle(base_));
  }
  Extent extent() const override {
    return {{static_cast<const std::byte*>(base_), static_cast<std::size_t>(bytes_)}, Placement::Device(device_)};
  }

 private:
  void* base_;
  std::uint64_t bytes_;
  int device_;
};

// cuMemGetAddressRange through the runtime's entry point: linking libcuda
// itself would stop tally-server from starting on hosts without a driver.
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

absl::StatusOr<std::size_t> AllocationBytesFrom(void* p) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return CudaFailure(err == cudaSuccess ? cudaErrorNotSupported : err, "looking up cuMemGetAddressRange");
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult r = reinterpret_cast<GetAddressRange>(fn)(&base, &size, reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) return absl::InternalError(absl::StrCat("cuMemGetAddressRange failed with CUresult ", r, "."));
  // The handle names an allocation's start; what follows p in it is ours.
  return size - static_cast<std::size_t>(reinterpret_cast<CUdeviceptr>(p) - base);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Attachment>> AttachPinnedHost(std::span<const std::byte> bytes) {
  if (bytes.empty()) return std::make_unique<PlainHostAttachment>(bytes);
  // Read-only: the mapping is PROT_READ, and the GPU only reads it. Portable:
  // any GPU's lane may copy from it.
  const cudaError_t err = cudaHostRegister(const_cast<std::byte*>(bytes.data()), bytes.size(),
                                           cudaHostRegisterPortable | cudaHostRegisterReadOnly);
  if (err != cudaSuccess) {
    return CudaFailure(err, absl::StrCat("registering ", bytes.size(), " bytes of shared memory with CUDA"));
  }
  return std::make_unique<PinnedHostAttachment>(bytes);
}

absl::StatusOr<std::unique_ptr<Attachment>> AttachIpc(const DevicePool& pool, std::span<const std::byte> handle,
                                                      int device, std::uint64_t bytes) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("ipc_handle: ", handle.size(), " bytes; a cudaIpcMemHandle_t has ",
                                                    sizeof(cudaIpcMemHandle_t), "."));
  }
  if (!pool.Uses(device)) {
    return absl::FailedPreconditionError(absl::StrCat("device: GPU ", device, " is not one of the GPUs this server uses."));
  }
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof h);
  ScopedDevice on(device);
  void* base = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("ipc_handle: GPU ", device, " cannot open it (", cudaGetErrorName(err),
                     "): it must come from cudaIpcGetMemHandle in another live process, for memory on that GPU."));
  }
  auto attachment = std::make_unique<IpcAttachment>(base, bytes, device);
  absl::StatusOr<std::size_t> available = AllocationBytesFrom(base);
  if (!available.ok()) return available.status();
  if (bytes > *available) {
    return absl::InvalidArgumentError(absl::StrCat("byte_size: ", bytes, " bytes, but the exported allocation has ",
                                                   *available, "."));
  }
  return attachment;
}

}  // namespace tally::cuda
