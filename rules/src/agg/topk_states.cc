// topk and bottomk's states, compiled once.
#include "tally/rules/agg/make_state.h"
#include "tally/rules/agg/topk.h"
#include "tally/rules/agg/topk_state.h"

namespace tally::rules::agg {

std::unique_ptr<State> MakeTopKState(const OpSpec& op, DType dtype) {
  return MakeStateOf<topk_detail::TopKState>(op, dtype);
}

}  // namespace tally::rules::agg
