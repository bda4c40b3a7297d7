// One request on the CUDA backend. The plan becomes one or more kernel
// passes (the fused ops with the first histogram, then one per further
// histogram); every chunk of the array is copied to the device once and
// folded by each pass into its own state.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/cpu/thread_pool.h"
#include "server/engine/cuda/device_pool.h"
#include "tally/kernels/aggregate.h"

namespace tally {
class Metrics;
}

namespace tally::cuda {

// One kernel pass over every chunk, with its state at `state_offset` in the
// lane's state (and the same offset in its pinned result buffer).
struct Pass {
  kernels::AggregatePlan plan;
  kernels::ResultLayout layout;
  std::size_t state_offset = 0;
};

struct PassPlan {
  std::vector<Pass> passes;  // empty when only kCount is asked for, without a mask
  std::vector<int> op_pass;  // per op of the request: its pass; -1 for kCount without a mask
  // A validity mask's words follow the passes' states in the lane's state
  // memory (mask_bytes 0: no mask); the passes read it from there.
  std::size_t mask_offset = 0;
  std::size_t mask_bytes = 0;
  std::size_t state_bytes = 0;
};

// `exact_sums`: float whole arrays' sum and nansum by the exact pass
// (--cuda_exact_sums; kernels::ExactSums).
PassPlan PlanPasses(const AggregationPlan& plan, bool exact_sums);

// The scratch the passes need for chunks of `chunk_elements`, on the
// current device (they run one after another, so the largest).
[[nodiscard]] cudaError_t ScratchNeeded(const PassPlan& passes, std::uint64_t chunk_elements,
                                        std::size_t* bytes);

// What reductions share with their backend.
struct EngineContext {
  DevicePool* devices = nullptr;
  // Threads that fill pinned staging from a message's receive slices in
  // parallel (ConsumeRuns); nullptr: the request's own thread copies alone.
  cpu::ThreadPool* copiers = nullptr;
  std::atomic<Metrics*> metrics{nullptr};
  // When device memory was last read for the metrics (steady clock, ns),
  // per ordinal: cudaMemGetInfo takes the driver's context lock, which on a
  // request of a resident or IPC array (well under a millisecond) was a
  // visible share of the server's time; once per interval is enough for a
  // gauge that is scraped every few seconds.
  static constexpr int kTrackedDevices = 64;
  static constexpr std::int64_t kMemoryReportIntervalNs = 500'000'000;
  std::array<std::atomic<std::int64_t>, kTrackedDevices> memory_reported_ns{};
};

// A kernel's result slot into the member of a partial state's float,
// int64 or uint64 triple that `dtype`'s values take (Scalar's member).
inline void PutScalar(DType dtype, kernels::Scalar x, double& f, std::int64_t& i, std::uint64_t& u) {
  if (rules::IsFloat(dtype)) {
    f = x.f64;
  } else if (rules::IsSigned(dtype)) {
    i = x.i64;
  } else {
    u = x.u64;
  }
}

// A CUDA call on `lane` failed: INTERNAL naming the call (logged); an error
// after which the device's context is unusable also marks it lost.
absl::Status LaneFailure(EngineContext* engine, DeviceLane* lane, cudaError_t err, const char* what);

// `lease` holds a lane of a device in engine->devices; passes fit its state
// and scratch for chunks of the lane's chunk size and for cuts of
// `device_cut` elements (the launch size over bytes already on the device).
// Pinned host and device bytes given to Consume() must stay where they are
// until Finish() returns or the reduction is destroyed: they are read
// asynchronously.
std::unique_ptr<Reduction> MakeCudaReduction(const AggregationPlan& plan, PassPlan passes,
                                             DevicePool::Lease lease, EngineContext* engine,
                                             std::uint64_t device_cut);

}  // namespace tally::cuda
