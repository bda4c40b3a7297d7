// tally's request and result model, independent of the wire format: the
// front end converts protobuf to these, the engine and backends see only
// these.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "tally/rules/dtype.h"
#include "tally/rules/op.h"
#include "tally/rules/partial.h"

namespace tally {

using rules::DType;
using rules::HistogramSpec;
using rules::OpKind;
using rules::OpSpec;

struct ArraySpec {
  DType dtype = DType::kFloat32;
  std::uint64_t length = 0;      // elements
  std::uint64_t row_length = 0;  // 0: not segmented; else elements per row

  bool segmented() const { return row_length != 0; }
  // Number of results per op: rows when segmented, else 1.
  std::uint64_t rows() const { return segmented() ? length / row_length : 1; }
  std::uint64_t bytes() const { return length * rules::SizeOf(dtype); }
};

// A validated request: the array's spec and the ops to compute in one pass.
struct AggregationPlan {
  ArraySpec array;
  std::vector<OpSpec> ops;
};

using HistogramResult = rules::HistogramCounts;

// One op's answer: one entry per row (a single entry when not segmented).
// Which alternative is used is fixed by the op and dtype (ResultKindOf), or
// is the partial states when the op asked for them (OpSpec::partial).
using OpValues = std::variant<std::vector<double>, std::vector<std::int64_t>,
                              std::vector<std::uint64_t>, std::vector<HistogramResult>,
                              std::vector<rules::PartialState>>;

using rules::ResultKind;
using rules::ResultKindOf;

struct AggregationResult {
  std::vector<OpValues> values;  // one per op, in plan order
  std::string backend;           // "cpu", "cuda", "null"
  std::string device;
};

}  // namespace tally
