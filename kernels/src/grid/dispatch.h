// The per-dtype entry points the host API dispatches to (one place, through
// rules::VisitDType in api.cc); defined in aggregate_kernels.cuh and
// instantiated once per dtype in aggregate_<dtype>.cu. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tally/kernels/aggregate.h"

namespace tally::kernels::detail {

struct DeviceInfo {
  int sms;
};

template <rules::DType D>
cudaError_t ScratchBytesFor(const AggregatePlan& plan, std::uint64_t max_chunk,
                            const DeviceInfo& dev, std::size_t* bytes);

template <rules::DType D>
cudaError_t LaunchAccumulate(const AggregatePlan& plan, const ResultLayout& lay, const void* chunk,
                             std::uint64_t n, std::uint64_t offset, void* state, void* scratch,
                             std::size_t scratch_bytes, const DeviceInfo& dev, cudaStream_t stream);

}  // namespace tally::kernels::detail
