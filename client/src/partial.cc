// Merging and finishing partial states: the checks a caller's input needs,
// then tally/rules/partial.h for the arithmetic.
#include "tally/client/partial.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tally/client/aggregations.h"
#include "tally/client/wire.h"
#include "tally/rules/partial.h"
#include "tally/v1/aggregation_wire.h"
#include "tally/v1/partial_state_wire.h"

namespace tally::client {
namespace {

// What merges and finishes need of an aggregation: its rules form, as a
// value (the states are already in hand).
absl::StatusOr<rules::OpSpec> SpecOf(const v1::Aggregation& a) {
  const rules::agg::Function* f = FunctionOf(a.op());
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown op ", static_cast<int>(a.op()), "."));
  rules::OpSpec spec = OpSpecFromProto(*f, a);
  spec.partial = false;
  spec.base_index = 0;
  return spec;
}

absl::Status CheckPartial(const v1::AggregationResult& r, const char* which) {
  if (!r.has_partials()) {
    return absl::InvalidArgumentError(absl::StrCat(which, " (", AggregationLabel(r.aggregation()),
                                                   ") holds values, not partial states."));
  }
  if (r.partials().version() != rules::kPartialStateVersion) {
    return absl::InvalidArgumentError(absl::StrCat(which, ": partial state version ", r.partials().version(),
                                                   " is not one this client knows (", rules::kPartialStateVersion,
                                                   ")."));
  }
  if (!FromWire(r.partials().dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(which, ": unknown dtype ", static_cast<int>(r.partials().dtype()), "."));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<v1::Aggregation> AsPartial(std::vector<v1::Aggregation> aggregations, std::uint64_t base_index) {
  for (v1::Aggregation& a : aggregations) a.mutable_partial()->set_base_index(base_index);
  return aggregations;
}

absl::StatusOr<v1::AggregationResult> MergePartials(const v1::AggregationResult& a,
                                                    const v1::AggregationResult& b) {
  if (absl::Status s = CheckPartial(a, "the first result"); !s.ok()) return s;
  if (absl::Status s = CheckPartial(b, "the second result"); !s.ok()) return s;
  if (!SameAggregation(a.aggregation(), b.aggregation())) {
    return absl::InvalidArgumentError(absl::StrCat("cannot merge partial states of different aggregations: ",
                                                   AggregationLabel(a.aggregation()), " and ",
                                                   AggregationLabel(b.aggregation()), "."));
  }
  const v1::PartialStates &pa = a.partials(), &pb = b.partials();
  if (pa.dtype() != pb.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot merge partial states of ", NameOf(*FromWire(pa.dtype())),
                                                   " and ", NameOf(*FromWire(pb.dtype())), " elements."));
  }
  if (pa.states_size() != pb.states_size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot merge partial states of ", pa.states_size(), " and ",
                                                   pb.states_size(), " rows."));
  }
  absl::StatusOr<rules::OpSpec> spec = SpecOf(a.aggregation());
  if (!spec.ok()) return spec.status();
  const rules::DType dtype = *FromWire(pa.dtype());
  // A function whose state the registry keeps wrote it as the dtype
  // computes it (nanquantile of integers is quantile's state).
  *spec = rules::AsComputedFor(*spec, dtype);
  const bool function_state = rules::agg::Of(spec->kind).state != nullptr;
  v1::AggregationResult out;
  *out.mutable_aggregation() = a.aggregation();
  v1::PartialStates* p = out.mutable_partials();
  p->set_version(rules::kPartialStateVersion);
  p->set_dtype(pa.dtype());
  for (int r = 0; r < pa.states_size(); ++r) {
    rules::PartialState x = PartialStateFromProto(pa.states(r));
    rules::PartialState y = PartialStateFromProto(pb.states(r));
    if (spec->kind == rules::OpKind::kHistogram &&
        (x.histogram.counts.size() != spec->histogram.bins || y.histogram.counts.size() != spec->histogram.bins)) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, ": a histogram state without ",
                                                     spec->histogram.bins, " bins."));
    }
    for (const rules::PartialState* s : {&x, &y}) {
      if (!s->exact_sum.empty() && !rules::ExactSum::FromBytes(s->exact_sum)) {
        return absl::InvalidArgumentError(absl::StrCat(s == &x ? "the first result" : "the second result",
                                                       ", row ", r, ": exact_sum is not an exact sum's bytes."));
      }
      if (!s->exact_sum_squares.empty() && !rules::ExactSum::FromBytes(s->exact_sum_squares)) {
        return absl::InvalidArgumentError(absl::StrCat(s == &x ? "the first result" : "the second result",
                                                       ", row ", r,
                                                       ": exact_sum_squares is not an exact sum's bytes."));
      }
    }
    if (function_state) {
      for (const rules::PartialState* s : {&x, &y}) {
        if (std::optional<std::string> bad = rules::CheckFunctionState(*spec, dtype, *s)) {
          return absl::InvalidArgumentError(absl::StrCat(s == &x ? "the first result" : "the second result",
                                                         ", row ", r, ": ", *bad));
        }
      }
    }
    PartialStateToProto(rules::Merge(*spec, dtype, x, y), p->add_states());
  }
  return out;
}

absl::StatusOr<v1::AggregateResponse> MergeResponses(const v1::AggregateResponse& a, const v1::AggregateResponse& b) {
  if (a.results_size() != b.results_size()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot merge responses with ", a.results_size(), " and ",
                                                   b.results_size(), " results."));
  }
  v1::AggregateResponse out;
  *out.mutable_execution() = a.execution();
  for (int i = 0; i < a.results_size(); ++i) {
    absl::StatusOr<v1::AggregationResult> merged = MergePartials(a.results(i), b.results(i));
    if (!merged.ok()) return absl::Status(merged.status().code(), absl::StrCat("results[", i, "]: ", merged.status().message()));
    *out.add_results() = *std::move(merged);
  }
  return out;
}

absl::StatusOr<v1::AggregationResult> FinishPartials(const v1::AggregationResult& partial) {
  if (absl::Status s = CheckPartial(partial, "the result"); !s.ok()) return s;
  absl::StatusOr<rules::OpSpec> spec = SpecOf(partial.aggregation());
  if (!spec.ok()) return spec.status();
  const rules::DType dtype = *FromWire(partial.partials().dtype());
  // On integer dtypes a NaN-skipping op is its plain op (numpy's rule): the
  // server finishes nanvar of integers as var, and so does the client.
  *spec = rules::AsComputedFor(*spec, dtype);
  v1::AggregationResult out;
  *out.mutable_aggregation() = partial.aggregation();
  out.mutable_aggregation()->clear_partial();
  const rules::ResultKind kind = rules::ResultKindOf(spec->kind, dtype);
  if (rules::agg::Of(spec->kind).state != nullptr) {
    // A function whose state the registry keeps: its own steps finish it.
    std::vector<rules::agg::RowAnswer> rows(static_cast<std::size_t>(partial.partials().states_size()));
    for (int r = 0; r < partial.partials().states_size(); ++r) {
      const rules::PartialState s = PartialStateFromProto(partial.partials().states(r));
      if (!rules::HasValue(spec->kind, dtype, s)) {
        return absl::InvalidArgumentError(absl::StrCat(AggregationLabel(partial.aggregation()), ", row ", r,
                                                       ": of no elements has no value."));
      }
      if (std::optional<std::string> bad = rules::FinishFunctionState(*spec, dtype, s, rows[r])) {
        return absl::InvalidArgumentError(absl::StrCat(AggregationLabel(partial.aggregation()), ", row ", r, ": ", *bad));
      }
    }
    RowAnswersToProto(spec->kind, dtype, rows, &out);
    return out;
  }
  for (const v1::PartialState& wire : partial.partials().states()) {
    const rules::PartialState s = PartialStateFromProto(wire);
    if (!rules::HasValue(spec->kind, dtype, s)) {
      return absl::InvalidArgumentError(absl::StrCat(AggregationLabel(partial.aggregation()),
                                                     s.elements > 0 ? " of only NaN elements has no value."
                                                                    : " of no elements has no value."));
    }
    switch (kind) {
      case rules::ResultKind::kDouble: {
        // One canonical NaN, as the server sends.
        const double v = rules::FinishDouble(*spec, dtype, s);
        out.mutable_doubles()->add_values(std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v);
        break;
      }
      case rules::ResultKind::kInt64: out.mutable_int64s()->add_values(rules::FinishInt64(*spec, dtype, s)); break;
      case rules::ResultKind::kUInt64: out.mutable_uint64s()->add_values(rules::FinishUInt64(*spec, dtype, s)); break;
      case rules::ResultKind::kHistogram: {
        v1::Histogram* h = out.mutable_histograms()->add_histograms();
        h->mutable_counts()->Add(s.histogram.counts.begin(), s.histogram.counts.end());
        h->set_below(s.histogram.below);
        h->set_above(s.histogram.above);
        h->set_nan(s.histogram.nan);
        break;
      }
    }
  }
  // An empty row list still says which kind of values it holds.
  if (partial.partials().states_size() == 0) {
    switch (kind) {
      case rules::ResultKind::kDouble: out.mutable_doubles(); break;
      case rules::ResultKind::kInt64: out.mutable_int64s(); break;
      case rules::ResultKind::kUInt64: out.mutable_uint64s(); break;
      case rules::ResultKind::kHistogram: out.mutable_histograms(); break;
    }
  }
  return out;
}

absl::StatusOr<v1::AggregateResponse> FinishResponse(const v1::AggregateResponse& partial) {
  v1::AggregateResponse out;
  *out.mutable_execution() = partial.execution();
  for (int i = 0; i < partial.results_size(); ++i) {
    absl::StatusOr<v1::AggregationResult> finished = FinishPartials(partial.results(i));
    if (!finished.ok()) {
      return absl::Status(finished.status().code(), absl::StrCat("results[", i, "]: ", finished.status().message()));
    }
    *out.add_results() = *std::move(finished);
  }
  return out;
}

}  // namespace tally::client
