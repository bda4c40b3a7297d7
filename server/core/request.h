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

struct HistogramResult {
  std::vector<std::uint64_t> counts;
  std::uint64_t below = 0;
  std::uint64_t above = 0;
  std::uint64_t nan = 0;

  bool operator==(const HistogramResult&) const = default;
};

// One op's answer: one entry per row (a single entry when not segmented).
// Which alternative is used is fixed by the op and dtype (see ResultKindOf).
using OpValues = std::variant<std::vector<double>, std::vector<std::int64_t>,
                              std::vector<std::uint64_t>, std::vector<HistogramResult>>;

enum class ResultKind { kDouble = 0, kInt64 = 1, kUInt64 = 2, kHistogram = 3 };

// The wire contract's rule for which value type an op returns.
constexpr ResultKind ResultKindOf(OpKind op, DType dtype) {
  switch (op) {
    case OpKind::kSum:
    case OpKind::kMin:
    case OpKind::kMax:
      if (rules::IsFloat(dtype)) return ResultKind::kDouble;
      return rules::IsSigned(dtype) ? ResultKind::kInt64 : ResultKind::kUInt64;
    case OpKind::kCount: return ResultKind::kUInt64;
    case OpKind::kArgmin:
    case OpKind::kArgmax: return ResultKind::kInt64;
    case OpKind::kHistogram: return ResultKind::kHistogram;
    case OpKind::kMean:
    case OpKind::kSumSquares:
    case OpKind::kVariance:
    case OpKind::kStddev: return ResultKind::kDouble;
  }
  return ResultKind::kDouble;
}

struct AggregationResult {
  std::vector<OpValues> values;  // one per op, in plan order
  std::string backend;           // "cpu", "cuda", "null"
  std::string device;
};

}  // namespace tally
