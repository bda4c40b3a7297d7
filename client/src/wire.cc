// Enum conversions between tally/ops and tally.v1, and the method names.
#include "tally/client/wire.h"

#include <string>

#include "tally/v1/tally.grpc.pb.h"

namespace tally::client {

v1::DType ToWire(ops::DType dtype) {
  switch (dtype) {
    case ops::DType::kFloat32: return v1::DTYPE_FLOAT32;
    case ops::DType::kFloat64: return v1::DTYPE_FLOAT64;
    case ops::DType::kInt32: return v1::DTYPE_INT32;
    case ops::DType::kInt64: return v1::DTYPE_INT64;
    case ops::DType::kUInt32: return v1::DTYPE_UINT32;
    case ops::DType::kUInt8: return v1::DTYPE_UINT8;
  }
  return v1::DTYPE_UNSPECIFIED;
}

std::optional<ops::DType> FromWire(v1::DType dtype) {
  for (ops::DType d : ops::kAllDTypes) {
    if (ToWire(d) == dtype) return d;
  }
  return std::nullopt;
}

v1::Op ToWire(ops::OpKind op) {
  switch (op) {
    case ops::OpKind::kSum: return v1::OP_SUM;
    case ops::OpKind::kMin: return v1::OP_MIN;
    case ops::OpKind::kMax: return v1::OP_MAX;
    case ops::OpKind::kMean: return v1::OP_MEAN;
    case ops::OpKind::kCount: return v1::OP_COUNT;
    case ops::OpKind::kSumSquares: return v1::OP_SUM_SQUARES;
    case ops::OpKind::kVariance: return v1::OP_VARIANCE;
    case ops::OpKind::kStddev: return v1::OP_STDDEV;
    case ops::OpKind::kArgmin: return v1::OP_ARGMIN;
    case ops::OpKind::kArgmax: return v1::OP_ARGMAX;
    case ops::OpKind::kHistogram: return v1::OP_HISTOGRAM;
  }
  return v1::OP_UNSPECIFIED;
}

std::optional<ops::OpKind> FromWire(v1::Op op) {
  for (int k = 0; k < ops::kNumOpKinds; ++k) {
    const auto kind = static_cast<ops::OpKind>(k);
    if (ToWire(kind) == op) return kind;
  }
  return std::nullopt;
}

namespace {

// Built from the generated service name so a package rename cannot leave
// the client calling a method that no longer exists.
std::string MethodName(const char* method) {
  return std::string("/") + v1::Aggregator::service_full_name() + "/" + method;
}

}  // namespace

const std::string& AggregateMethod() {
  static const std::string name = MethodName("Aggregate");
  return name;
}
const std::string& AggregateStreamMethod() {
  static const std::string name = MethodName("AggregateStream");
  return name;
}
const std::string& PutDatasetMethod() {
  static const std::string name = MethodName("PutDataset");
  return name;
}
const std::string& AggregateDatasetMethod() {
  static const std::string name = MethodName("AggregateDataset");
  return name;
}
const std::string& ListDatasetsMethod() {
  static const std::string name = MethodName("ListDatasets");
  return name;
}
const std::string& DescribeDatasetMethod() {
  static const std::string name = MethodName("DescribeDataset");
  return name;
}
const std::string& DeleteDatasetMethod() {
  static const std::string name = MethodName("DeleteDataset");
  return name;
}

}  // namespace tally::client
