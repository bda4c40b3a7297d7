#include "server/engine/cuda/group_on_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <memory>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "server/core/group_request.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/staged_copy.h"
#include "server/engine/cuda/stream_buffer.h"
#include "server/engine/cuda/tuning.h"
#include "server/engine/huge_pages.h"
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

// A column this backend made in device memory (a host column's copy, the
// combined keys), with the stream it was made on (declared first, so that
// it outlives the buffer given back on it).
class CopiedColumn final : public DeviceColumn {
 public:
  CopiedColumn(Stream stream, StreamBuffer bytes, int device)
      : stream_(std::move(stream)), bytes_(std::move(bytes)), device_(device) {}
  Extent extent() const override {
    return Extent{std::span<const std::byte>(bytes_.data(), bytes_.size()), Placement::Device(device_)};
  }

 private:
  Stream stream_;
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

  absl::StatusOr<std::unique_ptr<DeviceColumn>> GroupNumbers() override {
    ScopedDevice on(device_);
    StreamBuffer starts, out;
    if (StreamBuffer::Create(offsets->size() * sizeof(std::uint64_t), stream_.view(), &starts) != cudaSuccess ||
        StreamBuffer::Create(count_ * sizeof(std::uint32_t), stream_.view(), &out) != cudaSuccess) {
      return Failure(device_, "allocating the rows' group numbers");
    }
    if (cudaMemcpyAsync(starts.data(), offsets->data(), offsets->size() * sizeof(std::uint64_t),
                        cudaMemcpyHostToDevice, stream_.get()) != cudaSuccess ||
        kernels::NumberRows(reinterpret_cast<const std::uint32_t*>(rows_.data()), count_,
                            reinterpret_cast<const std::uint64_t*>(starts.data()), groups,
                            reinterpret_cast<std::uint32_t*>(out.data()), stream_.get()) != cudaSuccess ||
        cudaStreamSynchronize(stream_.get()) != cudaSuccess) {
      return Failure(device_, "numbering the rows by group");
    }
    return std::make_unique<GatheredColumn>(std::move(out), device_);
  }

 private:
  int device_;
  Stream stream_;
  StreamBuffer rows_;
  std::uint64_t count_;
};

// What the device passes check and set up first: the keys on a GPU in
// use and healthy, a key dtype the pass takes (`keys_taken`: the order
// takes every dtype, the direct pass and the combination the integers and
// bool) and a row count the kernels take, the pool
// that lends their scratch kept, and a stream of their own. UNIMPLEMENTED
// (the engine groups another way) for keys these passes do not take.
struct DevicePass {
  int device = 0;
  Stream stream;
};

absl::StatusOr<DevicePass> StartDevicePass(const Extent& keys, DType key_dtype, std::uint64_t rows,
                                           const DevicePool& pool, bool (*keys_taken)(DType)) {
  const auto unimplemented = [](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("no device grouping: ", why));
  };
  if (keys.placement.memory != Memory::kDevice) return unimplemented("the keys are not in GPU memory.");
  DevicePass pass;
  pass.device = keys.placement.device;
  if (!pool.Uses(pass.device)) {
    return unimplemented(absl::StrCat("GPU ", pass.device, " is not one of the devices in use."));
  }
  if (absl::Status health = pool.DeviceHealth(pass.device); !health.ok()) return health;
  if (!keys_taken(key_dtype)) return unimplemented(absl::StrCat(rules::Name(key_dtype), " keys."));
  if (rows == 0 || rows >= (std::uint64_t{1} << 31)) return unimplemented("1 to 2^31 - 1 rows.");
  ScopedDevice on(pass.device);
  if (KeepPoolMemory(pass.device) != cudaSuccess) {
    const std::string where = LastErrorWhere();
    (void)cudaGetLastError();
    return unimplemented(absl::StrCat("GPU ", pass.device, "'s memory pool: ", where));
  }
  if (Stream::Create(&pass.stream) != cudaSuccess) return Failure(pass.device, "creating a stream");
  return pass;
}

// A device pass (StartDevicePass) that also read its keys' bounds
// (kernels::BoundsOfKeys), as the order and the hash numbering both start.
struct BoundedPass {
  DevicePass pass;
  kernels::GroupKeys keys;
  kernels::KeyBounds bounds;
};

absl::StatusOr<BoundedPass> StartBoundedPass(const Extent& keys, DType dtype, std::uint64_t rows,
                                             const DevicePool& pool, bool (*keys_taken)(DType)) {
  absl::StatusOr<DevicePass> pass = StartDevicePass(keys, dtype, rows, pool, keys_taken);
  if (!pass.ok()) return pass.status();
  BoundedPass out{.pass = *std::move(pass), .keys = {dtype, keys.bytes.data(), rows}, .bounds = {}};
  const int device = out.pass.device;
  ScopedDevice on(device);
  StreamBuffer small;
  if (StreamBuffer::Create(kernels::kKeyBoundsScratchBytes, out.pass.stream.view(), &small) != cudaSuccess) {
    return Failure(device, "allocating the key range's scratch");
  }
  if (kernels::BoundsOfKeys(out.keys, small.data(), out.pass.stream.get(), &out.bounds) != cudaSuccess) {
    return Failure(device, "reading the keys' range");
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> OrderByKeyOnDevice(const Extent& keys, DType dtype,
                                                                     std::uint64_t rows, std::uint64_t max_groups,
                                                                     const DevicePool& pool) {
  absl::StatusOr<BoundedPass> started = StartBoundedPass(keys, dtype, rows, pool, kernels::OrderedKeysSupported);
  if (!started.ok()) return started.status();
  const int device = started->pass.device;
  Stream& stream = started->pass.stream;
  ScopedDevice on(device);
  const kernels::GroupKeys& k = started->keys;
  const kernels::KeyBounds& bounds = started->bounds;
  std::size_t scratch_bytes = 0;
  if (kernels::GroupByKeyScratchBytes(k, bounds, &scratch_bytes) != cudaSuccess) return Failure(device, "sizing scratch");
  StreamBuffer scratch, order_rows;
  if (StreamBuffer::Create(scratch_bytes, stream.view(), &scratch) != cudaSuccess ||
      StreamBuffer::Create(rows * sizeof(std::uint32_t), stream.view(), &order_rows) != cudaSuccess) {
    return absl::ResourceExhaustedError(absl::StrCat("GPU ", device, " has no room for the group-by's ",
                                                     scratch_bytes + rows * 4, " bytes of scratch."));
  }
  kernels::KeyOrder order;
  if (kernels::OrderByKey(k, bounds, scratch.data(), scratch.size(), stream.get(),
                          reinterpret_cast<std::uint32_t*>(order_rows.data()), &order) != cudaSuccess) {
    return Failure(device, "ordering rows by key");
  }
  // The NaN group counts only where the engine keeps it (dropna=False;
  // RunOnDevice checks that).
  if (order.groups - (order.nan_group ? 1 : 0) > max_groups) return TooManyGroups(max_groups);
  scratch = StreamBuffer();  // given back before the columns are gathered
  auto out = std::make_unique<CudaGroupOrder>(device, std::move(stream), std::move(order_rows), rows);
  out->groups = order.groups;
  out->keys = std::move(order.keys);
  out->offsets = std::make_shared<const std::vector<std::uint64_t>>(std::move(order.offsets));
  out->nan_group = order.nan_group;
  return out;
}

absl::StatusOr<NumberedKeyColumn> NumberKeysOnDevice(const Extent& keys, DType dtype, std::uint64_t rows,
                                                     std::uint64_t max_groups, const DevicePool& pool) {
  absl::StatusOr<BoundedPass> started = StartBoundedPass(keys, dtype, rows, pool, kernels::GroupKeysSupported);
  if (!started.ok()) return started.status();
  const int device = started->pass.device;
  Stream& stream = started->pass.stream;
  ScopedDevice on(device);
  const kernels::GroupKeys& k = started->keys;
  const kernels::KeyBounds& bounds = started->bounds;
  if (bounds.range != 0 && std::bit_width(bounds.range - 1) <= EnginePolicy::kHashKeysPastRangeBits) {
    return absl::UnimplementedError("no hashed keys: their range is short enough to sort.");
  }
  const std::uint64_t most = std::min({rows, max_groups, kernels::kMaxHashedGroups});
  std::size_t scratch_bytes = 0;
  if (most == 0 || kernels::HashKeysScratchBytes(k, most, &scratch_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnimplementedError("no hashed keys for these keys.");
  }
  StreamBuffer scratch, numbers;
  if (StreamBuffer::Create(scratch_bytes, stream.view(), &scratch) != cudaSuccess ||
      StreamBuffer::Create(rows * sizeof(std::uint32_t), stream.view(), &numbers) != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnimplementedError(absl::StrCat("no room on GPU ", device, " for the hash table's ", scratch_bytes,
                                                 " bytes."));
  }
  kernels::HashedKeys hashed;
  if (kernels::NumberKeysByHash(k, most, scratch.data(), scratch.size(), stream.get(),
                                reinterpret_cast<std::uint32_t*>(numbers.data()), &hashed) != cudaSuccess) {
    return Failure(device, "numbering keys by hash");
  }
  if (hashed.too_many) return absl::UnimplementedError(absl::StrCat("no hashed keys: more than ", most, " groups."));
  scratch = StreamBuffer();
  NumberedKeyColumn out;
  out.keys = std::move(hashed.keys);
  out.column = std::make_unique<CopiedColumn>(std::move(started->pass.stream), std::move(numbers), device);
  return out;
}

absl::StatusOr<KeyedSums> SumByKeyOnDevice(const Extent& keys, DType key_dtype, const Extent& values, DType dtype,
                                           std::uint64_t rows, std::uint64_t max_groups, DirectFacts facts,
                                           KeyedArrays arrays, const DevicePool& pool, cpu::ThreadPool* copiers) {
  const auto unimplemented = [](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("no direct device group-by: ", why));
  };
  if (values.placement != keys.placement) return unimplemented("keys and values are not on one GPU.");
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) return unimplemented("values are not float32 or float64.");
  const auto entered = std::chrono::steady_clock::now();
  absl::StatusOr<DevicePass> pass = StartDevicePass(keys, key_dtype, rows, pool, kernels::GroupKeysSupported);
  if (!pass.ok()) return pass.status();
  const int device = pass->device;
  Stream& stream = pass->stream;
  ScopedDevice on(device);
  const auto began = std::chrono::steady_clock::now();
  const kernels::GroupKeys k{key_dtype, keys.bytes.data(), rows};
  const kernels::DenseValues v{dtype, values.bytes.data()};
  kernels::KeySpread spread;
  const std::optional<ColumnFacts::KeyRange> known_keys =
      facts.keys != nullptr ? facts.keys->key_range() : std::nullopt;
  const std::optional<std::uint64_t> known_largest =
      facts.values != nullptr ? facts.values->largest_magnitude() : std::nullopt;
  const bool spread_known = known_keys.has_value() && known_largest.has_value();
  if (spread_known) {
    spread = kernels::KeySpread{.lowest = known_keys->lowest, .range = known_keys->range, .largest = *known_largest};
  } else {
    StreamBuffer small;
    if (StreamBuffer::Create(kernels::kKeySpreadScratchBytes, stream.view(), &small) != cudaSuccess) {
      return Failure(device, "allocating the key range's scratch");
    }
    if (kernels::SpreadOfKeys(k, v, small.data(), stream.get(), &spread) != cudaSuccess) {
      return Failure(device, "reading the keys' range");
    }
    if (facts.keys != nullptr) facts.keys->set_key_range({.lowest = spread.lowest, .range = spread.range});
    if (facts.values != nullptr) facts.values->set_largest_magnitude(spread.largest);
  }
  std::size_t scratch_bytes = 0;
  if (kernels::DenseGroupScratchBytes(k, dtype, spread, &scratch_bytes) != cudaSuccess) {
    return unimplemented("the keys spread too wide for the direct path.");
  }
  StreamBuffer scratch;
  if (StreamBuffer::Create(scratch_bytes, stream.view(), &scratch) != cudaSuccess) {
    (void)cudaGetLastError();
    return unimplemented(absl::StrCat("no room on GPU ", device, " for the direct path's ", scratch_bytes, " bytes."));
  }
  kernels::DenseGroups dense;
  if (kernels::SumByKey(k, v, spread, scratch.data(), scratch.size(), stream.get(), &dense) != cudaSuccess) {
    return Failure(device, "summing by key");
  }
  if (dense.groups > max_groups) return TooManyGroups(max_groups);
  // The groups' arrays asked for into vectors advised for huge pages before
  // their first touch (at 16M groups, 640 MB: 4 KiB faults were most of
  // the copy), through pinned staging.
  KeyedSums out;
  out.groups = dense.groups;
  out.spread_known = spread_known;
  std::vector<HostCopy> copies;
  std::vector<std::unique_ptr<HostTarget>> targets;
  const auto back = [&](auto& to, const auto* from, std::uint64_t n) {
    using T = typename std::decay_t<decltype(to)>::value_type;
    ReserveHuge(to, n);
    targets.push_back(std::make_unique<VectorTarget<T>>(to));
    copies.push_back(HostCopy{from, n * sizeof(T), targets.back().get()});
  };
  const std::uint64_t g = dense.groups;
  const bool special = dense.any_nan || dense.any_infinity;  // the answers made group by group
  back(out.keys, dense.keys, g * rules::SizeOf(key_dtype));
  back(out.starts, dense.starts, g + 1);
  if (arrays.count || special) back(out.count, dense.count, g);
  if (arrays.sum || special) back(out.sum, dense.sum, g);
  if (arrays.min) back(out.min, dense.min, g);
  if (arrays.max) back(out.max, dense.max, g);
  if (arrays.mean) back(out.mean, dense.mean, g);
  if (dense.any_nan) back(out.nan, dense.nan, g);
  if (dense.any_infinity) back(out.infinities, dense.infinities, g);
  const auto summed = std::chrono::steady_clock::now();
  if (absl::Status copied = CopyAllToHost(pool.pinned(device), stream.get(), copies, copiers); !copied.ok()) {
    return copied;
  }
  std::uint64_t bytes = 0;
  for (const HostCopy& c : copies) bytes += c.bytes;
  spdlog::trace("cuda direct pass: {} groups, {} bytes back: set up {:.3f} ms, passes {:.3f} ms, copied back {:.3f} ms",
                g, bytes, std::chrono::duration<double, std::milli>(began - entered).count(),
                std::chrono::duration<double, std::milli>(summed - began).count(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - summed).count());
  return out;
}

absl::StatusOr<CombinedKeyColumn> CombineKeysOnDevice(std::span<const Extent> keys, std::span<const DType> dtypes,
                                                      std::uint64_t rows, const DevicePool& pool) {
  if (keys.empty() || keys.size() != dtypes.size() || keys.size() > kernels::kMaxCombinedColumns) {
    return absl::UnimplementedError("no combined keys: 1 to 8 key columns.");
  }
  for (const Extent& k : keys) {
    if (k.placement != keys[0].placement) return absl::UnimplementedError("no combined keys: keys on several devices.");
  }
  for (const DType d : dtypes) {
    if (!kernels::GroupKeysSupported(d)) {
      return absl::UnimplementedError(absl::StrCat("no combined keys: ", rules::Name(d), " keys."));
    }
  }
  absl::StatusOr<DevicePass> pass = StartDevicePass(keys[0], dtypes[0], rows, pool, kernels::GroupKeysSupported);
  if (!pass.ok()) return pass.status();
  const int device = pass->device;
  Stream& stream = pass->stream;
  ScopedDevice on(device);
  std::vector<kernels::GroupKeys> columns;
  for (std::size_t c = 0; c < keys.size(); ++c) columns.push_back({dtypes[c], keys[c].bytes.data(), rows});
  kernels::KeyColumnsSpread spread;
  {
    StreamBuffer small;
    if (StreamBuffer::Create(kernels::kKeyColumnsScratchBytes, stream.view(), &small) != cudaSuccess) {
      return Failure(device, "allocating the key columns' range scratch");
    }
    if (kernels::SpreadOfKeyColumns(columns, small.data(), stream.get(), &spread) != cudaSuccess) {
      return Failure(device, "reading the key columns' ranges");
    }
  }
  // The order by key takes ranges up to 2^32; wider combinations are the
  // host's.
  if (!spread.fits || spread.combined_range > (std::uint64_t{1} << 32)) {
    return absl::UnimplementedError("no combined keys: the key columns' ranges multiply past 2^32.");
  }
  StreamBuffer combined;
  if (StreamBuffer::Create(rows * sizeof(std::uint64_t), stream.view(), &combined) != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnimplementedError(absl::StrCat("no room on GPU ", device, " for ", rows * 8,
                                                 " bytes of combined keys."));
  }
  if (kernels::CombineKeys(columns, spread, reinterpret_cast<std::uint64_t*>(combined.data()), stream.get()) !=
          cudaSuccess ||
      cudaStreamSynchronize(stream.get()) != cudaSuccess) {
    return Failure(device, "combining the key columns");
  }
  CombinedKeyColumn out;
  out.lowest.assign(spread.lowest, spread.lowest + keys.size());
  out.range.assign(spread.range, spread.range + keys.size());
  out.column = std::make_unique<CopiedColumn>(std::move(stream), std::move(combined), device);
  return out;
}

absl::StatusOr<std::vector<std::unique_ptr<DeviceColumn>>> CopyColumnsToDevice(
    std::span<const std::span<const std::byte>> columns, std::uint64_t rows, const DevicePool& pool) {
  if (rows < EnginePolicy::kMinRowsToGroupOnDevice) {
    return absl::UnimplementedError(absl::StrCat(rows, " rows: grouped on the host."));
  }
  // The GPUs in turn, so that concurrent tables spread over them.
  static std::atomic<std::uint64_t> next{0};
  const std::vector<int>& ordinals = pool.ordinals();
  if (ordinals.empty()) return absl::UnimplementedError("no GPU in use.");
  int device = -1;
  for (std::size_t tried = 0; tried < ordinals.size() && device < 0; ++tried) {
    const int d = ordinals[next.fetch_add(1, std::memory_order_relaxed) % ordinals.size()];
    if (pool.DeviceHealth(d).ok()) device = d;
  }
  if (device < 0) return absl::UnavailableError("no healthy GPU to group on.");
  ScopedDevice on(device);
  if (KeepPoolMemory(device) != cudaSuccess) return Failure(device, "keeping its memory pool");
  std::vector<std::unique_ptr<DeviceColumn>> out;
  for (const std::span<const std::byte> bytes : columns) {
    Stream stream;
    StreamBuffer copy;
    if (Stream::Create(&stream) != cudaSuccess) return Failure(device, "creating a stream");
    if (StreamBuffer::Create(bytes.size(), stream.view(), &copy) != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat("GPU ", device, " has no room for a ", bytes.size(),
                                                       "-byte group-by column."));
    }
    if (cudaMemcpyAsync(copy.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream.get()) !=
            cudaSuccess ||
        cudaStreamSynchronize(stream.get()) != cudaSuccess) {
      return Failure(device, "copying a group-by column to the device");
    }
    out.push_back(std::make_unique<CopiedColumn>(std::move(stream), std::move(copy), device));
  }
  return out;
}

}  // namespace tally::cuda
