// The router above the backends for the functions whose state the registry
// keeps (rules/agg/state.h: quantiles, top-k, sketches, distinct counts):
// it wraps the server's backend, hands the rest of a plan to it and runs
// those functions' own steps on the host over the same bytes
// (state_reduction.h), then answers the plan in order. Device bytes reach
// those steps through the wrapped backend's CopyToHost.
#pragma once

#include <cstdint>
#include <memory>

#include "server/engine/backend.h"

namespace tally {

// `max_holistic_bytes`: --max_holistic_bytes, what every request's
// holistic states may hold together.
std::unique_ptr<Backend> MakeFunctionRouter(std::unique_ptr<Backend> inner, std::uint64_t max_holistic_bytes);

}  // namespace tally
