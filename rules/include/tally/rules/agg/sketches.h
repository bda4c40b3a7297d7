// Distinct values and sketches: hll (HyperLogLog), ddsketch (quantiles
// within a relative accuracy), count_distinct (exact) and mode (the most
// frequent value). hll's state is at most 2^precision registers (a set of
// hashes while it is small), ddsketch's is bounded by the range of float64,
// count_distinct's is the distinct values and mode's the distinct values
// with their counts (holistic). All combine exactly, so a merged state is
// bitwise the one a single stream builds.
#pragma once

#include <cmath>
#include <string>

#include "tally/rules/agg/function.h"
#include "tally/rules/agg/quantiles.h"
#include "tally/rules/agg/state.h"

namespace tally::rules::agg {

inline constexpr Param kHllParamList[] = {
    {.id = ParamId::kPrecision, .field = "precision", .label = "precision", .text = "PRECISION", .integer = true}};
inline std::optional<std::string> CheckHll(const OpSpec& op) {
  if (op.precision >= kMinHllPrecision && op.precision <= kMaxHllPrecision) return std::nullopt;
  std::string out = "precision must be ";
  return out.append(std::to_string(kMinHllPrecision)).append(" to ").append(std::to_string(kMaxHllPrecision))
      .append(" (2^precision registers), got ").append(std::to_string(op.precision)).append(".");
}
inline constexpr ParamSet kHllParams{kHllParamList, CheckHll};

inline constexpr Param kDdSketchParamList[] = {
    {.id = ParamId::kAccuracy, .field = "relative_accuracy", .label = "relative_accuracy", .text = "ACCURACY"},
    {.id = ParamId::kQ, .field = "q", .label = "q", .text = "Q[,Q...]", .optional = true, .list = true},
};
inline std::optional<std::string> CheckDdSketch(const OpSpec& op) {
  if (!(op.relative_accuracy >= kMinDdSketchAccuracy && op.relative_accuracy <= kMaxDdSketchAccuracy)) {
    std::string out = "relative_accuracy must be ";
    return out.append(NumberText(kMinDdSketchAccuracy)).append(" to ").append(NumberText(kMaxDdSketchAccuracy))
        .append(", got ").append(NumberText(op.relative_accuracy)).append(".");
  }
  if (op.q.empty()) return std::nullopt;  // the median
  return CheckQ(op);
}
inline constexpr ParamSet kDdSketchParams{kDdSketchParamList, CheckDdSketch};

// Their states: hll_state.h, ddsketch_state.h and distinct_state.h, compiled
// in rules/src/agg/sketch_states.cc, which also holds mode's.
std::unique_ptr<State> MakeHllState(const OpSpec& op, DType dtype);
std::unique_ptr<State> MakeDdSketchState(const OpSpec& op, DType dtype);
std::unique_ptr<State> MakeCountDistinctState(const OpSpec& op, DType dtype);
std::unique_ptr<State> MakeModeState(const OpSpec& op, DType dtype);
inline constexpr StateFunction kHllStates{MakeHllState};
inline constexpr StateFunction kDdSketchStates{MakeDdSketchState};
inline constexpr StateFunction kCountDistinctStates{MakeCountDistinctState};
inline constexpr StateFunction kModeStates{MakeModeState};

inline constexpr Function kHll{.kind = OpKind::kHll, .name = "hll", .spellings = {"approx_count_distinct"},
                               .wire = 33, .params = &kHllParams, .result = ResultRule::kCount,
                               .plain = OpKind::kHll, .partial_state = true, .state = &kHllStates};
inline constexpr Function kDdSketch{.kind = OpKind::kDdSketch, .name = "ddsketch", .wire = 34,
                                    .params = &kDdSketchParams, .result = ResultRule::kDouble,
                                    .plain = OpKind::kDdSketch, .partial_state = true,
                                    .state = &kDdSketchStates, .per_q = true};
inline constexpr Function kCountDistinct{.kind = OpKind::kCountDistinct, .name = "count_distinct",
                                         .spellings = {"nunique"}, .wire = 35, .result = ResultRule::kCount,
                                         .plain = OpKind::kCountDistinct, .partial_state = true,
                                         .state = &kCountDistinctStates, .holistic = true};

// pandas' Series.mode()[0], scipy.stats.mode: the most frequent value, the
// smallest of equals; NaN left out (pandas' dropna=True).
inline constexpr Function kMode{.kind = OpKind::kMode, .name = "mode", .wire = 36, .result = ResultRule::kLikeInput,
                                .plain = OpKind::kMode, .partial_state = true, .refuses_empty = true,
                                .state = &kModeStates, .holistic = true};

inline constexpr Function kSketches[] = {kHll, kDdSketch, kCountDistinct, kMode};

}  // namespace tally::rules::agg
