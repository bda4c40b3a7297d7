// Partial states in the C++ client (tally.proto, PartialState): asks for
// them, merges the states of an array's parts and finishes them into the
// values the server would have answered, with the rules the server finishes
// its own results with (tally/rules/partial.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

// `aggregations`, each asking for its partial state; argmin/argmax indices
// in the states are offset by `base_index` (the part's first element in the
// whole array, or in the whole row when segmented).
std::vector<v1::Aggregation> AsPartial(std::vector<v1::Aggregation> aggregations,
                                       std::uint64_t base_index);

// The states of `a`'s elements followed by `b`'s. INVALID_ARGUMENT when
// either is not a partial result, or they answer different aggregations
// (op, ddof, histogram spec), dtypes or row counts, or a version this
// client does not know. The merged result echoes `a`'s aggregation.
[[nodiscard]] absl::StatusOr<v1::AggregationResult> MergePartials(const v1::AggregationResult& a,
                                                                  const v1::AggregationResult& b);

// Every result of `a` merged with the same result of `b` (responses to the
// same aggregations over two parts); the execution is `a`'s.
[[nodiscard]] absl::StatusOr<v1::AggregateResponse> MergeResponses(const v1::AggregateResponse& a,
                                                                   const v1::AggregateResponse& b);

// The values of a partial result, exactly as the server finishes its own:
// the result of the same aggregation without `partial`. INVALID_ARGUMENT
// for a min, max, argmin or argmax state that covers no element (numpy
// has no value for them), or for what MergePartials refuses.
[[nodiscard]] absl::StatusOr<v1::AggregationResult> FinishPartials(const v1::AggregationResult& partial);

// FinishPartials for every result.
[[nodiscard]] absl::StatusOr<v1::AggregateResponse> FinishResponse(const v1::AggregateResponse& partial);

}  // namespace tally::client
