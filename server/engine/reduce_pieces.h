// Reducing an array that lies where the server keeps it: one Extent (a
// region, an unsharded dataset) or several pieces (a dataset's shards, each
// in its own memory, perhaps on different GPUs).
//
// Host pieces go to one Reduction in order, in 64 MiB steps so that a
// cancel stops a read within one: the cpu backend's answer does not depend
// on how its input is pieced, so a sharded host dataset answers bitwise as
// an unsharded one.
//
// Device pieces on more than one shard cannot be read by one Reduction (a
// lane reads its own GPU only). Each piece is cut where the plan's rows
// cross it: the end of a row begun on an earlier piece, the whole rows, and
// the start of a row that goes on in the next piece, each reduced to its
// partial states (rules/partial.h) on a lane of the piece's GPU. The states
// are merged in element order and finished with the rules the backends
// finish with, so:
//   - integers, counts, extremes, indices and histograms are exactly the
//     unsharded answer;
//   - float sums and moments are deterministic for a dataset's shard layout
//     and agree with the unsharded answer to rounding (another merge order).
// Round by round, each GPU with parts left starts its next part if one of
// its lanes is free (the GPUs work side by side), then every started part
// is finished and its lane given back; a round that could start nothing
// waits for a lane holding none. So no query holds one GPU's lane while it
// waits for another's.
#pragma once

#include <functional>
#include <span>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/engine/backend.h"

namespace tally {

// CANCELLED, saying why: the client cancelled or its deadline passed.
absl::Status CancelledByClient();

// `pieces` are the plan's elements in order (their `first`s count from 0
// and together cover plan.array.length). `cancelled` is polled between
// steps (CANCELLED when it says so); `phase` (may be empty) hears "started",
// "consumed" and "finished".
[[nodiscard]] absl::StatusOr<AggregationResult> ReducePieces(Backend& backend, const AggregationPlan& plan,
                                                             std::span<const PlacedPiece> pieces,
                                                             const std::function<bool()>& cancelled,
                                                             const std::function<void(const char*)>& phase = {});

// The merging path alone, whatever the pieces' placement: what ReducePieces
// does with device pieces, open to tests on any backend.
[[nodiscard]] absl::StatusOr<AggregationResult> ReducePiecesByMerging(
    Backend& backend, const AggregationPlan& plan, std::span<const PlacedPiece> pieces,
    const std::function<bool()>& cancelled, const std::function<void(const char*)>& phase = {});

}  // namespace tally
