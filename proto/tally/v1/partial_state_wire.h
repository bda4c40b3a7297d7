// tally.v1.PartialState, the wire form of a partial state, to and from
// tally/rules/partial.h's PartialState: the server answers with it, the C++
// client merges and finishes with it. Field for field, nothing computed.
#pragma once

#include <span>

#include "tally/rules/agg/state.h"
#include "tally/rules/partial.h"
#include "tally/v1/tally.pb.h"

namespace tally {

void PartialStateToProto(rules::PartialState&& state, v1::PartialState* out);
rules::PartialState PartialStateFromProto(const v1::PartialState& state);

// The answers of a function whose state the registry keeps
// (tally/rules/agg/state.h), one per row, into `out`: the values in the
// field their result kind takes over `dtype` (NaN as one canonical quiet
// NaN), and for topk and bottomk the indices and each row's count. The
// server answers and the C++ client finishes states through it.
void RowAnswersToProto(rules::OpKind kind, rules::DType dtype, std::span<const rules::agg::RowAnswer> rows,
                       v1::AggregationResult* out);

}  // namespace tally
