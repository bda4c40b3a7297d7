// The functions whose state the registry keeps, on the GPU that holds their
// array (Backend::StartKeptOnDevice): quantile, nanquantile, median and
// nanmedian by exact radix selection, topk and bottomk, hll and ddsketch, through
// tally/kernels/select.h; each answer built by rules/agg's own code from
// what the device selected, so that it is the host steps' answer.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/source.h"

namespace tally::cuda {

class DevicePool;

// A Reduction of `plan` (functions the registry keeps only, none asking for
// its partial state) over GPU memory at `from`. UNIMPLEMENTED, so that the
// router reads the bytes on the host instead, for what the device passes do
// not cover: segmented or masked arrays, empty ones or of 2^32 elements and
// more, dtypes other than float32, float64, int32, int64, uint32 and uint64,
// count_distinct and mode, and scratch the GPU cannot spare.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Reduction>> StartKeptOnDevice(const AggregationPlan& plan,
                                                                          const Placement& from,
                                                                          const DevicePool& pool);

}  // namespace tally::cuda
