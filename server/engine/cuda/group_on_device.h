// Backend::OrderByKeyOnDevice for the cuda backend: tally/kernels/group.h's
// order of rows by key on the GPU holding the key column, with the order
// and each gathered column in that device's stream-ordered memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/cuda/device_pool.h"
#include "server/engine/device_grouping.h"

namespace tally::cpu {
class ThreadPool;
}

namespace tally::cuda {

[[nodiscard]] absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> OrderByKeyOnDevice(const Extent& keys, DType dtype,
                                                                                 std::uint64_t rows,
                                                                                 std::uint64_t max_groups,
                                                                                 const DevicePool& pool);

// Backend::NumberKeysOnDevice for the cuda backend: the keys' bounds
// (kernels::BoundsOfKeys), then kernels::NumberKeysByHash where the range
// passes EnginePolicy::kHashKeysPastRangeBits.
[[nodiscard]] absl::StatusOr<NumberedKeyColumn> NumberKeysOnDevice(const Extent& keys, DType dtype,
                                                                  std::uint64_t rows, std::uint64_t max_groups,
                                                                  const DevicePool& pool);

// Backend::SumByKeyOnDevice for the cuda backend: the keys' range and the
// values' magnitude from `facts` where both columns know them, else one
// read of both (kernels::SpreadOfKeys), left in `facts` for the next
// request; then kernels::SumByKey and the groups' `arrays` copied back, by
// `copiers`' idle participants where it is not null (CopyAllToHost).
[[nodiscard]] absl::StatusOr<KeyedSums> SumByKeyOnDevice(const Extent& keys, DType key_dtype, const Extent& values,
                                                        DType dtype, std::uint64_t rows, std::uint64_t max_groups,
                                                        DirectFacts facts, KeyedArrays arrays,
                                                        const DevicePool& pool, cpu::ThreadPool* copiers);

// Backend::CombineKeysOnDevice for the cuda backend: the key columns' ranges
// (one read each), then the combined column in the keys' device's
// stream-ordered memory. UNIMPLEMENTED where the ranges' product passes
// 2^32 (the device's order takes no wider keys).
[[nodiscard]] absl::StatusOr<CombinedKeyColumn> CombineKeysOnDevice(std::span<const Extent> keys,
                                                                   std::span<const DType> dtypes, std::uint64_t rows,
                                                                   const DevicePool& pool);

// Backend::CopyToDevice for the cuda backend: the columns copied onto one
// healthy GPU in use (the GPUs taken in turn), each in that device's
// stream-ordered memory. UNIMPLEMENTED under
// EnginePolicy::kMinRowsToGroupOnDevice rows.
[[nodiscard]] absl::StatusOr<std::vector<std::unique_ptr<DeviceColumn>>> CopyColumnsToDevice(
    std::span<const std::span<const std::byte>> columns, std::uint64_t rows, const DevicePool& pool);

}  // namespace tally::cuda
