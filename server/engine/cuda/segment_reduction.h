// Variable-length segments (ArraySpec::offsets) over bytes already on a GPU
// (a resident dataset, a CUDA IPC region): one launch of the segmented
// kernels (tally/kernels/segmented.h) over the whole array. Host bytes with
// offsets go to the cpu backend instead (CudaBackend::Start).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/cuda/cuda_reduction.h"
#include "server/engine/cuda/device_pool.h"

namespace tally::cuda {

// Whether the segmented kernels compute every op of `plan`: sum, min, max,
// mean and count, as values or partial states.
bool SegmentKernelsCompute(const AggregationPlan& plan);

// A reduction of `plan` (with offsets, every op one the kernels compute) on
// the lane `lease` holds. It takes the array's device bytes, on the lane's
// GPU, in one Consume (or several contiguous ones) and reduces them at
// Finish. The offsets and the results take the lane's state memory
// (--cuda_max_state_bytes), the kernels' scratch the lane's scratch:
// RESOURCE_EXHAUSTED, saying so, when they do not fit.
absl::StatusOr<std::unique_ptr<Reduction>> MakeSegmentReduction(const AggregationPlan& plan,
                                                               DevicePool::Lease lease, EngineContext* engine);

}  // namespace tally::cuda
