#include "server/core/validate.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace tally {
namespace {

std::string OpLabel(std::size_t i, const OpSpec& op) {
  return absl::StrCat("aggregations[", i, "] (", ops::Name(op.kind), ")");
}

absl::Status ValidateOp(std::size_t i, const OpSpec& op) {
  if (op.kind == OpKind::kVariance || op.kind == OpKind::kStddev) {
    if (!std::isfinite(op.ddof) || op.ddof < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpLabel(i, op), ": ddof must be finite and >= 0, got ", op.ddof, "."));
    }
  }
  if (op.kind == OpKind::kHistogram) {
    const HistogramSpec& h = op.histogram;
    if (h.bins == 0 || h.bins > ops::kMaxHistogramBins) {
      return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, op), ": histogram.bins must be 1 to ",
                                                     ops::kMaxHistogramBins, ", got ", h.bins, "."));
    }
    if (!std::isfinite(h.lo) || !std::isfinite(h.hi)) {
      return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, op),
                                                     ": histogram.lo and histogram.hi must be finite, got [",
                                                     h.lo, ", ", h.hi, "]."));
    }
    if (!(h.lo < h.hi)) {
      return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, op),
                                                     ": histogram.lo must be less than histogram.hi, got [",
                                                     h.lo, ", ", h.hi, "]."));
    }
    if (!std::isfinite(h.hi - h.lo)) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpLabel(i, op), ": histogram range [", h.lo, ", ", h.hi, "] is too wide: hi - lo overflows float64."));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::uint64_t ResultValuesPerRow(const AggregationPlan& plan) {
  std::uint64_t n = 0;
  for (const OpSpec& op : plan.ops) {
    // A histogram's counts plus its three out-of-range counters.
    n += op.kind == OpKind::kHistogram ? std::uint64_t{op.histogram.bins} + 3 : 1;
  }
  return n;
}

absl::Status ValidatePlan(const AggregationPlan& plan, const RequestLimits& limits) {
  if (plan.ops.empty()) {
    return absl::InvalidArgumentError("aggregations: at least one aggregation is required.");
  }
  if (plan.ops.size() > limits.max_aggregations) {
    return absl::InvalidArgumentError(absl::StrCat("aggregations: at most ", limits.max_aggregations,
                                                   " aggregations per request, got ", plan.ops.size(), "."));
  }
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    if (absl::Status s = ValidateOp(i, plan.ops[i]); !s.ok()) return s;
  }
  const ArraySpec& a = plan.array;
  if (a.length > (std::uint64_t{1} << 62) / ops::SizeOf(a.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.length: ", a.length, " elements is beyond any array tally can take."));
  }
  if (a.segmented() && a.length % a.row_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec.row_length: ", a.row_length,
                                                   " does not divide the array length ", a.length,
                                                   " (the array must be whole rows)."));
  }
  if (!a.segmented() && a.length == 0) {
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
      if (ops::NeedsNonEmpty(plan.ops[i].kind)) {
        return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, plan.ops[i]),
                                                       ": the array is empty, and an empty array has no ",
                                                       ops::Name(plan.ops[i].kind), "."));
      }
    }
  }
  const std::uint64_t per_row = ResultValuesPerRow(plan);
  const std::uint64_t rows = a.rows();
  if (rows != 0 && per_row > limits.max_result_values / rows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "spec.row_length: ", rows, " rows x ", per_row, " result values per row exceeds the limit of ",
        limits.max_result_values, " result values per response; use longer rows or fewer histogram bins."));
  }
  return absl::OkStatus();
}

}  // namespace tally
