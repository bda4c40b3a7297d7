#include "tally/v1/partial_state_wire.h"

#include <cmath>
#include <limits>
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
  out->set_float_product(s.float_product);
  out->set_int_product(s.int_product);
  out->set_uint_product(s.uint_product);
  out->set_nonzero(s.nonzero);
  out->set_float_max(s.float_max);
  out->set_int_max(s.int_max);
  out->set_uint_max(s.uint_max);
  if (!s.function_state.empty()) out->set_function_state(std::move(s.function_state));
  if (!s.exact_sum.empty()) out->set_exact_sum(std::move(s.exact_sum));
  if (!s.exact_sum_squares.empty()) out->set_exact_sum_squares(std::move(s.exact_sum_squares));
  if (!s.histogram.counts.empty()) {
    v1::Histogram* h = out->mutable_histogram();
    h->mutable_counts()->Add(s.histogram.counts.begin(), s.histogram.counts.end());
    h->set_below(s.histogram.below);
    h->set_above(s.histogram.above);
    h->set_nan(s.histogram.nan);
  }
}

void RowAnswersToProto(rules::OpKind kind, rules::DType dtype, std::span<const rules::agg::RowAnswer> rows,
                       v1::AggregationResult* out) {
  switch (rules::ResultKindOf(kind, dtype)) {
    case rules::ResultKind::kDouble: {
      auto* d = out->mutable_doubles()->mutable_values();
      for (const rules::agg::RowAnswer& row : rows) {
        for (const double x : row.doubles) d->Add(std::isnan(x) ? std::numeric_limits<double>::quiet_NaN() : x);
      }
      break;
    }
    case rules::ResultKind::kInt64: {
      auto* d = out->mutable_int64s()->mutable_values();
      for (const rules::agg::RowAnswer& row : rows) d->Add(row.int64s.begin(), row.int64s.end());
      break;
    }
    case rules::ResultKind::kUInt64: {
      auto* d = out->mutable_uint64s()->mutable_values();
      for (const rules::agg::RowAnswer& row : rows) d->Add(row.uint64s.begin(), row.uint64s.end());
      break;
    }
    case rules::ResultKind::kHistogram: break;  // no such function keeps its own state
  }
  if (!rules::agg::Of(kind).up_to_k) return;
  auto* indices = out->mutable_indices()->mutable_values();
  auto* lengths = out->mutable_lengths()->mutable_values();
  for (const rules::agg::RowAnswer& row : rows) {
    indices->Add(row.indices.begin(), row.indices.end());
    lengths->Add(row.indices.size());
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
  s.float_product = p.float_product();
  s.int_product = p.int_product();
  s.uint_product = p.uint_product();
  s.nonzero = p.nonzero();
  s.float_max = p.float_max();
  s.int_max = p.int_max();
  s.uint_max = p.uint_max();
  s.function_state = p.function_state();
  s.exact_sum = p.exact_sum();
  s.exact_sum_squares = p.exact_sum_squares();
  if (p.has_histogram()) {
    s.histogram.counts.assign(p.histogram().counts().begin(), p.histogram().counts().end());
    s.histogram.below = p.histogram().below();
    s.histogram.above = p.histogram().above();
    s.histogram.nan = p.histogram().nan();
  }
  return s;
}

}  // namespace tally
