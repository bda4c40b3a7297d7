// The fold pass's entry points for the host API (api.cc), defined in
// fold_product.cu and fold_nonzero.cu. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "grid/dispatch.h"
#include "tally/kernels/aggregate.h"

namespace tally::kernels::detail {

// Scratch of the fold pass over chunks of up to max_chunk elements.
std::size_t FoldScratch(const AggregatePlan& plan, std::uint64_t max_chunk);

// numpy.prod of the chunk's elements into `state` (ResultLayout::product).
template <rules::DType D>
cudaError_t LaunchProduct(const AggregatePlan& plan, const void* chunk, std::uint64_t n, std::uint64_t offset,
                          void* state, void* scratch, std::size_t scratch_bytes, const DeviceInfo& dev,
                          cudaStream_t stream);

// numpy.count_nonzero of the chunk's elements into `state` (uint64 per row,
// ResultLayout::nonzero), for any dtype.
cudaError_t LaunchNonzero(const AggregatePlan& plan, const void* chunk, std::uint64_t n, std::uint64_t offset,
                          void* state, void* scratch, std::size_t scratch_bytes, const DeviceInfo& dev,
                          cudaStream_t stream);

}  // namespace tally::kernels::detail
