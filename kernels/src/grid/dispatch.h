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

// Where a plan's exact pass adds (exact/exact_dispatch.h): the elements'
// state, and the squares' (null: not asked for); the validity mask (null:
// none). `fused` is set by LaunchAccumulate when the fused kernels took the
// pass inside them, reading the chunk once for both.
struct ExactPass {
  void* sum_state = nullptr;
  void* squares_state = nullptr;
  const std::uint32_t* validity = nullptr;
  bool fused = false;
};

template <rules::DType D>
cudaError_t ScratchBytesFor(const AggregatePlan& plan, std::uint64_t max_chunk,
                            const DeviceInfo& dev, std::size_t* bytes);

// `exact` (null: none): the plan's exact pass, which the kernels take
// inside where they can (unmasked float32 and float64 whole arrays, the
// plain slice kernels, chunks of at most kMaxExactLaunchElements), setting
// exact->fused; its states readied (StartExact) before.
template <rules::DType D>
cudaError_t LaunchAccumulate(const AggregatePlan& plan, const ResultLayout& lay, const void* chunk,
                             std::uint64_t n, std::uint64_t offset, void* state, void* scratch,
                             std::size_t scratch_bytes, const DeviceInfo& dev, cudaStream_t stream,
                             ExactPass* exact);

}  // namespace tally::kernels::detail
