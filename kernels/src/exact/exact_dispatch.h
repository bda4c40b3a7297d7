// The exact pass's entry points for the host API (api.cc): whole arrays
// in exact_sum.cu, rows in exact_rows.cu. Plain C++.
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

// Where a plan's exact pass adds: the elements' state, and the squares'
// (null: not asked for); the validity mask (null: none).
struct ExactPass {
  void* sum_state = nullptr;
  void* squares_state = nullptr;
  const std::uint32_t* validity = nullptr;
};

// The float chunk's elements (NaNs counted, not added), and their squares
// where asked, added exactly into the states, which the chunk at offset 0
// starts; rows (plan.row_length > 0) each into their own.
cudaError_t LaunchExact(const AggregatePlan& plan, const ExactPass& pass, const void* chunk, std::uint64_t n,
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

// LaunchExact's rows, after the states were started.
cudaError_t LaunchExactRows(const AggregatePlan& plan, const ExactPass& pass, const void* chunk, std::uint64_t n,
                            std::uint64_t offset, const DeviceInfo& dev, cudaStream_t stream);
}  // namespace tally::kernels::detail
