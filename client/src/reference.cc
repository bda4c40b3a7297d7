// Sequential host reference for every op, built on the shared rules in
// tally/rules (NaN handling, argmin/argmax ties, variance, histogram edges).
#include "tally/client/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tally/client/aggregations.h"
#include "tally/client/wire.h"
#include "tally/rules/combine.h"
#include "tally/rules/histogram_bin.h"
#include "tally/rules/validity.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/state.h"
#include "tally/v1/aggregation_wire.h"
#include "tally/v1/partial_state_wire.h"

namespace tally::client {
namespace {

template <typename V>
V Load(const std::byte* data, std::uint64_t i) {
  V v;
  std::memcpy(&v, data + i * sizeof(V), sizeof(V));  // .npy data need not be aligned
  return v;
}

// Where result r's elements lie: a segment, a row, or the whole array.
struct RowExtent {
  std::uint64_t start;
  std::uint64_t length;
};
RowExtent RowOf(const ArrayRef& array, std::uint64_t r) {
  if (!array.offsets.empty()) {
    const auto b = static_cast<std::uint64_t>(array.offsets[r]);
    return {b, static_cast<std::uint64_t>(array.offsets[r + 1]) - b};
  }
  const std::uint64_t row_length = array.row_length == 0 ? array.length : array.row_length;
  return {r * row_length, row_length};
}

absl::Status CheckAggregation(const v1::Aggregation& a) {
  const rules::agg::Function* f = FunctionOf(a.op());
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown op ", a.op()));
  if (const std::optional<std::string> fault = rules::agg::CheckParams(OpSpecFromProto(*f, a))) {
    return absl::InvalidArgumentError(*fault);
  }
  return absl::OkStatus();
}

// A NaN-skipping op over one row of a float dtype: its plain op over the
// row's non-NaN elements, by numpy's nan-function rules.
template <typename At, typename Pos>
absl::Status NanOne(rules::OpKind kind, double ddof, std::uint64_t row_length, const At& at,
                    const Pos& pos, v1::AggregationResult* out) {
  std::vector<double> x;
  std::vector<std::int64_t> where;
  for (std::uint64_t i = 0; i < row_length; ++i) {
    const double v = static_cast<double>(at(i));
    if (rules::IsNan(v)) continue;
    x.push_back(v);
    where.push_back(static_cast<std::int64_t>(pos(i)));
  }
  const double n = static_cast<double>(x.size());
  double sum = 0.0;
  for (double v : x) sum += v;
  switch (kind) {
    case rules::OpKind::kNanSum: out->mutable_doubles()->add_values(sum); break;
    case rules::OpKind::kNanCount: out->mutable_uint64s()->add_values(x.size()); break;
    case rules::OpKind::kNanMean: out->mutable_doubles()->add_values(x.empty() ? std::nan("") : sum / n); break;
    case rules::OpKind::kNanMin:
    case rules::OpKind::kNanMax: {
      double e = std::nan("");  // numpy: all-NaN gives NaN (with a warning)
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (i == 0 || (kind == rules::OpKind::kNanMin ? x[i] < e : x[i] > e)) e = x[i];
      }
      out->mutable_doubles()->add_values(e);
      break;
    }
    case rules::OpKind::kNanVariance:
    case rules::OpKind::kNanStddev: {
      rules::Moments m{n, x.empty() ? 0.0 : sum / n, 0.0};
      for (double v : x) m.m2 += (v - m.mean) * (v - m.mean);
      const double var = rules::NanVarianceOf(m, ddof);
      out->mutable_doubles()->add_values(kind == rules::OpKind::kNanVariance ? var : std::sqrt(var));
      break;
    }
    case rules::OpKind::kNanArgmin:
    case rules::OpKind::kNanArgmax: {
      if (x.empty()) return absl::InvalidArgumentError(absl::StrCat(NameOf(kind), ": All-NaN slice encountered"));
      std::size_t best = 0;
      for (std::size_t i = 1; i < x.size(); ++i) {
        if (kind == rules::OpKind::kNanArgmin ? x[i] < x[best] : x[i] > x[best]) best = i;
      }
      out->mutable_int64s()->add_values(where[best]);
      break;
    }
    default: break;
  }
  return absl::OkStatus();
}

// prod, count_nonzero, any, all or ptp over one row of dtype T, straight
// from numpy's definitions: one sequential loop, nothing shared with the
// backends but the accumulator types.
template <rules::DType T, typename At>
void MoreOne(rules::OpKind kind, std::uint64_t row_length, const At& at, v1::AggregationResult* out) {
  using V = typename rules::Traits<T>::value;
  switch (kind) {
    case rules::OpKind::kProduct:
      if constexpr (rules::IsFloat(T)) {
        double p = 1.0;
        for (std::uint64_t i = 0; i < row_length; ++i) p *= static_cast<double>(at(i));
        out->mutable_doubles()->add_values(p);
      } else {
        std::uint64_t p = 1;  // unsigned: wraps modulo 2^64 without UB, as numpy's int64 does
        for (std::uint64_t i = 0; i < row_length; ++i) {
          p *= rules::IsSigned(T) ? static_cast<std::uint64_t>(static_cast<std::int64_t>(at(i)))
                                  : static_cast<std::uint64_t>(at(i));
        }
        if constexpr (rules::IsSigned(T)) {
          out->mutable_int64s()->add_values(static_cast<std::int64_t>(p));
        } else {
          out->mutable_uint64s()->add_values(p);
        }
      }
      break;
    case rules::OpKind::kCountNonzero:
    case rules::OpKind::kAny:
    case rules::OpKind::kAll: {
      std::uint64_t nz = 0;
      for (std::uint64_t i = 0; i < row_length; ++i) nz += at(i) != V{} ? 1 : 0;  // NaN != 0
      const std::uint64_t v = kind == rules::OpKind::kCountNonzero ? nz
                              : kind == rules::OpKind::kAny        ? (nz > 0 ? 1 : 0)
                                                                   : (nz == row_length ? 1 : 0);
      out->mutable_uint64s()->add_values(v);
      break;
    }
    case rules::OpKind::kPtp: {
      V lo = at(0), hi = at(0);
      bool nan = false;
      for (std::uint64_t i = 0; i < row_length; ++i) {
        const V v = at(i);
        nan = nan || v != v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
      if constexpr (rules::kIsFloatValue<V>) {
        const V d = hi - lo;  // in V: float32 rounds (and overflows) as numpy's float32 does
        out->mutable_doubles()->add_values(nan ? std::nan("") : static_cast<double>(d));
      } else if constexpr (rules::IsFloat(T)) {
        // float16 and bfloat16: the exact difference rounded once to V.
        const V d = rules::RoundTo<V>(static_cast<double>(hi) - static_cast<double>(lo));
        out->mutable_doubles()->add_values(nan ? std::nan("") : static_cast<double>(d));
      } else {
        using U = std::make_unsigned_t<V>;
        const auto d = static_cast<V>(static_cast<U>(static_cast<U>(hi) - static_cast<U>(lo)));
        if constexpr (rules::IsSigned(T)) {
          out->mutable_int64s()->add_values(d);
        } else {
          out->mutable_uint64s()->add_values(d);
        }
      }
      break;
    }
    default: break;
  }
}

// A function that keeps its own state (rules/agg/state.h): each row's
// answer by its steps over the row's valid elements, as the server's host
// path computes it. Against a GPU server's device passes (quantiles, top-k,
// hll, ddsketch over GPU bytes) that is an independent check; against the
// host path, it checks what carries the answer.
absl::Status StateRows(const ArrayRef& array, const v1::Aggregation& agg, rules::OpKind kind,
                       v1::AggregationResult* out) {
  const rules::agg::Function& f = rules::agg::Of(kind);
  const rules::OpSpec op = OpSpecFromProto(f, agg);
  std::vector<std::uint32_t> words;  // the mask as 32-bit words, as Elements reads it
  if (!array.validity.empty()) {
    words.assign((array.validity.size() + 3) / 4, 0);
    std::memcpy(words.data(), array.validity.data(), array.validity.size());
  }
  std::vector<rules::agg::RowAnswer> rows(array.rows());
  for (std::uint64_t r = 0; r < rows.size(); ++r) {
    const RowExtent e = RowOf(array, r);
    std::unique_ptr<rules::agg::State> state = f.state->Init(op, array.dtype);
    state->Update(rules::agg::Elements{.data = array.data + e.start * rules::SizeOf(array.dtype),
                                       .count = e.length,
                                       .first = 0,
                                       .valid = words.empty() ? nullptr : words.data(),
                                       .valid_bit = e.start});
    if (std::optional<std::string> none = state->Finalize(rows[r])) return absl::InvalidArgumentError(*none);
  }
  RowAnswersToProto(kind, array.dtype, rows, out);
  return absl::OkStatus();
}

// One aggregation over the rows of an array of dtype T.
template <rules::DType T>
absl::Status ComputeOne(const ArrayRef& array, const v1::Aggregation& agg,
                        v1::AggregationResult* out) {
  using V = typename rules::Traits<T>::value;
  using Extreme = typename rules::Traits<T>::extreme;
  using Bin = typename rules::Traits<T>::bin;
  using Binner = rules::BinnerFor<rules::Traits<T>>;
  // Integer dtypes hold no NaN: there numpy's nan-functions are the plain ones.
  const rules::OpKind kind = rules::IsFloat(T) ? *FromWire(agg.op()) : rules::PlainOf(*FromWire(agg.op()));
  const std::uint64_t rows = array.rows();
  *out->mutable_aggregation() = agg;
  if (rules::agg::Of(kind).state != nullptr) return StateRows(array, agg, kind, out);

  std::vector<std::uint64_t> where;  // a masked row's valid positions
  for (std::uint64_t r = 0; r < rows; ++r) {
    const RowExtent e = RowOf(array, r);
    const std::byte* row = array.data + e.start * sizeof(V);
    // The row as the op reads it: every element, or with a mask the valid
    // ones; pos(i) is the i-th read element's position in the row (what
    // argmin and argmax answer, numpy.ma's rule).
    std::uint64_t row_length = e.length;
    if (!array.validity.empty()) {
      where.clear();
      for (std::uint64_t i = 0; i < e.length; ++i) {
        if (rules::IsValid(array.validity.data(), e.start + i)) where.push_back(i);
      }
      row_length = where.size();
    }
    const bool masked = !array.validity.empty();
    const auto pos = [&](std::uint64_t i) { return masked ? where[i] : i; };
    const auto at = [&](std::uint64_t i) { return Load<V>(row, pos(i)); };
    if (rules::NeedsNonEmpty(kind) && row_length == 0) {
      return absl::InvalidArgumentError(
          rows == 1 && array.offsets.empty()
              ? absl::StrCat(NameOf(kind), " of an empty array")
              : absl::StrCat(NameOf(kind), " of an empty ", array.offsets.empty() ? "row " : "segment ", r));
    }
    const double n = static_cast<double>(row_length);
    switch (kind) {
      case rules::OpKind::kSum:
        if constexpr (rules::IsFloat(T)) {
          double s = 0.0;
          for (std::uint64_t i = 0; i < row_length; ++i) s += static_cast<double>(at(i));
          out->mutable_doubles()->add_values(s);
        } else {
          std::uint64_t s = 0;  // unsigned: wraps modulo 2^64 without UB, as numpy does
          for (std::uint64_t i = 0; i < row_length; ++i) s += static_cast<std::uint64_t>(at(i));
          if constexpr (rules::IsSigned(T)) {
            out->mutable_int64s()->add_values(static_cast<std::int64_t>(s));
          } else {
            out->mutable_uint64s()->add_values(s);
          }
        }
        break;
      case rules::OpKind::kMin:
      case rules::OpKind::kMax:
      case rules::OpKind::kMinMax: {
        Extreme lo = static_cast<Extreme>(at(0)), hi = lo;
        for (std::uint64_t i = 1; i < row_length; ++i) {
          const auto v = static_cast<Extreme>(at(i));
          lo = rules::MinNan(lo, v);
          hi = rules::MaxNan(hi, v);
        }
        const auto put = [&](Extreme e) {
          if constexpr (rules::IsFloat(T)) {
            out->mutable_doubles()->add_values(e);
          } else if constexpr (rules::IsSigned(T)) {
            out->mutable_int64s()->add_values(e);
          } else {
            out->mutable_uint64s()->add_values(e);
          }
        };
        if (kind != rules::OpKind::kMax) put(lo);  // minmax: min, then max
        if (kind != rules::OpKind::kMin) put(hi);
        break;
      }
      case rules::OpKind::kMean: {
        double s = 0.0;
        for (std::uint64_t i = 0; i < row_length; ++i) s += static_cast<double>(at(i));
        out->mutable_doubles()->add_values(row_length == 0 ? std::nan("") : s / n);
        break;
      }
      case rules::OpKind::kCount:
        out->mutable_uint64s()->add_values(row_length);
        break;
      case rules::OpKind::kSumSquares: {
        double s = 0.0;
        for (std::uint64_t i = 0; i < row_length; ++i) {
          const auto x = static_cast<double>(at(i));
          s += x * x;
        }
        out->mutable_doubles()->add_values(s);
        break;
      }
      case rules::OpKind::kVariance:
      case rules::OpKind::kStddev: {
        // Two passes: the mean, then the squared deviations from it.
        rules::Moments m;
        m.count = n;
        double s = 0.0;
        for (std::uint64_t i = 0; i < row_length; ++i) s += static_cast<double>(at(i));
        m.mean = row_length == 0 ? 0.0 : s / n;
        for (std::uint64_t i = 0; i < row_length; ++i) {
          const double d = static_cast<double>(at(i)) - m.mean;
          m.m2 += d * d;
        }
        const double var = rules::VarianceOf(m, agg.ddof());
        out->mutable_doubles()->add_values(kind == rules::OpKind::kVariance ? var : std::sqrt(var));
        break;
      }
      case rules::OpKind::kArgmin:
      case rules::OpKind::kArgmax: {
        rules::ArgCandidate<V> best{at(0), static_cast<std::int64_t>(pos(0))};
        for (std::uint64_t i = 1; i < row_length; ++i) {
          const rules::ArgCandidate<V> c{at(i), static_cast<std::int64_t>(pos(i))};
          best = kind == rules::OpKind::kArgmax ? rules::PickArg<true>(best, c)
                                              : rules::PickArg<false>(best, c);
        }
        out->mutable_int64s()->add_values(best.index);
        break;
      }
      case rules::OpKind::kHistogram: {
        const auto binner = Binner::Make(agg.histogram().bins(), agg.histogram().lo(), agg.histogram().hi());
        std::vector<std::uint64_t> counts(agg.histogram().bins(), 0);
        v1::Histogram* h = out->mutable_histograms()->add_histograms();
        std::uint64_t below = 0, above = 0, nan = 0;
        for (std::uint64_t i = 0; i < row_length; ++i) {
          const std::int32_t b = binner.Bin(static_cast<Bin>(at(i)));
          if (b >= 0) {
            ++counts[b];
          } else if (b == rules::kBinBelow) {
            ++below;
          } else if (b == rules::kBinAbove) {
            ++above;
          } else {
            ++nan;
          }
        }
        h->mutable_counts()->Assign(counts.begin(), counts.end());
        h->set_below(below);
        h->set_above(above);
        h->set_nan(nan);
        break;
      }
      case rules::OpKind::kProduct:
      case rules::OpKind::kCountNonzero:
      case rules::OpKind::kAny:
      case rules::OpKind::kAll:
      case rules::OpKind::kPtp: MoreOne<T>(kind, row_length, at, out); break;
      default:
        if constexpr (rules::IsFloat(T)) {
          if (absl::Status s = NanOne(kind, agg.ddof(), row_length, at, pos, out); !s.ok()) return s;
        }
        break;
    }
  }
  // An empty batch (zero rows) still says which kind of values it holds.
  if (rows == 0) {
    switch (ResultCaseFor(kind, T)) {
      case v1::AggregationResult::kDoubles: out->mutable_doubles(); break;
      case v1::AggregationResult::kInt64S: out->mutable_int64s(); break;
      case v1::AggregationResult::kUint64S: out->mutable_uint64s(); break;
      default: out->mutable_histograms(); break;
    }
  }
  return absl::OkStatus();
}

bool DoublesMatch(double expected, double actual, bool exact) {
  if (std::isnan(expected) || std::isnan(actual)) return std::isnan(expected) && std::isnan(actual);
  if (expected == actual) return true;
  if (exact || std::isinf(expected) || std::isinf(actual)) return false;
  const double scale = std::max({1.0, std::fabs(expected), std::fabs(actual)});
  return std::fabs(expected - actual) <= 1e-6 * scale;
}

}  // namespace

v1::AggregationResult::ValuesCase ResultCaseFor(rules::OpKind op, rules::DType dtype) {
  switch (rules::ResultKindOf(op, dtype)) {
    case rules::ResultKind::kDouble: return v1::AggregationResult::kDoubles;
    case rules::ResultKind::kInt64: return v1::AggregationResult::kInt64S;
    case rules::ResultKind::kUInt64: return v1::AggregationResult::kUint64S;
    case rules::ResultKind::kHistogram: return v1::AggregationResult::kHistograms;
  }
  return v1::AggregationResult::kDoubles;
}

absl::StatusOr<v1::AggregateResponse> ComputeReference(
    const ArrayRef& array, const std::vector<v1::Aggregation>& aggregations) {
  if (aggregations.empty()) return absl::InvalidArgumentError("no aggregations");
  if (!array.offsets.empty()) {
    const auto& o = array.offsets;
    if (o.front() != 0 || static_cast<std::uint64_t>(o.back()) != array.length ||
        !std::is_sorted(o.begin(), o.end())) {
      return absl::InvalidArgumentError("offsets must rise from 0 to the length");
    }
  }
  if (!array.validity.empty() && array.validity.size() != rules::ValidityBytes(array.length)) {
    return absl::InvalidArgumentError(absl::StrCat("a mask of ", array.length, " elements takes ",
                                                   rules::ValidityBytes(array.length), " bytes, got ",
                                                   array.validity.size()));
  }
  if (array.offsets.empty() && array.row_length != 0 && array.length % array.row_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row_length ", array.row_length,
                                                   " does not divide length ", array.length));
  }
  v1::AggregateResponse response;
  for (const v1::Aggregation& agg : aggregations) {
    if (absl::Status s = CheckAggregation(agg); !s.ok()) return s;
    absl::Status s = rules::VisitDType(array.dtype, [&](auto t) {
      return ComputeOne<decltype(t)::value>(array, agg, response.add_results());
    });
    if (!s.ok()) return s;
  }
  v1::Execution* e = response.mutable_execution();
  e->set_elements(array.length);
  e->set_bytes(array.size_bytes());
  e->set_rows(array.rows());
  e->set_backend("reference");
  e->set_device("host");
  return response;
}

absl::Status CompareResults(const v1::AggregateResponse& expected,
                            const v1::AggregateResponse& actual) {
  if (expected.results_size() != actual.results_size()) {
    return absl::DataLossError(absl::StrCat("expected ", expected.results_size(),
                                            " results, got ", actual.results_size()));
  }
  for (int k = 0; k < expected.results_size(); ++k) {
    const v1::AggregationResult& e = expected.results(k);
    const v1::AggregationResult& a = actual.results(k);
    const std::string label = AggregationLabel(e.aggregation());
    const auto differ = [&](auto&&... what) {
      return absl::DataLossError(absl::StrCat(label, ": ", what...));
    };
    if (!SameAggregation(e.aggregation(), a.aggregation())) {
      return differ("answered as ", AggregationLabel(a.aggregation()));
    }
    if (e.values_case() != a.values_case()) {
      return differ("value type ", a.values_case(), ", expected ", e.values_case());
    }
    // min and max pick an element, so they (and ptp, their difference) are
    // exact whatever the order.
    const bool exact = e.aggregation().op() == v1::OP_MIN || e.aggregation().op() == v1::OP_MAX ||
                       e.aggregation().op() == v1::OP_NANMIN || e.aggregation().op() == v1::OP_NANMAX ||
                       e.aggregation().op() == v1::OP_PTP;
    const auto compare = [&](const auto& ev, const auto& av, auto match) -> absl::Status {
      if (ev.size() != av.size()) return differ(av.size(), " rows, expected ", ev.size());
      for (int i = 0; i < ev.size(); ++i) {
        if (!match(ev[i], av[i])) return differ("row ", i, " differs");
      }
      return absl::OkStatus();
    };
    absl::Status s;
    switch (e.values_case()) {
      case v1::AggregationResult::kDoubles:
        s = compare(e.doubles().values(), a.doubles().values(),
                    [&](double x, double y) { return DoublesMatch(x, y, exact); });
        if (!s.ok()) {
          // Say by how much: the values are what a reader needs here.
          for (int i = 0; i < e.doubles().values_size() && i < a.doubles().values_size(); ++i) {
            if (!DoublesMatch(e.doubles().values(i), a.doubles().values(i), exact)) {
              return differ("row ", i, ": got ", a.doubles().values(i), ", expected ",
                            e.doubles().values(i));
            }
          }
        }
        break;
      case v1::AggregationResult::kInt64S:
        s = compare(e.int64s().values(), a.int64s().values(),
                    [](std::int64_t x, std::int64_t y) { return x == y; });
        break;
      case v1::AggregationResult::kUint64S:
        s = compare(e.uint64s().values(), a.uint64s().values(),
                    [](std::uint64_t x, std::uint64_t y) { return x == y; });
        break;
      case v1::AggregationResult::kHistograms:
        s = compare(e.histograms().histograms(), a.histograms().histograms(),
                    [](const v1::Histogram& x, const v1::Histogram& y) {
                      return x.below() == y.below() && x.above() == y.above() &&
                             x.nan() == y.nan() &&
                             std::equal(x.counts().begin(), x.counts().end(),
                                        y.counts().begin(), y.counts().end());
                    });
        break;
      case v1::AggregationResult::kPartials:
        // States are merged further, not read: they match when every bit does.
        if (e.partials().SerializeAsString() != a.partials().SerializeAsString()) s = differ("partial states differ");
        break;
      case v1::AggregationResult::VALUES_NOT_SET:
        break;
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace tally::client
