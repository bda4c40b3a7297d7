// tally's request and result model, independent of the wire format: the
// front end converts protobuf to these, the engine and backends see only
// these.
#pragma once

#include <cstdint>
#include <memory>
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

// The elements' offsets of variable-length segments (CSR: rows + 1 entries,
// 0 first, never decreasing, the length last; tally/rules/segments.h).
// Shared, since a plan is copied into every reduction that runs it.
using Offsets = std::shared_ptr<const std::vector<std::uint64_t>>;

struct ArraySpec {
  DType dtype = DType::kFloat32;
  std::uint64_t length = 0;      // elements
  std::uint64_t row_length = 0;  // 0: no equal rows; else elements per row
  Offsets offsets = nullptr;     // variable-length segments (row_length is then 0)

  // One result per row or segment (rows below) instead of one.
  bool segmented() const { return row_length != 0 || offsets != nullptr; }
  bool variable() const { return offsets != nullptr; }
  // Number of results per op: rows or segments when segmented, else 1.
  std::uint64_t rows() const {
    if (offsets) return offsets->size() - 1;
    return row_length != 0 ? length / row_length : 1;
  }
  // Where row r starts and how many elements it has (the whole array is
  // row 0 when not segmented).
  std::uint64_t RowStart(std::uint64_t r) const { return offsets ? (*offsets)[r] : r * row_length; }
  std::uint64_t RowLength(std::uint64_t r) const {
    if (offsets) return (*offsets)[r + 1] - (*offsets)[r];
    return row_length != 0 ? row_length : length;
  }
  std::uint64_t bytes() const { return length * rules::SizeOf(dtype); }
  // "row" or "segment", for messages.
  const char* RowWord() const { return offsets ? "segment" : "row"; }
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
