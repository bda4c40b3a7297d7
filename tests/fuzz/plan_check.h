// The rules a plan that PlanFromProto accepted must obey, checked from the
// outside: an accepted plan is one that no backend can be hurt by.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "server/frontend/convert.h"
#include "tests/fuzz/fuzz_check.h"

namespace tally::fuzz {

inline void CheckAcceptedPlan(const AggregationPlan& plan, const v1::ArraySpec& spec,
                              const AggregationList& aggregations, std::optional<std::uint64_t> data_bytes,
                              const RequestLimits& limits) {
  const ArraySpec& a = plan.array;
  TALLY_FUZZ_CHECK(!plan.ops.empty(), "an accepted plan has an aggregation");
  // A minmax aggregation is planned as a min at its place and a max appended
  // (AggregationPlan::asked), so the plan may hold more ops than were asked.
  const std::size_t asked = plan.asked.empty() ? plan.ops.size() : plan.asked.size();
  TALLY_FUZZ_CHECK(asked <= limits.max_aggregations, "at most max_aggregations");
  TALLY_FUZZ_CHECK(asked == static_cast<std::size_t>(aggregations.size()), "one asked op per aggregation");
  std::size_t minmaxes = 0;
  for (const OpKind k : plan.asked) minmaxes += k == OpKind::kMinMax ? 1 : 0;
  TALLY_FUZZ_CHECK(plan.ops.size() == asked + minmaxes, "a minmax adds exactly one op, its max");
  for (const OpSpec& op : plan.ops) {
    TALLY_FUZZ_CHECK(op.kind != OpKind::kMinMax, "no backend sees a minmax");
  }
  // The byte length neither overflows nor disagrees with the data.
  const std::uint64_t size = rules::SizeOf(a.dtype);
  TALLY_FUZZ_CHECK(a.length <= (std::uint64_t{1} << 62) / size, "length x element size fits in 62 bits");
  if (data_bytes.has_value()) {
    TALLY_FUZZ_CHECK(a.bytes() == *data_bytes, "the plan's bytes are the data's");
    TALLY_FUZZ_CHECK(!spec.has_length() || spec.length() == a.length, "spec.length agrees with the data");
  } else {
    TALLY_FUZZ_CHECK(spec.has_length() && spec.length() == a.length, "a stream's length comes from its spec");
  }
  TALLY_FUZZ_CHECK(a.row_length == spec.row_length(), "row_length is the spec's");
  TALLY_FUZZ_CHECK(!a.segmented() || a.length % a.row_length == 0, "whole rows");
  std::uint64_t per_row = 0;
  for (const OpSpec& op : plan.ops) {
    if (op.kind == OpKind::kVariance || op.kind == OpKind::kStddev) {
      TALLY_FUZZ_CHECK(std::isfinite(op.ddof) && op.ddof >= 0, "ddof is finite and not negative");
    }
    if (op.kind == OpKind::kHistogram) {
      const HistogramSpec& h = op.histogram;
      TALLY_FUZZ_CHECK(h.bins >= 1 && h.bins <= rules::kMaxHistogramBins, "1 to 65536 bins");
      TALLY_FUZZ_CHECK(std::isfinite(h.lo) && std::isfinite(h.hi) && h.lo < h.hi, "finite lo < hi");
      TALLY_FUZZ_CHECK(std::isfinite(h.hi - h.lo), "the range's width is finite");
      per_row += std::uint64_t{h.bins} + 3;
    } else if (rules::agg::Of(op.kind).per_q) {
      TALLY_FUZZ_CHECK(op.q.size() <= rules::kMaxQuantiles, "at most 1024 q");
      per_row += op.q.empty() ? 1 : op.q.size();  // ddsketch without q: the median
    } else if (rules::agg::Of(op.kind).up_to_k) {
      TALLY_FUZZ_CHECK(op.k >= 1 && op.k <= rules::kMaxTopK, "1 to 65536 for k");
      per_row += 2 * std::uint64_t{op.k};  // values and their indices
    } else {
      per_row += 1;
    }
    if (op.partial) per_row += kPartialStateExtraValues;
    if (!a.segmented() && a.length == 0) {
      TALLY_FUZZ_CHECK(!rules::NeedsNonEmpty(op), "an empty array has no min, max, arg*, ptp or their nan forms");
    }
  }
  // The response, and the per-row state the backends allocate, are bounded.
  const std::uint64_t rows = a.rows();
  TALLY_FUZZ_CHECK(per_row == ResultValuesPerRow(plan), "result values per row");
  TALLY_FUZZ_CHECK(rows == 0 || per_row <= limits.max_result_values / rows, "rows x values within the limit");
}

}  // namespace tally::fuzz
