// One request on the CPU backend: the streaming state machine that cuts the
// array into fixed blocks and chunks, and the per-row results.
#pragma once

#include <memory>
#include <string>

#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/cpu/thread_pool.h"

namespace tally::cpu {

// `pool` must outlive the reduction; `device` is reported in the result.
std::unique_ptr<Reduction> MakeReduction(const AggregationPlan& plan, ThreadPool* pool,
                                         std::string device);

}  // namespace tally::cpu
