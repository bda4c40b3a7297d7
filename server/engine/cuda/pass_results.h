// A finished request's answers, read from its passes' result states (the
// bytes the lane copied back from the device): the rows only the data can
// refuse, then every op's per-row values through the finishing step the
// backends share (server/engine/finish.h).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "server/core/request.h"
#include "server/engine/cuda/cuda_reduction.h"

namespace tally::cuda {

// A row's answer that only the data can refuse: an op with no value on an
// empty array over a row whose elements are all masked out, or
// nanargmin/nanargmax over an all-NaN row (numpy raises for both).
// `results` holds every pass's result state at its state_offset.
[[nodiscard]] absl::Status CheckRowsHaveValues(const AggregationPlan& plan, const PassPlan& passes,
                                               const std::byte* results);

// Every op's per-row results (a NaN-skipping op's partial state covers the
// elements that are not NaN).
AggregationResult CollectResults(const AggregationPlan& plan, const PassPlan& passes, const std::byte* results);

}  // namespace tally::cuda
