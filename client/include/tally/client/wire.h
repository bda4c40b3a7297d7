// Conversions between tally's enums (tally/ops) and the wire contract's
// (tally.v1), kept in one place so a new dtype or op is added once.
#pragma once

#include <optional>
#include <string_view>

#include "absl/strings/string_view.h"
#include "tally/ops/dtype.h"
#include "tally/ops/op.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

v1::DType ToWire(ops::DType dtype);
v1::Op ToWire(ops::OpKind op);
// nullopt for *_UNSPECIFIED and values this client does not know.
std::optional<ops::DType> FromWire(v1::DType dtype);
std::optional<ops::OpKind> FromWire(v1::Op op);

// ops::Name as absl::string_view: Debian's abseil is built with its own
// string_view type, which std::string_view does not convert to (going
// through std::string_view accepts ops::Name returning either kind).
inline absl::string_view NameOf(ops::DType dtype) {
  const std::string_view name(ops::Name(dtype));
  return absl::string_view(name.data(), name.size());
}
inline absl::string_view NameOf(ops::OpKind op) {
  const std::string_view name(ops::Name(op));
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

}  // namespace tally::client
