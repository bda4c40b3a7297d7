// quantile, nanquantile, median and nanmedian's states, compiled once.
#include "tally/rules/agg/make_state.h"
#include "tally/rules/agg/quantile_state.h"
#include "tally/rules/agg/quantiles.h"

namespace tally::rules::agg {

std::unique_ptr<State> MakeQuantileState(const OpSpec& op, DType dtype) {
  return MakeStateOf<quantile_detail::QuantileState>(op, dtype);
}

}  // namespace tally::rules::agg
