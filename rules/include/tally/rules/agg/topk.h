// The k largest and the k smallest elements, sorted, with their indices:
// topk and bottomk (torch.topk's answer, numpy's sort order and ties to the
// smaller index). A row of fewer than k elements answers all of them.
#pragma once

#include <string>

#include "tally/rules/agg/function.h"
#include "tally/rules/agg/state.h"

namespace tally::rules::agg {

inline constexpr Param kTopKParamList[] = {
    {.id = ParamId::kK, .field = "k", .label = "k", .text = "K", .integer = true}};
inline std::optional<std::string> CheckTopK(const OpSpec& op) {
  if (op.k >= 1 && op.k <= kMaxTopK) return std::nullopt;
  std::string out = "k must be 1 to ";
  return out.append(std::to_string(kMaxTopK)).append(", got ").append(std::to_string(op.k)).append(".");
}
inline constexpr ParamSet kTopKParams{kTopKParamList, CheckTopK};

// One state for both (topk_state.h; rules/src/agg/topk_states.cc).
std::unique_ptr<State> MakeTopKState(const OpSpec& op, DType dtype);
inline constexpr StateFunction kTopKStates{MakeTopKState};

inline constexpr Function kTopK{.kind = OpKind::kTopK, .name = "topk", .wire = 31, .params = &kTopKParams,
                                .result = ResultRule::kLikeInput, .plain = OpKind::kTopK, .answers_index = true,
                                .partial_state = true, .state = &kTopKStates, .up_to_k = true};
inline constexpr Function kBottomK{.kind = OpKind::kBottomK, .name = "bottomk", .wire = 32, .params = &kTopKParams,
                                   .result = ResultRule::kLikeInput, .plain = OpKind::kBottomK, .answers_index = true,
                                   .partial_state = true, .state = &kTopKStates, .up_to_k = true};

inline constexpr Function kTopKs[] = {kTopK, kBottomK};

}  // namespace tally::rules::agg
