// The exact float sum pass's entry point for the host API (api.cc), defined
// in exact_sum.cu. Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "grid/dispatch.h"
#include "tally/kernels/aggregate.h"

namespace tally::kernels::detail {

// rules::ExactSum's digits, then the NaN, +inf and -inf counts and the
// "other than -0.0" flag (ResultView::ExactSum reads them).
inline constexpr std::size_t kExactSumStateBytes = (68 + 4) * 8;

// The float32 or float64 chunk's elements (NaNs skipped when `skip_nan`)
// added exactly into `state`, which the chunk at offset 0 starts.
cudaError_t LaunchExactSum(const AggregatePlan& plan, const void* chunk, std::uint64_t n, std::uint64_t offset,
                           bool skip_nan, void* state, const DeviceInfo& dev, cudaStream_t stream);

}  // namespace tally::kernels::detail
