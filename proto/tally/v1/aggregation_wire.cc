#include "tally/v1/aggregation_wire.h"

namespace tally {

rules::OpSpec OpSpecFromProto(const rules::agg::Function& f, const v1::Aggregation& a) {
  rules::OpSpec op;
  op.kind = f.kind;
  op.ddof = a.ddof();
  op.histogram = rules::HistogramSpec{a.histogram().bins(), a.histogram().lo(), a.histogram().hi()};
  op.q.assign(a.q().begin(), a.q().end());
  op.method = static_cast<rules::QuantileMethod>(a.method());
  op.k = a.k();
  op.precision = a.precision();
  op.relative_accuracy = a.relative_accuracy();
  op.partial = a.has_partial();
  op.base_index = a.partial().base_index();
  return op;
}

v1::Aggregation OpSpecToProto(const rules::OpSpec& op) {
  v1::Aggregation a;
  a.set_op(OpToProto(op.kind));
  for (const rules::agg::Param& p : rules::agg::Of(op.kind).params->params) {
    switch (p.id) {
      case rules::agg::ParamId::kDdof: a.set_ddof(op.ddof); break;
      case rules::agg::ParamId::kBins: a.mutable_histogram()->set_bins(op.histogram.bins); break;
      case rules::agg::ParamId::kLo: a.mutable_histogram()->set_lo(op.histogram.lo); break;
      case rules::agg::ParamId::kHi: a.mutable_histogram()->set_hi(op.histogram.hi); break;
      case rules::agg::ParamId::kQ: a.mutable_q()->Add(op.q.begin(), op.q.end()); break;
      case rules::agg::ParamId::kMethod: a.set_method(static_cast<v1::QuantileMethod>(op.method)); break;
      case rules::agg::ParamId::kK: a.set_k(op.k); break;
      case rules::agg::ParamId::kPrecision: a.set_precision(op.precision); break;
      case rules::agg::ParamId::kAccuracy: a.set_relative_accuracy(op.relative_accuracy); break;
    }
  }
  if (op.partial) a.mutable_partial()->set_base_index(op.base_index);
  return a;
}

}  // namespace tally
