// Enum conversions between tally/rules and tally.v1, and the method names.
#include "tally/client/wire.h"

#include <array>
#include <string>

#include "tally/v1/aggregation_wire.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally::client {

v1::DType ToWire(rules::DType dtype) {
  switch (dtype) {
    case rules::DType::kFloat32: return v1::DTYPE_FLOAT32;
    case rules::DType::kFloat64: return v1::DTYPE_FLOAT64;
    case rules::DType::kInt32: return v1::DTYPE_INT32;
    case rules::DType::kInt64: return v1::DTYPE_INT64;
    case rules::DType::kUInt32: return v1::DTYPE_UINT32;
    case rules::DType::kUInt8: return v1::DTYPE_UINT8;
    case rules::DType::kInt8: return v1::DTYPE_INT8;
    case rules::DType::kInt16: return v1::DTYPE_INT16;
    case rules::DType::kUInt16: return v1::DTYPE_UINT16;
    case rules::DType::kUInt64: return v1::DTYPE_UINT64;
    case rules::DType::kBool: return v1::DTYPE_BOOL;
    case rules::DType::kFloat16: return v1::DTYPE_FLOAT16;
    case rules::DType::kBFloat16: return v1::DTYPE_BFLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

v1::ArraySpec SpecOf(const ArrayRef& array) {
  v1::ArraySpec spec;
  spec.set_dtype(ToWire(array.dtype));
  spec.set_length(array.length);
  spec.set_row_length(array.row_length);
  // int64 little-endian on the wire, as in memory on every host tally builds for.
  spec.set_offsets(reinterpret_cast<const char*>(array.offsets.data()), array.offsets.size_bytes());
  spec.set_validity(reinterpret_cast<const char*>(array.validity.data()), array.validity.size_bytes());
  return spec;
}

std::optional<rules::DType> FromWire(v1::DType dtype) {
  for (rules::DType d : rules::kAllDTypes) {
    if (ToWire(d) == dtype) return d;
  }
  return std::nullopt;
}

v1::Op ToWire(rules::OpKind op) { return OpToProto(op); }

std::optional<rules::OpKind> FromWire(v1::Op op) {
  if (const rules::agg::Function* f = FunctionOf(op)) return f->kind;
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
const std::string& SharedMemoryMethod(RegionCall call) {
  // Built once from the generated service name, like the Aggregator's.
  static const std::array<std::string, 6> names = [] {
    const auto name = [](const char* method) {
      return std::string("/") + v1::SharedMemory::service_full_name() + "/" + method;
    };
    return std::array<std::string, 6>{name("RegisterHostRegion"), name("RegisterCudaRegion"),
                                      name("UnregisterRegion"),   name("ListRegions"),
                                      name("AggregateRegion"),    name("PutDatasetFromRegion")};
  }();
  return names[static_cast<std::size_t>(call)];
}

}  // namespace tally::client
