// Partial states: what one aggregation knows about some of an array's
// elements (of one row, when segmented), how two states merge, and how a
// state is finished into the op's value. Both backends finish their results
// through Finish*() below and the C++ client finishes merged states through
// the same functions, so a state finished by the client is bitwise the value
// the server would have answered. tally.proto (PartialState) is the wire
// form of PartialState and states these rules for other languages.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/state.h"
#include "tally/rules/combine.h"
#include "tally/rules/exact_moments.h"
#include "tally/rules/exact_sum.h"
#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::rules {

// The version of these rules; a state of another version is refused.
inline constexpr std::uint32_t kPartialStateVersion = 1;

// A histogram's counts: one per bin, then what fell outside the range.
struct HistogramCounts {
  std::vector<std::uint64_t> counts;
  std::uint64_t below = 0;  // values < lo
  std::uint64_t above = 0;  // values > hi
  std::uint64_t nan = 0;    // NaN values

  bool operator==(const HistogramCounts&) const = default;
};

// One aggregation's state over some elements. Which fields mean something
// depends on the op (and, for sums and extremes, on the dtype: float64 for
// float dtypes, int64 for signed, uint64 for unsigned integers); the others
// stay zero.
struct PartialState {
  std::uint64_t count = 0;  // elements covered; every op
  // kSum: the sum in numpy's accumulator type (integers wrap modulo 2^64).
  double float_sum = 0.0;
  std::int64_t int_sum = 0;
  std::uint64_t uint_sum = 0;
  // kSumSquares.
  double sum_squares = 0.0;
  // kMean: mean (m2 stays 0); kVariance, kStddev: mean and m2 (the sum of
  // squared deviations from the mean), as rules::Moments.
  double mean = 0.0;
  double m2 = 0.0;
  // kMin, kMax, kArgmin, kArgmax: the extreme, when count > 0. kArgmin and
  // kArgmax also carry its index (plus the caller's base index); -1 when
  // count is 0.
  double float_extreme = 0.0;
  std::int64_t int_extreme = 0;
  std::uint64_t uint_extreme = 0;
  std::int64_t index = -1;
  // kHistogram.
  HistogramCounts histogram;
  // kProduct: the product in numpy's accumulator type, by dtype as the
  // sums (integers wrap modulo 2^64); meaningless when count is 0 (the
  // empty product is 1).
  double float_product = 0.0;
  std::int64_t int_product = 0;
  std::uint64_t uint_product = 0;
  // kCountNonzero, kAny, kAll: the elements that are not zero.
  std::uint64_t nonzero = 0;
  // kPtp: the min in the extreme fields above and the max here, by dtype
  // as the extremes; meaningless when count is 0. numpy.ptp's difference
  // is taken when the state is finished (PtpOf), so states merge.
  double float_max = 0.0;
  std::int64_t int_max = 0;
  std::uint64_t uint_max = 0;
  // The NaN-skipping ops: every element covered, NaN or not (count is the
  // non-NaN ones). Tells an all-NaN part (nanmin is NaN) from an empty one
  // (nanmin has no value); merged by adding, even where count is 0.
  std::uint64_t elements = 0;
  // A function whose state the registry keeps (tally/rules/agg/state.h):
  // the state as the function serialises it; count and elements are the
  // valid elements it covers.
  std::string function_state;
  // kSum and kNanSum of float dtypes where the backend keeps it: the exact
  // sum's bytes (ExactSum::Bytes; float_sum is it rounded to float64).
  // Empty: none kept, and float_sum merges by float64 addition. Also
  // kVariance and kStddev's (and their NaN-skipping forms'), beside:
  std::string exact_sum;
  // kSumSquares, kVariance and kStddev of float dtypes where the backend
  // keeps it: the exact sum of the squares' bytes (sum_squares is it
  // rounded to float64; a variance's m2 is ExactSecondMoment of the two
  // exact sums, its mean the exact sum rounded over the count).
  std::string exact_sum_squares;

  bool operator==(const PartialState&) const = default;
};

// numpy.ptp of elements of type V: max - min in V. float32 and float64
// subtract in their own type (and may overflow to inf); float16 and
// bfloat16 in float32, rounded once to the dtype (exactly their own
// subtraction: float32 has more than twice their precision); integers wrap
// at their width, computed unsigned since signed overflow is undefined in
// C++. A NaN extreme gives NaN.
template <typename V>
TALLY_HD V PtpIn(V min, V max) {
  if constexpr (std::is_floating_point_v<V>) {
    return max - min;
  } else if constexpr (kIsFloatValue<V>) {
    return RoundTo<V>(static_cast<float>(max) - static_cast<float>(min));
  } else {
    using U = std::make_unsigned_t<V>;
    return static_cast<V>(static_cast<U>(static_cast<U>(max) - static_cast<U>(min)));
  }
}

inline Moments MomentsOf(const PartialState& s) {
  return Moments{static_cast<double>(s.count), s.mean, s.m2};
}

// A variance's mean and m2 from its exact sums, over s.count elements: the
// mean the sum rounded once over the count, m2 ExactSecondMoment. What
// every backend and merge that keeps both sums puts in the state.
inline void PutExactMoments(const ExactSum& sum, const ExactSum& squares, PartialState& s) {
  s.mean = sum.ToDouble() / static_cast<double>(s.count);
  s.m2 = ExactSecondMoment(sum, squares, s.count);
}

namespace partial_detail {

// An exact sum kept as `bytes` beside its `value` rounded to float64: the
// bytes, or the value as one element where none are kept (bytes the wire
// has checked; unreadable ones count as none).
inline ExactSum ExactFrom(const std::string& bytes, double value) {
  if (!bytes.empty()) {
    if (std::optional<ExactSum> sum = ExactSum::FromBytes(bytes)) return *sum;
  }
  ExactSum sum;
  sum.Add(value);
  return sum;
}
inline ExactSum ExactOf(const PartialState& s) { return ExactFrom(s.exact_sum, s.float_sum); }
inline ExactSum ExactSquaresOf(const PartialState& s) { return ExactFrom(s.exact_sum_squares, s.sum_squares); }

// A sum's fields (its exact bytes and its float64 value) of a followed by
// b into r: exactly where either keeps its bytes (the other counting as
// its value), else by float64 addition.
inline void MergeSum(std::string PartialState::*bytes, double PartialState::*value, const PartialState& a,
                     const PartialState& b, PartialState& r) {
  if ((a.*bytes).empty() && (b.*bytes).empty()) {
    r.*value = a.*value + b.*value;
    return;
  }
  ExactSum sum = ExactFrom(a.*bytes, a.*value);
  sum.Merge(ExactFrom(b.*bytes, b.*value));
  r.*bytes = sum.Bytes();
  r.*value = sum.ToDouble();
}

template <bool kMax, typename T>
T Extreme(T a, T b) {
  return kMax ? MaxNan(a, b) : MinNan(a, b);
}

// A triple of fields (float64, int64, uint64) holding an extreme by dtype.
struct ExtremeFields {
  double PartialState::*f;
  std::int64_t PartialState::*i;
  std::uint64_t PartialState::*u;
};
inline constexpr ExtremeFields kExtremeFields{&PartialState::float_extreme, &PartialState::int_extreme,
                                              &PartialState::uint_extreme};
inline constexpr ExtremeFields kMaxFields{&PartialState::float_max, &PartialState::int_max, &PartialState::uint_max};

// The extreme of two non-empty states, in the dtype's member of `at`
// (the extreme fields; ptp's max fields, beside its min).
template <bool kMax>
void MergeExtreme(DType dtype, const PartialState& b, PartialState& r, const ExtremeFields& at = kExtremeFields) {
  if (IsFloat(dtype)) {
    r.*at.f = Extreme<kMax>(r.*at.f, b.*at.f);
  } else if (IsSigned(dtype)) {
    r.*at.i = Extreme<kMax>(r.*at.i, b.*at.i);
  } else {
    r.*at.u = Extreme<kMax>(r.*at.u, b.*at.u);
  }
}

// numpy.ptp from a non-empty state over `dtype` (its min and max, exact in
// the wide fields), in the member of the triple the dtype's answers take.
struct PtpValue {
  double f = 0.0;
  std::int64_t i = 0;
  std::uint64_t u = 0;
};
inline PtpValue PtpOf(DType dtype, const PartialState& s) {
  return VisitDType(dtype, [&](auto d) {
    using V = typename Traits<decltype(d)::value>::value;
    PtpValue out;
    if constexpr (kIsFloatValue<V>) {
      out.f = static_cast<double>(PtpIn<V>(RoundTo<V>(s.float_extreme), RoundTo<V>(s.float_max)));
    } else if constexpr (std::is_signed_v<V>) {
      out.i = static_cast<std::int64_t>(PtpIn<V>(static_cast<V>(s.int_extreme), static_cast<V>(s.int_max)));
    } else {
      out.u = static_cast<std::uint64_t>(PtpIn<V>(static_cast<V>(s.uint_extreme), static_cast<V>(s.uint_max)));
    }
    return out;
  });
}

// numpy's argmin/argmax rule (rules::PickArg) on two non-empty states.
template <bool kMax>
void MergeArg(DType dtype, const PartialState& b, PartialState& r) {
  auto pick = [&](auto av, auto bv) {
    using T = decltype(av);
    const ArgCandidate<T> x{av, r.index}, y{bv, b.index};
    const ArgCandidate<T> w = PickArg<kMax>(x, y);
    return std::pair<T, std::int64_t>(w.value, w.index);
  };
  if (IsFloat(dtype)) {
    std::tie(r.float_extreme, r.index) = pick(r.float_extreme, b.float_extreme);
  } else if (IsSigned(dtype)) {
    std::tie(r.int_extreme, r.index) = pick(r.int_extreme, b.int_extreme);
  } else {
    std::tie(r.uint_extreme, r.index) = pick(r.uint_extreme, b.uint_extreme);
  }
}

}  // namespace partial_detail

// The state of the elements `a` and `b` cover together. `a` and `b` are
// states of the same op (same histogram spec) over the same dtype; callers
// check that. Associative: integers, counts, extremes, indices and
// histograms exactly (integer sums modulo 2^64, as numpy); float sums and
// moments deterministic for a given merge tree (the same rounding as the
// backends' own merges of their blocks). Argmin/argmax keep numpy's first
// occurrence whichever side comes first; the other merges put `a` first.
// Whether a row's merged state has a value for `kind` over `dtype` (the one
// test servers and clients make before finishing a state): a function that
// refuses empty input has none for a state of no element; on float dtypes
// a NaN-skipping one that does not refuse all-NaN rows (nanmin, nanmax)
// answers NaN for a row of only NaN (numpy warns) but has none for an
// empty one (numpy raises). On integer dtypes the NaN-skipping ops are the
// plain ones.
inline bool HasValue(OpKind kind, DType dtype, const PartialState& s) {
  const agg::Function& f = agg::Of(kind);
  if (s.count > 0 || !f.refuses_empty) return true;
  if (!IsFloat(dtype) || !f.skips_nan) return false;
  return !f.refuses_all_nan && s.elements > 0;
}

// A function whose state the registry keeps: whether `s` holds a state of
// op over dtype that its steps read (nullopt), or what is wrong with it.
// States from outside (a client's) are checked before they are merged.
inline std::optional<std::string> CheckFunctionState(const OpSpec& op, DType dtype, const PartialState& s) {
  if (s.function_state.empty()) return std::nullopt;  // the empty state
  std::unique_ptr<agg::State> state = agg::Of(op.kind).state->Init(op, dtype);
  return state->Deserialize(s.function_state);
}

// Such a function's state of `a` and then `b` (both checked, or made by
// the same steps); an empty function_state is the empty state.
inline std::string MergeFunctionStates(const OpSpec& op, DType dtype, const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  const agg::StateFunction& f = *agg::Of(op.kind).state;
  std::unique_ptr<agg::State> into = f.Init(op, dtype);
  std::unique_ptr<agg::State> later = f.Init(op, dtype);
  if (into->Deserialize(a) || later->Deserialize(b)) return {};  // unchecked input: the empty state
  into->Combine(*later);
  std::string out;
  into->Serialize(out);
  return out;
}

// Such a function's answer for a row from its state; a sentence when the
// row has none (quantile of no element: callers refuse it first, HasValue).
inline std::optional<std::string> FinishFunctionState(const OpSpec& op, DType dtype, const PartialState& s,
                                                      agg::RowAnswer& out) {
  std::unique_ptr<agg::State> state = agg::Of(op.kind).state->Init(op, dtype);
  if (!s.function_state.empty()) {
    if (std::optional<std::string> bad = state->Deserialize(s.function_state)) return bad;
  }
  return state->Finalize(out);
}

inline PartialState Merge(const OpSpec& op, DType dtype, const PartialState& a, const PartialState& b) {
  if (agg::Of(op.kind).state != nullptr) {
    PartialState r = a;
    r.count = a.count + b.count;
    r.elements = a.elements + b.elements;
    r.function_state = MergeFunctionStates(op, dtype, a.function_state, b.function_state);
    return r;
  }
  if (a.count == 0 || b.count == 0) {  // an empty state is the identity (but for its elements)
    PartialState r = b.count == 0 ? a : b;
    r.elements = a.elements + b.elements;
    return r;
  }
  PartialState r = a;
  r.count = a.count + b.count;
  r.elements = a.elements + b.elements;
  // A NaN-skipping op's state has its plain op's shape over the non-NaN
  // elements (count is theirs), so it merges the same way.
  switch (PlainOf(op.kind)) {
    case OpKind::kSum:
      partial_detail::MergeSum(&PartialState::exact_sum, &PartialState::float_sum, a, b, r);
      r.int_sum = static_cast<std::int64_t>(static_cast<std::uint64_t>(a.int_sum) +
                                            static_cast<std::uint64_t>(b.int_sum));
      r.uint_sum = a.uint_sum + b.uint_sum;
      break;
    case OpKind::kSumSquares:
      partial_detail::MergeSum(&PartialState::exact_sum_squares, &PartialState::sum_squares, a, b, r);
      break;
    case OpKind::kMean:
      if (!a.exact_sum.empty() && !b.exact_sum.empty()) {
        // Both keep their exact sums: the mean of the merged sum, rounded
        // once to float64, over the count.
        ExactSum sum = partial_detail::ExactOf(a);
        sum.Merge(partial_detail::ExactOf(b));
        r.exact_sum = sum.Bytes();
        r.mean = sum.ToDouble() / static_cast<double>(r.count);
        r.m2 = 0.0;
        break;
      }
      r.exact_sum.clear();
      [[fallthrough]];
    case OpKind::kVariance:
    case OpKind::kStddev: {
      if (!a.exact_sum.empty() && !a.exact_sum_squares.empty() && !b.exact_sum.empty() &&
          !b.exact_sum_squares.empty()) {
        // Both keep their exact sums: the moments of the merged sums.
        ExactSum sum = partial_detail::ExactOf(a);
        sum.Merge(partial_detail::ExactOf(b));
        ExactSum squares = partial_detail::ExactSquaresOf(a);
        squares.Merge(partial_detail::ExactSquaresOf(b));
        r.exact_sum = sum.Bytes();
        r.exact_sum_squares = squares.Bytes();
        PutExactMoments(sum, squares, r);
        break;
      }
      r.exact_sum.clear();
      r.exact_sum_squares.clear();
      const Moments m = MergeMoments(MomentsOf(a), MomentsOf(b));
      r.mean = m.mean;
      r.m2 = PlainOf(op.kind) == OpKind::kMean ? 0.0 : m.m2;
      break;
    }
    case OpKind::kMin: partial_detail::MergeExtreme<false>(dtype, b, r); break;
    case OpKind::kMax: partial_detail::MergeExtreme<true>(dtype, b, r); break;
    case OpKind::kArgmin: partial_detail::MergeArg<false>(dtype, b, r); break;
    case OpKind::kArgmax: partial_detail::MergeArg<true>(dtype, b, r); break;
    case OpKind::kCount: break;
    case OpKind::kHistogram:
      for (std::size_t i = 0; i < r.histogram.counts.size() && i < b.histogram.counts.size(); ++i) {
        r.histogram.counts[i] += b.histogram.counts[i];
      }
      r.histogram.below += b.histogram.below;
      r.histogram.above += b.histogram.above;
      r.histogram.nan += b.histogram.nan;
      break;
    case OpKind::kProduct:
      r.float_product = a.float_product * b.float_product;
      r.int_product = static_cast<std::int64_t>(static_cast<std::uint64_t>(a.int_product) *
                                                static_cast<std::uint64_t>(b.int_product));
      r.uint_product = a.uint_product * b.uint_product;
      break;
    case OpKind::kCountNonzero:
    case OpKind::kAny:
    case OpKind::kAll: r.nonzero = a.nonzero + b.nonzero; break;
    case OpKind::kPtp:
      partial_detail::MergeExtreme<false>(dtype, b, r);
      partial_detail::MergeExtreme<true>(dtype, b, r, partial_detail::kMaxFields);
      break;
    // PlainOf() leaves no NaN-skipping kind.
    default: break;
  }
  return r;
}

// The op's value from a state. Which of the three applies is the wire
// contract's rule (tally.proto, Op): float64 for means, variances, sums of
// squares and float dtypes' sums and extremes; int64 for signed dtypes' sums
// and extremes and for indices; uint64 for counts and unsigned dtypes' sums
// and extremes. Histograms are their state's counts. Min, max, argmin and
// argmax of an empty state have no value; callers refuse them first.
//
// NaN-skipping ops: the state covers the non-NaN elements (count is
// theirs). nansum of none is 0, nanmean NaN, nanmin and nanmax NaN (numpy
// warns "All-NaN slice encountered" and returns NaN), nanvar and nanstd NaN
// where count - ddof <= 0. nanargmin and nanargmax of none have no value
// (numpy raises); callers refuse them first. These rules are the float
// dtypes'; on integer dtypes callers finish the plain op (PlainOf).
//
// kProduct of none is 1; kCountNonzero is the nonzero count, kAny 1 when it
// is above 0, kAll 1 when it is count (so 1 for none). kPtp is max - min
// in the dtype (PtpOf); of none it has no value: callers refuse it first.
// `dtype` is the elements' (only kPtp's answer depends on more than the
// state's fields).
namespace partial_detail {
inline double FinishedDouble(const OpSpec& op, DType dtype, const PartialState& s) {
  switch (op.kind) {
    case OpKind::kProduct: return s.count == 0 ? 1.0 : s.float_product;
    case OpKind::kPtp: return s.count == 0 ? 0.0 : partial_detail::PtpOf(dtype, s).f;
    case OpKind::kNanSum: return s.float_sum;
    case OpKind::kNanMin:
    case OpKind::kNanMax: return s.count == 0 ? __builtin_nan("") : s.float_extreme;
    case OpKind::kNanMean: return MeanOf(MomentsOf(s));
    case OpKind::kNanVariance: return NanVarianceOf(MomentsOf(s), op.ddof);
    case OpKind::kNanStddev: return NanStddevOf(MomentsOf(s), op.ddof);
    case OpKind::kSum: return s.float_sum;
    case OpKind::kMin:
    case OpKind::kMax: return s.float_extreme;
    case OpKind::kMean: return MeanOf(MomentsOf(s));
    case OpKind::kSumSquares: return s.sum_squares;
    case OpKind::kVariance: return VarianceOf(MomentsOf(s), op.ddof);
    case OpKind::kStddev: return StddevOf(MomentsOf(s), op.ddof);
    default: return __builtin_nan("");
  }
}
}  // namespace partial_detail

// Every NaN answer is numpy's default NaN (quiet, sign clear): which NaN
// element a min or max keeps, or what payload arithmetic leaves, depends on
// the path (the backends' orders differ), and the answer must not.
inline double FinishDouble(const OpSpec& op, DType dtype, const PartialState& s) {
  const double v = partial_detail::FinishedDouble(op, dtype, s);
  return v != v ? __builtin_nan("") : v;
}
inline std::int64_t FinishInt64(const OpSpec& op, DType dtype, const PartialState& s) {
  switch (PlainOf(op.kind)) {
    case OpKind::kSum: return s.int_sum;
    case OpKind::kMin:
    case OpKind::kMax: return s.int_extreme;
    case OpKind::kArgmin:
    case OpKind::kArgmax: return s.index;
    case OpKind::kProduct: return s.count == 0 ? 1 : s.int_product;
    case OpKind::kPtp: return s.count == 0 ? 0 : partial_detail::PtpOf(dtype, s).i;
    default: return 0;
  }
}
inline std::uint64_t FinishUInt64(const OpSpec& op, DType dtype, const PartialState& s) {
  switch (PlainOf(op.kind)) {
    case OpKind::kSum: return s.uint_sum;
    case OpKind::kMin:
    case OpKind::kMax: return s.uint_extreme;
    case OpKind::kCount: return s.count;
    case OpKind::kProduct: return s.count == 0 ? 1 : s.uint_product;
    case OpKind::kPtp: return s.count == 0 ? 0 : partial_detail::PtpOf(dtype, s).u;
    case OpKind::kCountNonzero: return s.nonzero;
    case OpKind::kAny: return s.nonzero > 0 ? 1 : 0;
    case OpKind::kAll: return s.nonzero == s.count ? 1 : 0;
    default: return 0;
  }
}

}  // namespace tally::rules
