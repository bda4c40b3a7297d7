// The exact pass's entry points for the host API (api.cc): whole arrays
// in exact_sum.cu, rows in exact_rows.cu (ExactPass, which the fused
// kernels also take, is in grid/dispatch.h). Plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "grid/dispatch.h"
#include "tally/kernels/aggregate.h"

namespace tally::kernels::detail {

// One exact state's bytes (one a row): rules::ExactSum's digits, then the
// words ResultView reads (kExact*).
inline constexpr std::size_t kExactStateBytes = ResultLayout::kExactStateWords * 8;

// Elements one launch of the exact pass adds at most over a whole array:
// below 2^(28 + 1) values spilled (a float64 square spills two), each part
// below 2^32, so a digit takes below 2^61 a launch, and LaunchCarryRow
// carries between launches. The fused kernels take the pass inside them
// (ExactPass, grid/dispatch.h) for chunks of at most this many elements.
inline constexpr std::uint64_t kMaxExactLaunchElements = std::uint64_t{1} << 28;

// The states of a chunk's exact pass readied: started (zeroed) by the
// chunk at offset 0, carried (LaunchCarryRow) before any later one adds.
// Before the chunk's exact pass, in the fused kernels or RunExact.
cudaError_t StartExact(const AggregatePlan& plan, const ExactPass& pass, std::uint64_t offset, cudaStream_t stream);

// The float chunk's elements (NaNs counted, not added), and their squares
// where asked, added exactly into the states StartExact readied; rows
// (plan.row_length > 0) each into their own.
cudaError_t RunExact(const AggregatePlan& plan, const ExactPass& pass, const void* chunk, std::uint64_t n,
                     std::uint64_t offset, const DeviceInfo& dev, cudaStream_t stream);

}  // namespace tally::kernels::detail

namespace tally::kernels::detail {
// The row a launch continues (one that earlier launches added to) carried
// before the launch adds more (rules::ExactSum's Carry: each digit's excess
// over 32 bits into the next). A launch adds below 2^61.1 to a digit (each
// kernel's bound), a carried digit holds below 2^32, so every digit stays
// below 2^62, which ResultView's AddDigits takes; a request read in one
// launch (resident data) carries nothing.
cudaError_t LaunchCarryRow(const ExactPass& pass, std::uint64_t row, cudaStream_t stream);

// RunExact's rows.
cudaError_t LaunchExactRows(const AggregatePlan& plan, const ExactPass& pass, const void* chunk, std::uint64_t n,
                            std::uint64_t offset, const DeviceInfo& dev, cudaStream_t stream);
}  // namespace tally::kernels::detail
