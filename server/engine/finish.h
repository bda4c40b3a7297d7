// The finishing step every backend ends with: each row's partial state
// (tally/rules/partial.h) becomes what the response carries for an op, the
// state itself when the op asked for its partial, else the op's value by the
// rules' Finish*(), the same functions the C++ client finishes merged
// states with.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/core/request.h"
#include "server/engine/huge_pages.h"
#include "tally/rules/partial.h"

namespace tally {

using rules::AsComputedFor;

// `rows` zeroed values; a buffer of several huge pages is advised before
// its first touch (a group-by's millions of groups: each 4 KiB page's
// fault cost more than its zeroing on an H100 host, trace).
template <typename T>
std::vector<T> ZeroedValues(std::uint64_t rows) {
  std::vector<T> v;
  ReserveHuge(v, rows);
  v.resize(rows);
  return v;
}

// Results of `rows` rows for `op` over `dtype`, zeroed, in the alternative
// the response carries (histograms with their bins).
inline OpValues EmptyValues(const OpSpec& op, DType dtype, std::uint64_t rows) {
  if (rules::agg::Of(op.kind).state != nullptr && !op.partial) return std::vector<rules::agg::RowAnswer>(rows);
  if (op.partial) {
    std::vector<rules::PartialState> states(rows);
    if (op.kind == OpKind::kHistogram) {
      for (rules::PartialState& s : states) s.histogram.counts.assign(op.histogram.bins, 0);
    }
    return states;
  }
  switch (ResultKindOf(op.kind, dtype)) {
    case ResultKind::kDouble: return ZeroedValues<double>(rows);
    case ResultKind::kInt64: return ZeroedValues<std::int64_t>(rows);
    case ResultKind::kUInt64: return ZeroedValues<std::uint64_t>(rows);
    case ResultKind::kHistogram: break;
  }
  return std::vector<HistogramResult>(rows, HistogramResult{std::vector<std::uint64_t>(op.histogram.bins, 0)});
}

// A scalar answer (E double, int64 or uint64) of `op` over `dtype` from
// `state`, which is left as it was.
template <typename E>
E FinishScalar(const OpSpec& op, DType dtype, const rules::PartialState& state) {
  if constexpr (std::is_same_v<E, double>) {
    return rules::FinishDouble(op, dtype, state);
  } else if constexpr (std::is_same_v<E, std::int64_t>) {
    return rules::FinishInt64(op, dtype, state);
  } else {
    static_assert(std::is_same_v<E, std::uint64_t>);
    return rules::FinishUInt64(op, dtype, state);
  }
}

// One row's answer of `op` over `dtype` from the row's state, into the
// element type E of the op's OpValues.
template <typename E>
void StoreOne(const OpSpec& op, DType dtype, rules::PartialState&& state, E& out) {
  if constexpr (std::is_same_v<E, rules::PartialState>) {
    out = std::move(state);
  } else if constexpr (std::is_same_v<E, rules::agg::RowAnswer>) {
    // A row without a value was refused before (HasValue).
    (void)rules::FinishFunctionState(op, dtype, state, out);
  } else if constexpr (std::is_same_v<E, HistogramResult>) {
    out = std::move(state.histogram);
  } else {
    out = FinishScalar<E>(op, dtype, state);
  }
}

// Row `row` of `values` (built by EmptyValues, at least row + 1 rows) from
// the row's state over `dtype`. Safe from several threads for different rows.
inline void StoreRow(const OpSpec& op, DType dtype, std::uint64_t row, rules::PartialState&& state, OpValues& values) {
  std::visit([&](auto& v) { StoreOne(op, dtype, std::move(state), v[row]); }, values);
}

// Rows [0, rows) of `values` from state_of(row), as StoreRow would store
// each: the alternative is chosen once, not per row (a group-by's millions
// of segments).
template <typename StateOf>
void StoreRows(const OpSpec& op, DType dtype, std::uint64_t rows, StateOf state_of, OpValues& values) {
  std::visit(
      [&](auto& v) {
        for (std::uint64_t row = 0; row < rows; ++row) StoreOne(op, dtype, state_of(row), v[row]);
      },
      values);
}

// INVALID_ARGUMENT for `op` (its name), which has no value on an empty array, on a
// row (the array when not segmented) whose elements are all masked out:
// numpy raises on the row's x[valid].
inline absl::Status NoValidElements(const char* op, const ArraySpec& array, std::uint64_t row) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ",
      array.segmented() ? absl::StrCat(array.RowWord(), " ", row, " has") : std::string("the array has"),
      " no valid elements (its validity bits are all 0), and an empty array has no ", op,
      " (numpy raises)."));
}

// INVALID_ARGUMENT for `op` (nanargmin, nanargmax) over a row (the array
// when not segmented) whose elements are all NaN: numpy raises.
inline absl::Status AllNan(const char* op, const ArraySpec& array, std::uint64_t row) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", array.segmented() ? absl::StrCat(array.RowWord(), " ", row, " is") : std::string("the array is"),
      " all NaN, and an all-NaN slice has no index of its extreme (numpy raises)."));
}

}  // namespace tally
