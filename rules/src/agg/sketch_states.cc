// hll, ddsketch and count_distinct's states, compiled once.
#include "tally/rules/agg/ddsketch_state.h"
#include "tally/rules/agg/distinct_state.h"
#include "tally/rules/agg/hll_state.h"
#include "tally/rules/agg/make_state.h"
#include "tally/rules/agg/sketches.h"

namespace tally::rules::agg {

std::unique_ptr<State> MakeHllState(const OpSpec& op, DType dtype) {
  return MakeStateOf<hll_detail::HllState>(op, dtype);
}

std::unique_ptr<State> MakeDdSketchState(const OpSpec& op, DType dtype) {
  return MakeStateOf<ddsketch_detail::DdSketchState>(op, dtype);
}

std::unique_ptr<State> MakeCountDistinctState(const OpSpec& op, DType dtype) {
  return MakeStateOf<distinct_detail::DistinctState>(op, dtype);
}

}  // namespace tally::rules::agg
