// tally.v1.Aggregation to and from tally/rules' OpSpec, through the
// registry of aggregate functions (tally/rules/agg): the server's plans,
// the C++ client's merges and its command line read and write an
// aggregation the same way. Op numbers are the registry's (Function::wire).
#pragma once

#include "tally/rules/agg/registry.h"
#include "tally/v1/tally.pb.h"

namespace tally {

// The function of a wire op; null for OP_UNSPECIFIED and ops this build
// does not know.
inline const rules::agg::Function* FunctionOf(v1::Op op) { return rules::agg::FindByWire(static_cast<int>(op)); }
inline v1::Op OpToProto(rules::OpKind kind) { return static_cast<v1::Op>(rules::agg::Of(kind).wire); }

// `a` as the rules see it, of function `f` (FunctionOf(a.op())): every
// parameter field as sent (a function reads only its own), the partial
// request and its base index.
rules::OpSpec OpSpecFromProto(const rules::agg::Function& f, const v1::Aggregation& a);
// `op`'s function and the parameters it takes; other fields are left unset.
v1::Aggregation OpSpecToProto(const rules::OpSpec& op);

}  // namespace tally
