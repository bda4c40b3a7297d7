#include "server/engine/cuda/group_on_device.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/stream_buffer.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/group.h"

namespace tally::cuda {
namespace {

absl::Status Failure(int device, const char* what) {
  std::string where = LastErrorWhere();
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat("CUDA error on GPU ", device, " while ", what, ": ", where));
}

class GatheredColumn final : public DeviceColumn {
 public:
  GatheredColumn(StreamBuffer bytes, int device) : bytes_(std::move(bytes)), device_(device) {}
  Extent extent() const override {
    return Extent{std::span<const std::byte>(bytes_.data(), bytes_.size()), Placement::Device(device_)};
  }

 private:
  StreamBuffer bytes_;
  int device_;
};

class CudaGroupOrder final : public DeviceGroupOrder {
 public:
  CudaGroupOrder(int device, Stream stream, StreamBuffer rows, std::uint64_t count)
      : device_(device), stream_(std::move(stream)), rows_(std::move(rows)), count_(count) {}

  absl::StatusOr<std::unique_ptr<DeviceColumn>> Gather(const Extent& column, DType dtype) override {
    if (column.placement != Placement::Device(device_)) {
      return absl::UnimplementedError(absl::StrCat("the column is in ", column.placement.Describe(), ", the keys on GPU ",
                                                   device_, "."));
    }
    ScopedDevice on(device_);
    const std::size_t size = rules::SizeOf(dtype);
    StreamBuffer out;
    if (StreamBuffer::Create(count_ * size, stream_.view(), &out) != cudaSuccess) {
      return Failure(device_, "allocating a gathered column");
    }
    if (kernels::GatherRows(size, column.bytes.data(), reinterpret_cast<const std::uint32_t*>(rows_.data()), count_,
                            out.data(), stream_.get()) != cudaSuccess ||
        cudaStreamSynchronize(stream_.get()) != cudaSuccess) {
      return Failure(device_, "gathering a column by group");
    }
    return std::make_unique<GatheredColumn>(std::move(out), device_);
  }

  absl::StatusOr<std::vector<std::uint64_t>> Rows() override {
    ScopedDevice on(device_);
    std::vector<std::uint32_t> rows(count_);
    if (cudaMemcpyAsync(rows.data(), rows_.data(), count_ * sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                        stream_.get()) != cudaSuccess ||
        cudaStreamSynchronize(stream_.get()) != cudaSuccess) {
      return Failure(device_, "copying the group order");
    }
    return std::vector<std::uint64_t>(rows.begin(), rows.end());
  }

 private:
  int device_;
  Stream stream_;
  StreamBuffer rows_;
  std::uint64_t count_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> OrderByKeyOnDevice(const Extent& keys, DType dtype,
                                                                     std::uint64_t rows, std::uint64_t max_groups,
                                                                     const DevicePool& pool) {
  const auto unimplemented = [](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("no device grouping: ", why));
  };
  if (keys.placement.memory != Memory::kDevice) return unimplemented("the keys are not in GPU memory.");
  const int device = keys.placement.device;
  if (!pool.Uses(device)) return unimplemented(absl::StrCat("GPU ", device, " is not one of the devices in use."));
  if (absl::Status health = pool.DeviceHealth(device); !health.ok()) return health;
  const kernels::GroupKeys k{dtype, keys.bytes.data(), rows};
  if (!kernels::GroupKeysSupported(dtype)) return unimplemented(absl::StrCat(rules::Name(dtype), " keys."));
  if (rows == 0 || rows >= (std::uint64_t{1} << 31)) return unimplemented("1 to 2^31 - 1 rows.");
  ScopedDevice on(device);
  std::size_t scratch_bytes = 0;
  if (kernels::GroupByKeyScratchBytes(k, &scratch_bytes) != cudaSuccess) return Failure(device, "sizing scratch");
  if (KeepPoolMemory(device) != cudaSuccess) {
    const std::string where = LastErrorWhere();
    (void)cudaGetLastError();
    return unimplemented(absl::StrCat("GPU ", device, "'s memory pool: ", where));
  }
  Stream stream;
  if (Stream::Create(&stream) != cudaSuccess) return Failure(device, "creating a stream");
  StreamBuffer scratch, order_rows;
  if (StreamBuffer::Create(scratch_bytes, stream.view(), &scratch) != cudaSuccess ||
      StreamBuffer::Create(rows * sizeof(std::uint32_t), stream.view(), &order_rows) != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("GPU ", device, " has no room for the group-by's ",
                                                     scratch_bytes + rows * 4, " bytes of scratch."));
  }
  kernels::KeyOrder order;
  // The range a direct radix order takes: past 2^32 the keys are sorted on
  // the host instead.
  constexpr std::uint64_t kMaxRange = std::uint64_t{1} << 32;
  if (const cudaError_t e = kernels::OrderByKey(k, kMaxRange, scratch.data(), scratch.size(), stream.get(),
                                                reinterpret_cast<std::uint32_t*>(order_rows.data()), &order);
      e != cudaSuccess) {
    if (e == cudaErrorInvalidValue) {  // the keys' range passes kMaxRange: nothing but a read was done
      (void)cudaGetLastError();
      return unimplemented("the keys' range passes 2^32.");
    }
    return Failure(device, "ordering rows by key");
  }
  if (order.groups > max_groups) {
    return absl::ResourceExhaustedError(absl::StrCat("the keys make ", order.groups, " groups, more than ", max_groups,
                                                     " (the server's --max_groups)."));
  }
  scratch = StreamBuffer();  // given back before the columns are gathered
  auto out = std::make_unique<CudaGroupOrder>(device, std::move(stream), std::move(order_rows), rows);
  out->groups = order.groups;
  out->keys = std::move(order.keys);
  out->offsets = std::make_shared<const std::vector<std::uint64_t>>(std::move(order.offsets));
  return out;
}

absl::StatusOr<KeyedSums> SumByKeyOnDevice(const Extent& keys, DType key_dtype, const Extent& values, DType dtype,
                                           std::uint64_t rows, std::uint64_t max_groups, const DevicePool& pool) {
  const auto unimplemented = [](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("no direct device group-by: ", why));
  };
  if (keys.placement.memory != Memory::kDevice || values.placement != keys.placement) {
    return unimplemented("keys and values are not on one GPU.");
  }
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) return unimplemented("values are not float32 or float64.");
  if (!kernels::GroupKeysSupported(key_dtype)) return unimplemented(absl::StrCat(rules::Name(key_dtype), " keys."));
  if (rows == 0 || rows >= (std::uint64_t{1} << 31)) return unimplemented("1 to 2^31 - 1 rows.");
  const int device = keys.placement.device;
  if (!pool.Uses(device)) return unimplemented(absl::StrCat("GPU ", device, " is not one of the devices in use."));
  if (absl::Status health = pool.DeviceHealth(device); !health.ok()) return health;
  ScopedDevice on(device);
  std::size_t scratch_bytes = 0;
  if (kernels::DenseGroupScratchBytes(kernels::kMaxDenseRange, &scratch_bytes) != cudaSuccess) {
    return Failure(device, "sizing scratch");
  }
  if (KeepPoolMemory(device) != cudaSuccess) {
    const std::string where = LastErrorWhere();
    (void)cudaGetLastError();
    return unimplemented(absl::StrCat("GPU ", device, "'s memory pool: ", where));
  }
  Stream stream;
  if (Stream::Create(&stream) != cudaSuccess) return Failure(device, "creating a stream");
  StreamBuffer scratch;
  if (StreamBuffer::Create(scratch_bytes, stream.view(), &scratch) != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("GPU ", device, " has no room for the group-by's ", scratch_bytes,
                                                     " bytes of scratch."));
  }
  kernels::DenseGroups dense;
  const kernels::GroupKeys k{key_dtype, keys.bytes.data(), rows};
  const kernels::DenseValues v{dtype, values.bytes.data()};
  if (const cudaError_t e =
          kernels::SumByKey(k, v, kernels::kMaxDenseRange, scratch.data(), scratch.size(), stream.get(), &dense);
      e != cudaSuccess) {
    if (e == cudaErrorInvalidValue) {  // keys spread past the direct path's range: only the range was read
      (void)cudaGetLastError();
      return unimplemented("the keys' range passes the direct path's.");
    }
    return Failure(device, "summing by key");
  }
  if (dense.groups > max_groups) {
    return absl::ResourceExhaustedError(absl::StrCat("the keys make ", dense.groups, " groups, more than ", max_groups,
                                                     " (the server's --max_groups)."));
  }
  KeyedSums out;
  out.groups = dense.groups;
  out.keys = std::move(dense.keys);
  out.count = std::move(dense.count);
  out.nan = std::move(dense.nan);
  out.infinities = std::move(dense.infinities);
  out.sum = std::move(dense.sum);
  out.min = std::move(dense.min);
  out.max = std::move(dense.max);
  return out;
}

}  // namespace tally::cuda
