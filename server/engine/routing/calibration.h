// The short self-calibration behind the routing model (cost_model.h): a few
// requests of known sizes and ops, timed through each path at start-up
// (about 0.1-0.3 s), before the server takes requests.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "server/engine/backend.h"
#include "server/engine/routing/cost_model.h"

namespace tally::routing {

using StartFn = std::function<absl::StatusOr<std::unique_ptr<Reduction>>(const AggregationPlan&)>;

// Measures CostParams: the CPU path through `cpu` (which has `cpu_threads`
// threads), the GPU path through `gpu` (a Reduction on a GPU lane whatever
// the plan's size; `gpu_lanes` of them, so that requests run together take
// no more). Float32 arrays, fed as 64 KiB runs the way gRPC delivers a
// message. An error of either path is returned.
absl::StatusOr<CostParams> Calibrate(const StartFn& cpu, int cpu_threads, const StartFn& gpu, int gpu_lanes);

}  // namespace tally::routing
