// Conversion between the tally.v1 protobuf messages and the engine's request
// and result model, with the checks that need the wire form (unknown enum
// values, byte lengths).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/core/validate.h"
#include "server/engine/datasets/dataset_store.h"
#include "tally/v1/tally.pb.h"

namespace tally {

using AggregationList = google::protobuf::RepeatedPtrField<v1::Aggregation>;

// Builds and validates a plan. `data_bytes` is the inline data's size for
// Aggregate (length then comes from it, and spec.length, if set, must agree);
// std::nullopt for AggregateStream, where spec.length is required.
[[nodiscard]] absl::StatusOr<AggregationPlan> PlanFromProto(const v1::ArraySpec& spec,
                                                            const AggregationList& aggregations,
                                                            std::optional<std::uint64_t> data_bytes,
                                                            const RequestLimits& limits);

// The checked offsets of variable-length segments (tally/rules/segments.h)
// from their wire form, int64 little-endian; null when `bytes` is empty.
// Errors are INVALID_ARGUMENT naming `field` and the entry at fault.
[[nodiscard]] absl::StatusOr<Offsets> OffsetsFromProto(const std::string& bytes, std::uint64_t length,
                                                       const char* field);

// A validity mask (tally/rules/validity.h) from its wire form, exactly
// ceil(length / 8) bytes; null when `bytes` is empty. Errors are
// INVALID_ARGUMENT naming `field`.
[[nodiscard]] absl::StatusOr<Validity> ValidityFromProto(const std::string& bytes, std::uint64_t length,
                                                         const char* field);

// `plan` with its array set: adds the aggregations and validates the whole.
// A minmax aggregation becomes a min and a max (AggregationPlan::asked).
[[nodiscard]] absl::StatusOr<AggregationPlan> FinishPlan(AggregationPlan plan, const AggregationList& aggregations,
                                                         const RequestLimits& limits);

// INVALID_ARGUMENT naming spec.dtype for an unknown or missing dtype.
[[nodiscard]] absl::StatusOr<DType> DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(DType dtype);

void DatasetInfoToProto(const DatasetInfo& info, v1::DatasetInfo* out);

// Fills `response` with `result`'s values, echoing the request's aggregations
// (a minmax's min and max paired, row by row).
void ResultToProto(const AggregationPlan& plan, const AggregationList& aggregations,
                   AggregationResult result, double server_seconds, v1::AggregateResponse* response);

}  // namespace tally
