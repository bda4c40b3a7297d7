// How a family's StateFunction makes a state: the family's state class
// template for the plan's dtype, told which registry function it serves
// (its wire number and name go into serialised headers and messages). Used
// only by the files of rules/src/agg/, where each family's states are
// compiled once.
#pragma once

#include <memory>

#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/state.h"
#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::rules::agg {

template <template <typename> class StateOf>
std::unique_ptr<State> MakeStateOf(const OpSpec& op, DType dtype) {
  const Function& f = Of(op.kind);
  return VisitDType(dtype, [&](auto d) -> std::unique_ptr<State> {
    using T = typename Traits<decltype(d)::value>::value;
    return std::make_unique<StateOf<T>>(op, dtype, f);
  });
}

}  // namespace tally::rules::agg
