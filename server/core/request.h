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
#include "tally/rules/agg/state.h"
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

// A validity mask over the array's elements (tally/rules/validity.h: bit i
// of the little-endian words is element i, 1 = valid), its bits past the
// length cleared, in whole 32-bit words so that the GPU reads it by words.
// Shared like Offsets.
using Validity = std::shared_ptr<const std::vector<std::uint32_t>>;

// The mask of elements [first, first + count) of `mask`, as a mask of its
// own (bit 0 = element first); null for a null mask.
inline Validity SliceValidity(const Validity& mask, std::uint64_t first, std::uint64_t count) {
  if (mask == nullptr) return nullptr;
  const std::vector<std::uint32_t>& from = *mask;
  std::vector<std::uint32_t> own((count + 31) / 32, 0);
  const std::uint64_t shift = first & 31;
  for (std::uint64_t w = 0; w < own.size(); ++w) {
    const std::uint64_t at = (first >> 5) + w;
    std::uint64_t bits = from[at] >> shift;
    if (shift != 0 && at + 1 < from.size()) bits |= static_cast<std::uint64_t>(from[at + 1]) << (32 - shift);
    own[w] = static_cast<std::uint32_t>(bits);
  }
  if (const std::uint64_t tail = count & 31; tail != 0) own.back() &= (std::uint32_t{1} << tail) - 1;
  return std::make_shared<const std::vector<std::uint32_t>>(std::move(own));
}

struct ArraySpec {
  DType dtype = DType::kFloat32;
  std::uint64_t length = 0;      // elements
  std::uint64_t row_length = 0;  // 0: no equal rows; else elements per row
  Offsets offsets = nullptr;     // variable-length segments (row_length is then 0)
  Validity validity = nullptr;   // null: every element is valid

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
  bool masked() const { return validity != nullptr; }
  // Whether element i (0 <= i < length) is valid.
  bool Valid(std::uint64_t i) const {
    return validity == nullptr || (((*validity)[i >> 5] >> (i & 31)) & 1u) != 0;
  }
  // "row" or "segment", for messages.
  const char* RowWord() const { return offsets ? "segment" : "row"; }
};

// A validated request: the array's spec and the ops to compute in one pass.
struct AggregationPlan {
  ArraySpec array;
  std::vector<OpSpec> ops;
  // The aggregations' kinds as asked, when they differ from `ops`: a
  // kMinMax aggregation i is computed as ops[i] = kMin and one kMax
  // appended after the aggregations (the k-th minmax's at asked.size() + k),
  // so ops[0, asked.size()) keep the aggregations' positions. Empty: the
  // ops are the aggregations.
  std::vector<OpKind> asked{};

  // ops[i]'s name as its aggregation asked for it ("minmax" for the min
  // standing in for one), for messages.
  const char* NameOf(std::size_t i) const { return rules::Name(i < asked.size() ? asked[i] : ops[i].kind); }
};

using HistogramResult = rules::HistogramCounts;

// One op's answer: one entry per row (a single entry when not segmented).
// Which alternative is used is fixed by the op and dtype (ResultKindOf), or
// is the partial states when the op asked for them (OpSpec::partial).
// Functions whose state the registry keeps (rules/agg/state.h) answer
// RowAnswers: per row, as many values as the function gives there.
using OpValues = std::variant<std::vector<double>, std::vector<std::int64_t>,
                              std::vector<std::uint64_t>, std::vector<HistogramResult>,
                              std::vector<rules::PartialState>, std::vector<rules::agg::RowAnswer>>;

using rules::ResultKind;
using rules::ResultKindOf;

struct AggregationResult {
  std::vector<OpValues> values;  // one per op, in plan order
  std::string backend;           // "cpu", "cuda", "null"
  std::string device;
};

}  // namespace tally
