#include "server/core/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/histogram_bin.h"
#include "tally/rules/segments.h"

namespace tally {
namespace {

// The dtype numpy computes histogram edges in for input of `dtype`.
const char* EdgeDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16: return rules::Name(dtype);
    default: return "float64";
  }
}

std::string OpLabel(std::size_t i, const char* name) { return absl::StrCat("aggregations[", i, "] (", name, ")"); }

// True when the edges certainly increase, without computing them: each edge
// is lo + i * step after at most three roundings (the product and the sum in
// float64, then to T), each within half a ulp of T at 8 * max(|lo|, |hi|),
// which bounds every value involved; the last edge is hi rounded to T, which
// is within half a ulp of (lo + (bins - 1) * step) + step but for the
// rounding of hi - lo (half a ulp) and of step (bins half-ulps of step). A
// step above 4 ulps plus that keeps every pair of neighbours apart.
template <typename T, typename E>
bool EdgesCertainlyIncrease(const rules::HistogramBinner<T, E>& b, double lo, double hi) {
  // 16-bit edges (at most 65537 of them, cheap to compute) are always checked one by one.
  if constexpr (!std::is_same_v<T, E>) return false;
  const double top = 8 * std::fmax(std::fabs(lo), std::fabs(hi));
  if (!(top < static_cast<double>(std::numeric_limits<T>::max()))) return false;
  const T t = static_cast<T>(top);
  const double ulp = static_cast<double>(std::nextafter(t, std::numeric_limits<T>::infinity())) - static_cast<double>(t);
  const double step_ulp = std::nextafter(b.step, std::numeric_limits<double>::infinity()) - b.step;
  return b.step > 4 * ulp + b.bins * step_ulp;
}

template <typename Tr>
bool EdgesIncrease(const HistogramSpec& h) {
  using T = typename Tr::bin;
  const auto b = rules::BinnerFor<Tr>::Make(h.bins, h.lo, h.hi);
  // A step that rounds to 0 (hi - lo < bins * 2^-1075) makes numpy compute
  // the edges as i / bins * (hi - lo) + lo instead; they lie in [lo, hi],
  // which then holds fewer than bins + 1 doubles, so two are equal.
  if (!(b.step > 0)) return false;
  if (EdgesCertainlyIncrease(b, h.lo, h.hi)) return true;
  T previous = b.Edge(0);
  for (std::int32_t i = 1; i <= b.bins; ++i) {
    const T edge = b.Edge(i);
    if (!(previous < edge)) return false;
    previous = edge;
  }
  return true;
}

absl::Status ValidateOp(std::size_t i, const char* name, const OpSpec& op, const ArraySpec& array) {
  const DType dtype = array.dtype;
  const rules::agg::Function& f = rules::agg::Of(op.kind);
  if (op.partial && !f.partial_state) {
    // A function whose state the wire form (PartialState) and the clients'
    // merges do not carry: refused rather than answered with a state
    // nobody finishes.
    return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, name), ": partial states of ", std::string(f.name),
                                                   " are not supported; ask for the value."));
  }
  if (op.partial && f.answers_index) {
    // Indices are int64: the last one, base_index + the row's length - 1, must fit.
    constexpr std::uint64_t kMaxIndex = std::numeric_limits<std::int64_t>::max();
    // (A segment's length is bounded by the array's.)
    const std::uint64_t span = array.row_length != 0 ? array.row_length : array.length;
    if (op.base_index > kMaxIndex - span) {
      return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, name), ": partial.base_index ", op.base_index,
                                                     " plus the ", array.row_length != 0 ? "row" : "array",
                                                     "'s length ", span, " exceeds 2^63 - 1."));
    }
  }
  if (!f.refuses_bool.empty() && dtype == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, name), ": ", std::string(f.refuses_bool)));
  }
  if (const std::optional<std::string> fault = rules::agg::CheckParams(op)) {
    return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, name), ": ", *fault));
  }
  // Whether numpy's edges of the range in this dtype are distinct: the one
  // parameter check that needs the dtype.
  if (op.kind == OpKind::kHistogram) {
    const HistogramSpec& h = op.histogram;
    if (!HistogramEdgesIncrease(h, dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpLabel(i, name), ": too many histogram.bins for the range: the edges of ", h.bins, " bins over [",
          rules::agg::NumberText(h.lo), ", ", rules::agg::NumberText(h.hi), "], numpy.linspace(lo, hi, bins + 1) in ",
          EdgeDTypeName(dtype),
          ", are not strictly increasing, so numpy cannot create ", h.bins,
          " finite-sized bins; use fewer bins or a wider range."));
    }
  }
  return absl::OkStatus();
}

// Variable-length segments: offsets well formed (the front end has checked
// the wire's; a backend driven directly must not trust its caller), not
// with equal rows, and no empty segment for an op that has no value on an
// empty array (numpy raises there).
absl::Status ValidateSegments(const AggregationPlan& plan) {
  const ArraySpec& a = plan.array;
  if (a.row_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec.offsets: give either row_length (", a.row_length,
                                                   ") or offsets, not both."));
  }
  const std::vector<std::uint64_t>& off = *a.offsets;
  if (rules::CheckOffsets(std::span<const std::uint64_t>(off), a.length).kind != rules::OffsetsFault::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.offsets: offsets must start at 0, never decrease and end at the array's length ", a.length, "."));
  }
  const auto empty_needed = std::find_if(plan.ops.begin(), plan.ops.end(),
                                         [](const OpSpec& op) { return rules::NeedsNonEmpty(op); });
  if (empty_needed == plan.ops.end()) return absl::OkStatus();
  const auto first = static_cast<std::size_t>(empty_needed - plan.ops.begin());
  for (std::size_t s = 0; s + 1 < off.size(); ++s) {
    if (off[s] == off[s + 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpLabel(first, plan.NameOf(first)), ": segment ", s,
          " (offsets[", s, "] = offsets[", s + 1, "] = ", off[s], ") is empty, and an empty array has no ",
          plan.NameOf(first), " (numpy raises)."));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool HistogramEdgesIncrease(const HistogramSpec& h, DType dtype) {
  return rules::VisitDType(dtype, [&](auto d) { return EdgesIncrease<rules::Traits<decltype(d)::value>>(h); });
}

std::uint64_t ResultValuesPerRow(const AggregationPlan& plan) {
  std::uint64_t n = 0;
  for (const OpSpec& op : plan.ops) {
    // A histogram's counts plus its three out-of-range counters; a
    // quantile's q's; top-k's values and their indices.
    if (op.kind == OpKind::kHistogram) {
      n += std::uint64_t{op.histogram.bins} + 3;
    } else {
      n += rules::agg::ValuesPerRow(op) * (rules::agg::Of(op.kind).up_to_k ? 2 : 1);
    }
    // A partial state's count, sums, moments or extreme and index.
    if (op.partial) n += kPartialStateExtraValues;
  }
  return n;
}

std::uint64_t ResultBytes(const AggregationPlan& plan) {
  // Within the limit checked by ValidatePlan, this does not overflow.
  return plan.array.rows() * ResultValuesPerRow(plan) * 2 * sizeof(double);
}

absl::Status ValidatePlan(const AggregationPlan& plan, const RequestLimits& limits) {
  if (plan.ops.empty()) {
    return absl::InvalidArgumentError("aggregations: at least one aggregation is required.");
  }
  const std::size_t asked = plan.asked.empty() ? plan.ops.size() : plan.asked.size();
  if (asked > limits.max_aggregations) {
    return absl::InvalidArgumentError(absl::StrCat("aggregations: at most ", limits.max_aggregations,
                                                   " aggregations per request, got ", asked, "."));
  }
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    if (plan.ops[i].kind == OpKind::kMinMax) {  // the front end asks for its min and max instead
      return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, "minmax"), ": a plan computes minmax as min and max."));
    }
    if (absl::Status s = ValidateOp(i, plan.NameOf(i), plan.ops[i], plan.array); !s.ok()) return s;
  }
  const ArraySpec& a = plan.array;
  if (a.validity != nullptr && a.validity->size() != (a.length + 31) / 32) {
    return absl::InvalidArgumentError(absl::StrCat("spec.validity: ", a.validity->size(),
                                                   " words of mask for ", a.length, " elements."));
  }
  if (a.length > (std::uint64_t{1} << 62) / rules::SizeOf(a.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.length: ", a.length, " elements is beyond any array tally can take."));
  }
  if (a.row_length != 0 && a.length % a.row_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec.row_length: ", a.row_length,
                                                   " does not divide the array length ", a.length,
                                                   " (the array must be whole rows)."));
  }
  if (a.variable()) {
    if (absl::Status s = ValidateSegments(plan); !s.ok()) return s;
  }
  if (!a.segmented() && a.length == 0) {
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
      if (rules::NeedsNonEmpty(plan.ops[i])) {
        return absl::InvalidArgumentError(absl::StrCat(OpLabel(i, plan.NameOf(i)),
                                                       ": the array is empty, and an empty array has no ",
                                                       plan.NameOf(i), "."));
      }
    }
  }
  const std::uint64_t per_row = ResultValuesPerRow(plan);
  const std::uint64_t rows = a.rows();
  if (rows != 0 && per_row > limits.max_result_values / rows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        a.variable() ? "spec.offsets: " : "spec.row_length: ", rows, " ", a.RowWord(), "s x ", per_row,
        " result values per ", a.RowWord(), " exceeds the limit of ", limits.max_result_values,
        " result values per response; use longer ", a.RowWord(), "s or fewer histogram bins."));
  }
  return absl::OkStatus();
}

}  // namespace tally
