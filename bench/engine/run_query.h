// One request through a backend in-process, for the engine benches: Start at
// the extent's placement, Consume the whole extent, Finish.
#pragma once

#include "absl/status/statusor.h"
#include "server/engine/backend.h"

namespace tally::bench {

inline absl::StatusOr<AggregationResult> RunQuery(Backend& backend, const AggregationPlan& plan,
                                                  const Extent& extent) {
  absl::StatusOr<std::unique_ptr<Reduction>> r = backend.Start(plan, extent.placement);
  if (!r.ok()) return r.status();
  if (absl::Status s = (*r)->Consume(extent); !s.ok()) return s;
  return (*r)->Finish();
}

}  // namespace tally::bench
