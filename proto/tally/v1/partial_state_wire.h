// tally.v1.PartialState, the wire form of a partial state, to and from
// tally/rules/partial.h's PartialState: the server answers with it, the C++
// client merges and finishes with it. Field for field, nothing computed.
#pragma once

#include "tally/rules/partial.h"
#include "tally/v1/tally.pb.h"

namespace tally {

void PartialStateToProto(rules::PartialState&& state, v1::PartialState* out);
rules::PartialState PartialStateFromProto(const v1::PartialState& state);

}  // namespace tally
