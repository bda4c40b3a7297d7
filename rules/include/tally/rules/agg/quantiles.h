// Exact quantiles and medians: quantile and nanquantile (numpy.quantile's
// thirteen methods, any batch of q in one aggregation), median and
// nanmedian. Holistic: the state is the row's elements (quantile_state.h),
// kept by the server within --max_holistic_bytes.
#pragma once

#include <cmath>
#include <string>

#include "tally/rules/agg/function.h"
#include "tally/rules/agg/state.h"

namespace tally::rules::agg {

inline constexpr Param kQuantileParamList[] = {
    {.id = ParamId::kQ, .field = "q", .label = "q", .text = "Q[,Q...]", .list = true},
    {.id = ParamId::kMethod, .field = "method", .label = "method", .text = "METHOD", .optional = true,
     .choices = kQuantileMethodNames},
};

// q: 1 to kMaxQuantiles probabilities, each in [0, 1] (numpy's check).
inline std::optional<std::string> CheckQ(const OpSpec& op) {
  if (op.q.empty() || op.q.size() > kMaxQuantiles) {
    std::string out = "q must hold 1 to ";
    return out.append(std::to_string(kMaxQuantiles)).append(" probabilities, got ").append(std::to_string(op.q.size())).append(".");
  }
  for (std::size_t i = 0; i < op.q.size(); ++i) {
    if (!(op.q[i] >= 0 && op.q[i] <= 1)) {
      std::string out = "q[";
      return out.append(std::to_string(i)).append("] must be in [0, 1], got ").append(NumberText(op.q[i])).append(".");
    }
  }
  return std::nullopt;
}

inline std::optional<std::string> CheckQuantile(const OpSpec& op) {
  if (auto bad = CheckQ(op)) return bad;
  if (static_cast<int>(op.method) >= kNumQuantileMethods) {
    std::string out = "method must be one of ";
    for (std::size_t i = 0; i < std::size(kQuantileMethodNames); ++i) {
      out.append(i == 0 ? "" : ", ").append(kQuantileMethodNames[i]);
    }
    return out.append("; got number ").append(std::to_string(static_cast<int>(op.method))).append(".");
  }
  return std::nullopt;
}
inline constexpr ParamSet kQuantileParams{kQuantileParamList, CheckQuantile};

// One state for the four (quantile_state.h; rules/src/agg/quantile_states.cc).
std::unique_ptr<State> MakeQuantileState(const OpSpec& op, DType dtype);
inline constexpr StateFunction kQuantileStates{MakeQuantileState};

inline constexpr Function kQuantile{
    .kind = OpKind::kQuantile, .name = "quantile", .spellings = {"q"}, .wire = 27, .params = &kQuantileParams,
    .result = ResultRule::kDouble, .plain = OpKind::kQuantile, .partial_state = true, .refuses_empty = true,
    .refuses_bool = "quantile of a bool array is not defined (numpy refuses boolean subtraction).",
    .state = &kQuantileStates, .holistic = true, .per_q = true};
inline constexpr Function kMedian{.kind = OpKind::kMedian, .name = "median", .wire = 29,
                                  .result = ResultRule::kDouble, .plain = OpKind::kMedian, .partial_state = true,
                                  .state = &kQuantileStates, .holistic = true};

// All-NaN and empty rows answer NaN (numpy warns).
inline constexpr Function kNanQuantile = [] {
  Function f = NanForm(kQuantile, OpKind::kNanQuantile, "nanquantile", 28);
    f.refuses_empty = false;
  return f;
}();
inline constexpr Function kNanMedian = [] {
  Function f = NanForm(kMedian, OpKind::kNanMedian, "nanmedian", 30);
    return f;
}();

inline constexpr Function kQuantiles[] = {kQuantile, kNanQuantile, kMedian, kNanMedian};

}  // namespace tally::rules::agg
