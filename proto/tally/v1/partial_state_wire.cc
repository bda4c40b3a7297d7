#include "tally/v1/partial_state_wire.h"

#include <utility>

namespace tally {

void PartialStateToProto(rules::PartialState&& s, v1::PartialState* out) {
  out->set_count(s.count);
  out->set_float_sum(s.float_sum);
  out->set_int_sum(s.int_sum);
  out->set_uint_sum(s.uint_sum);
  out->set_sum_squares(s.sum_squares);
  out->set_mean(s.mean);
  out->set_m2(s.m2);
  out->set_float_extreme(s.float_extreme);
  out->set_int_extreme(s.int_extreme);
  out->set_uint_extreme(s.uint_extreme);
  out->set_index(s.index);
  out->set_elements(s.elements);
  if (!s.histogram.counts.empty()) {
    v1::Histogram* h = out->mutable_histogram();
    h->mutable_counts()->Add(s.histogram.counts.begin(), s.histogram.counts.end());
    h->set_below(s.histogram.below);
    h->set_above(s.histogram.above);
    h->set_nan(s.histogram.nan);
  }
}

rules::PartialState PartialStateFromProto(const v1::PartialState& p) {
  rules::PartialState s;
  s.count = p.count();
  s.float_sum = p.float_sum();
  s.int_sum = p.int_sum();
  s.uint_sum = p.uint_sum();
  s.sum_squares = p.sum_squares();
  s.mean = p.mean();
  s.m2 = p.m2();
  s.float_extreme = p.float_extreme();
  s.int_extreme = p.int_extreme();
  s.uint_extreme = p.uint_extreme();
  s.index = p.index();
  s.elements = p.elements();
  if (p.has_histogram()) {
    s.histogram.counts.assign(p.histogram().counts().begin(), p.histogram().counts().end());
    s.histogram.below = p.histogram().below();
    s.histogram.above = p.histogram().above();
    s.histogram.nan = p.histogram().nan();
  }
  return s;
}

}  // namespace tally
