// Conversions between tally's enums (tally/rules) and the wire contract's
// (tally.v1). Ops go through the registry of aggregate functions
// (tally/v1/aggregation_wire.h), so a new op is added there alone.
#pragma once

#include <optional>
#include <string_view>

#include "absl/strings/string_view.h"
#include "tally/rules/dtype.h"
#include "tally/client/array.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/op.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

v1::DType ToWire(rules::DType dtype);
v1::Op ToWire(rules::OpKind op);
// nullopt for *_UNSPECIFIED and values this client does not know.
std::optional<rules::DType> FromWire(v1::DType dtype);
std::optional<rules::OpKind> FromWire(v1::Op op);

// The wire spec of `array`: dtype, length, rows or offsets, validity mask.
v1::ArraySpec SpecOf(const ArrayRef& array);

// rules::Name as absl::string_view: Debian's abseil is built with its own
// string_view type, which std::string_view does not convert to (going
// through std::string_view accepts rules::Name returning either kind).
inline absl::string_view NameOf(rules::DType dtype) {
  const std::string_view name(rules::Name(dtype));
  return absl::string_view(name.data(), name.size());
}
inline absl::string_view NameOf(rules::OpKind op) {
  const std::string_view name(rules::agg::Of(op).name);
  return absl::string_view(name.data(), name.size());
}

// The fully qualified method names (e.g. "/tally.v1.Aggregator/Aggregate").
const std::string& AggregateMethod();
const std::string& AggregateStreamMethod();
const std::string& PutDatasetMethod();
const std::string& AggregateDatasetMethod();
const std::string& ListDatasetsMethod();
const std::string& DescribeDatasetMethod();
const std::string& DeleteDatasetMethod();
// "/tally.v1.SharedMemory/<method>".
enum class RegionCall {
  kRegisterHostRegion,
  kRegisterCudaRegion,
  kUnregisterRegion,
  kListRegions,
  kAggregateRegion,
  kPutDatasetFromRegion,
};
const std::string& SharedMemoryMethod(RegionCall call);

}  // namespace tally::client
