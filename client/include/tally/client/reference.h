// A plain host implementation of every aggregation, following the wire
// contract's rules, to check a server's answers (`tally bench --verify`, the
// client tests' in-process server). Simple and sequential: correct, not fast.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tally/client/array.h"
#include "tally/rules/op.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

// Which AggregationResult field an op answers in, for a dtype (the rule
// in tally.proto's Op comments).
v1::AggregationResult::ValuesCase ResultCaseFor(rules::OpKind op, rules::DType dtype);

// Whole arrays, equal rows or CSR segments, with or without a validity
// mask (masked-out elements skipped, argmin/argmax answering positions in
// the row, numpy.ma's rule). INVALID_ARGUMENT for requests the contract
// rejects (row length that does not divide the length, offsets that do not
// rise from 0 to the length, a mask of the wrong size, min of an empty or
// all-masked row, bad histogram spec, ...).
// execution.backend is "reference".
[[nodiscard]] absl::StatusOr<v1::AggregateResponse> ComputeReference(
    const ArrayRef& array, const std::vector<v1::Aggregation>& aggregations);

// OK when `actual` answers the same aggregations with the same values:
// integers, histograms, min/max and arg* exactly, other floats within a
// relative 1e-6 (sums may be accumulated in any order). NaN matches NaN.
// Otherwise the first difference, named by aggregation and row.
[[nodiscard]] absl::Status CompareResults(const v1::AggregateResponse& expected,
                                          const v1::AggregateResponse& actual);

}  // namespace tally::client
