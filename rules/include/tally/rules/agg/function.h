// What an aggregate function is, declared once: its names, its parameters
// and their limits, its result type per dtype, and the flags the engine,
// the wire and the clients route on. Each family's file (sums.h, ...)
// declares its functions with these types; registry.h gathers them.
// Plain C++ for the host: the kernels see only OpKind (op.h).
#pragma once

#include <array>
#include <charconv>
#include <limits>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::rules {

// The value type an answer takes on the wire (tally.proto, Op).
enum class ResultKind { kDouble = 0, kInt64 = 1, kUInt64 = 2, kHistogram = 3 };

namespace agg {

// How a function's result type follows the input's dtype.
enum class ResultRule : std::uint8_t {
  kLikeInput,  // float64 for float dtypes, int64 for signed, uint64 for unsigned (sums, extremes)
  kDouble,     // float64 whatever the dtype (means, variances)
  kCount,      // uint64 (counts, and any/all as 0 or 1)
  kIndex,      // int64, an element's position
  kHistogram,  // a histogram's counts
};

constexpr ResultKind KindOf(ResultRule rule, DType dtype) {
  switch (rule) {
    case ResultRule::kLikeInput:
      if (IsFloat(dtype)) return ResultKind::kDouble;
      return IsSigned(dtype) ? ResultKind::kInt64 : ResultKind::kUInt64;
    case ResultRule::kDouble: return ResultKind::kDouble;
    case ResultRule::kCount: return ResultKind::kUInt64;
    case ResultRule::kIndex: return ResultKind::kInt64;
    case ResultRule::kHistogram: return ResultKind::kHistogram;
  }
  return ResultKind::kDouble;
}

// One parameter, as every surface spells it.
enum class ParamId : std::uint8_t { kDdof, kBins, kLo, kHi, kQ, kMethod, kK, kPrecision, kAccuracy };

// numpy.quantile's method names, in QuantileMethod's order.
inline constexpr std::string_view kQuantileMethodNames[] = {
    "linear",      "inverted_cdf",    "averaged_inverted_cdf", "closest_observation", "interpolated_inverted_cdf",
    "hazen",       "weibull",         "median_unbiased",       "normal_unbiased",     "lower",
    "higher",      "midpoint",        "nearest"};
static_assert(std::size(kQuantileMethodNames) == kNumQuantileMethods);

struct Param {
  ParamId id;
  std::string_view field;  // tally.proto's field, in errors: "histogram.bins"
  std::string_view label;  // in an aggregation's label: "bins" (histogram(bins=8, ...))
  std::string_view text;   // in the command line's syntax: "BINS"
  bool integer = false;    // a whole number (written as one on the command line)
  bool optional = false;   // may be left out: then 0 (a list: empty)
  bool list = false;       // several numbers (q): Get gives none, OpSpec::q holds them
  // A choice of names (a quantile method): the value is the name's index.
  std::span<const std::string_view> choices = {};
};

// A scalar parameter's value (a choice's index); NaN for a list.
constexpr double Get(const OpSpec& op, ParamId id) {
  switch (id) {
    case ParamId::kDdof: return op.ddof;
    case ParamId::kBins: return op.histogram.bins;
    case ParamId::kLo: return op.histogram.lo;
    case ParamId::kHi: return op.histogram.hi;
    case ParamId::kQ: return std::numeric_limits<double>::quiet_NaN();
    case ParamId::kMethod: return static_cast<double>(op.method);
    case ParamId::kK: return op.k;
    case ParamId::kPrecision: return op.precision;
    case ParamId::kAccuracy: return op.relative_accuracy;
  }
  return 0.0;
}
// `value` must already be a valid value of the field's type (a bin count
// fits std::uint32_t, a choice is an index of it); ranges are CheckParams'
// business. A list's value is appended.
constexpr void Set(OpSpec& op, ParamId id, double value) {
  switch (id) {
    case ParamId::kDdof: op.ddof = value; break;
    case ParamId::kBins: op.histogram.bins = static_cast<std::uint32_t>(value); break;
    case ParamId::kLo: op.histogram.lo = value; break;
    case ParamId::kHi: op.histogram.hi = value; break;
    case ParamId::kQ: op.q.push_back(value); break;
    case ParamId::kMethod: op.method = static_cast<QuantileMethod>(value); break;
    case ParamId::kK: op.k = static_cast<std::uint32_t>(value); break;
    case ParamId::kPrecision: op.precision = static_cast<std::uint32_t>(value); break;
    case ParamId::kAccuracy: op.relative_accuracy = value; break;
  }
}

// A number as errors and labels write it: the fewest digits that read
// back as it.
inline std::string NumberText(double x) {
  char buffer[32];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), x);
  return std::string(buffer, end);
}

// The parameters a function takes and the one check of their values:
// nullopt when they are valid, else a sentence naming the field and its
// limit ("histogram.bins must be 1 to 65536, got 0."). The server, the
// C++ client and the command line all check through it.
struct ParamSet {
  std::span<const Param> params;
  std::optional<std::string> (*check)(const OpSpec&);
};
inline constexpr ParamSet kNoParams{{}, [](const OpSpec&) -> std::optional<std::string> { return std::nullopt; }};

class StateFunction;  // state.h

// An aggregate function. A NaN-skipping function is its plain function
// with skips_nan set (NanForm): same parameters, result and state.
// Which dtypes a function takes from exact sums: none; float dtypes only
// (an integer sum is numpy's native one, modulo 2^64); every dtype (means
// and moments: an integer's elements summed in 128 bits, their squares in
// 192, rules/exact_integers.h).
enum class Exact : std::uint8_t { kNone, kFloats, kEveryDtype };

struct Function {
  OpKind kind = OpKind::kSum;
  std::string_view name;                         // canonical: metrics labels, messages, tally.proto's OP_<NAME>
  std::array<std::string_view, 2> spellings{};   // other names the command line accepts ("var")
  int wire = 0;                                  // its tally.v1.Op number
  const ParamSet* params = &kNoParams;
  ResultRule result = ResultRule::kDouble;
  // What it is computed as on a dtype without NaN (integers, bool): a
  // NaN-skipping function's plain one (numpy's nan-functions are those
  // there), else itself (the registry checks which).
  OpKind plain = OpKind::kSum;
  bool skips_nan = false;        // numpy's nan-functions: NaN elements are left out
  bool answers_index = false;    // its answer and state are an element's position (offset by base_index)
  bool partial_state = false;    // has a partial state the wire and the clients carry and merge
  bool on_kernels = false;       // the GPU kernels compute it (else the router sends it to the cpu backend)
  bool refuses_empty = false;    // no value on an empty input (numpy raises)
  bool refuses_all_nan = false;  // no value on a row of only NaN (numpy.nanargmin raises)
  int values_per_row = 1;        // minmax answers two: min, then max (see ValuesPerRow)
  // Why a bool array is refused, or empty when bool is accepted.
  std::string_view refuses_bool = {};
  // Its state and steps, when the registry's own code keeps them (state.h):
  // the engine runs these functions through them, not the fused passes.
  const StateFunction* state = nullptr;
  bool holistic = false;         // the state is the elements themselves (bounded by the server's budget)
  bool per_q = false;            // answers one value per q (quantile, ddsketch; median: one)
  bool up_to_k = false;          // answers up to k values and their indices per row (topk, bottomk)
  // Whether it is computed from exact sums (rules/exact_sum.h), the same
  // bits on every path, and whether from its elements' squares' too.
  Exact exact = Exact::kNone;
  bool exact_squares = false;
  bool exact_squares_only = false;  // from its squares' exact sum alone, not its elements' (sum_squares)
  // Its float answer is rounded in the order the elements are taken (a
  // product), which the cpu and cuda backends do not share.
  bool rounds_in_order = false;
};

// Whether `f` of `dtype` is computed from exact sums.
constexpr bool ExactFor(const Function& f, DType dtype) {
  return f.exact == Exact::kEveryDtype || (f.exact == Exact::kFloats && IsFloat(dtype));
}

// The NaN-skipping twin of `plain`: numpy's nan-function of it.
constexpr Function NanForm(const Function& plain, OpKind kind, std::string_view name, int wire,
                           bool refuses_all_nan = false) {
  Function f = plain;
  f.kind = kind;
  f.name = name;
  f.spellings = {};
  f.wire = wire;
  f.plain = plain.kind;
  f.skips_nan = true;
  f.refuses_all_nan = refuses_all_nan;
  return f;
}

}  // namespace agg
}  // namespace tally::rules
