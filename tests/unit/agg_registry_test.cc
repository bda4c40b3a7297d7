// The registry of aggregate functions (tally/rules/agg): every OpKind's
// facts, its names against tally.proto's Op, its lookups, and the one check
// of parameters, whose messages name the field and the limit.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/state.h"
#include "tally/v1/tally.pb.h"

namespace tally::rules::agg {
namespace {

// Each function's facts hang together: a function that keeps its own state
// has its steps and a partial state and is no kernel's; one answer per q
// takes q, up to k takes k; an index-answering one is the arg family or
// top-k.
TEST(AggRegistry, FactsAreConsistent) {
  for (int k = 0; k < kNumOpKinds; ++k) {
    const auto kind = static_cast<OpKind>(k);
    const Function& f = Of(kind);
    SCOPED_TRACE(f.name);
    EXPECT_EQ(f.kind, kind);
    EXPECT_EQ(std::string_view(Name(kind)), f.name);
    if (f.state != nullptr) {
      EXPECT_TRUE(f.partial_state);
      EXPECT_FALSE(f.on_kernels);
      EXPECT_NE(f.state->Init(OpSpec{.kind = kind}, DType::kFloat64), nullptr);
    }
    const auto takes = [&](ParamId id) {
      for (const Param& p : f.params->params) {
        if (p.id == id) return true;
      }
      return false;
    };
    EXPECT_EQ(f.per_q, takes(ParamId::kQ));
    EXPECT_EQ(f.up_to_k, takes(ParamId::kK));
    if (f.answers_index) {
      EXPECT_TRUE(f.up_to_k || f.result == ResultRule::kIndex);
    }
    if (f.skips_nan) {
      EXPECT_FALSE(Of(f.plain).skips_nan);
      EXPECT_EQ(f.exact, Of(f.plain).exact) << "a NaN-skipping form is exact where its plain one is";
    }
    if (f.exact_squares) EXPECT_EQ(f.exact, Exact::kEveryDtype);
    if (f.exact != Exact::kNone) EXPECT_TRUE(f.on_kernels && f.partial_state);
  }
}

// The functions computed from exact sums (the same bits on every path):
// sums for float dtypes, means and moments for every dtype; a float prod
// rounds in the order it is taken.
TEST(AggRegistry, ExactSumsAreTheSumsAndMoments) {
  for (const Function& f : kFunctions) {
    SCOPED_TRACE(f.name);
    const std::string_view plain = Of(f.plain).name;
    const bool sum = plain == "sum", moment = plain == "mean" || plain == "sum_squares" || plain == "variance" ||
                                              plain == "stddev";
    EXPECT_EQ(ExactFor(f, DType::kFloat32), sum || moment);
    EXPECT_EQ(ExactFor(f, DType::kInt64), moment);
    EXPECT_EQ(f.exact_squares, plain == "sum_squares" || plain == "variance" || plain == "stddev");
    EXPECT_EQ(f.exact_squares_only, plain == "sum_squares");
    EXPECT_EQ(f.rounds_in_order, plain == "prod");
  }
}

// Each function's wire number is tally.proto's OP_<NAME>, and every Op
// the proto defines has a function.
TEST(AggRegistry, WireNumbersAreTheProtosOps) {
  for (const Function& f : kFunctions) {
    std::string upper = "OP_";
    for (char c : f.name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(v1::Op_Name(static_cast<v1::Op>(f.wire)), upper);
    EXPECT_EQ(FindByWire(f.wire), &f);
  }
  const google::protobuf::EnumDescriptor* ops = v1::Op_descriptor();
  for (int i = 0; i < ops->value_count(); ++i) {
    const int number = ops->value(i)->number();
    if (number == v1::OP_UNSPECIFIED) {
      EXPECT_EQ(FindByWire(number), nullptr);
    } else {
      EXPECT_NE(FindByWire(number), nullptr) << ops->value(i)->name();
    }
  }
  EXPECT_EQ(FindByWire(99), nullptr);
}

// tally.proto's op_facts on each Op value (what the Python package reads
// instead of a table of its own) say what the registry says.
TEST(AggRegistry, TheProtosOpFactsAreTheRegistrys) {
  for (const Function& f : kFunctions) {
    SCOPED_TRACE(f.name);
    const google::protobuf::EnumValueDescriptor* value = v1::Op_descriptor()->FindValueByNumber(f.wire);
    ASSERT_NE(value, nullptr);
    const v1::OpFacts& facts = value->options().GetExtension(v1::op_facts);
    std::vector<std::string> spellings;
    for (std::string_view s : f.spellings) {
      if (!s.empty()) spellings.emplace_back(s);
    }
    EXPECT_EQ(std::vector<std::string>(facts.spellings().begin(), facts.spellings().end()), spellings);
    std::vector<std::string> params;
    for (const Param& p : f.params->params) params.emplace_back(p.field);
    EXPECT_EQ(std::vector<std::string>(facts.params().begin(), facts.params().end()), params);
    EXPECT_EQ(facts.answers_index(), f.answers_index);
    EXPECT_EQ(facts.refuses_empty(), f.refuses_empty);
    EXPECT_EQ(facts.function_state(), f.state != nullptr);
  }
}

TEST(AggRegistry, FindsEverySpelling) {
  EXPECT_EQ(FindByName("variance")->kind, OpKind::kVariance);
  EXPECT_EQ(FindByName("var")->kind, OpKind::kVariance);
  EXPECT_EQ(FindByName("sumsq")->kind, OpKind::kSumSquares);
  EXPECT_EQ(FindByName("nnz")->kind, OpKind::kCountNonzero);
  EXPECT_EQ(FindByName("hist")->kind, OpKind::kHistogram);
  EXPECT_EQ(FindByName("nanvar")->kind, OpKind::kNanVariance);
  EXPECT_EQ(FindByName("median")->kind, OpKind::kMedian);
  EXPECT_EQ(FindByName("nunique")->kind, OpKind::kCountDistinct);
  EXPECT_EQ(FindByName("mode")->kind, OpKind::kMode);
  EXPECT_EQ(FindByName("modes"), nullptr);
  EXPECT_EQ(FindByName(""), nullptr);
  EXPECT_EQ(NameList().substr(0, 15), "sum, min, max, ");
  EXPECT_EQ(NameList().substr(NameList().size() - 20), "count_distinct, mode");
}

TEST(AggRegistry, ResultTypesFollowTheDtype) {
  EXPECT_EQ(ResultKindOf(OpKind::kSum, DType::kInt8), ResultKind::kInt64);
  EXPECT_EQ(ResultKindOf(OpKind::kNanSum, DType::kUInt16), ResultKind::kUInt64);
  EXPECT_EQ(ResultKindOf(OpKind::kNanMax, DType::kFloat16), ResultKind::kDouble);
  EXPECT_EQ(ResultKindOf(OpKind::kMean, DType::kInt32), ResultKind::kDouble);
  EXPECT_EQ(ResultKindOf(OpKind::kNanArgmin, DType::kFloat32), ResultKind::kInt64);
  EXPECT_EQ(ResultKindOf(OpKind::kAny, DType::kFloat64), ResultKind::kUInt64);
  EXPECT_EQ(ResultKindOf(OpKind::kPtp, DType::kInt16), ResultKind::kInt64);
  EXPECT_EQ(ResultKindOf(OpKind::kHistogram, DType::kBool), ResultKind::kHistogram);
  // A NaN-skipping function answers in its plain function's type.
  for (const Function& f : kFunctions) {
    for (DType d : kAllDTypes) EXPECT_EQ(ResultKindOf(f.kind, d), ResultKindOf(f.plain, d)) << f.name;
  }
}

TEST(AggRegistry, NanSkippingIsThePlainFunctionOnIntegers) {
  const OpSpec nanvar{.kind = OpKind::kNanVariance, .ddof = 1.5};
  EXPECT_EQ(AsComputedFor(nanvar, DType::kInt32).kind, OpKind::kVariance);
  EXPECT_EQ(AsComputedFor(nanvar, DType::kInt32).ddof, 1.5);
  EXPECT_EQ(AsComputedFor(nanvar, DType::kBFloat16).kind, OpKind::kNanVariance);
  EXPECT_EQ(AsComputedFor(OpSpec{.kind = OpKind::kProduct}, DType::kBool).kind, OpKind::kProduct);
}

TEST(AggRegistry, ParameterErrorsNameTheFieldAndTheLimit) {
  EXPECT_FALSE(CheckParams(OpSpec{.kind = OpKind::kNanStddev, .ddof = 2}));
  EXPECT_EQ(*CheckParams(OpSpec{.kind = OpKind::kNanStddev, .ddof = -1}), "ddof must be finite and >= 0, got -1.");
  EXPECT_EQ(*CheckParams(OpSpec{.kind = OpKind::kVariance, .ddof = std::numeric_limits<double>::infinity()}),
            "ddof must be finite and >= 0, got inf.");
  // ddof is not sum's parameter: whatever it holds is ignored.
  EXPECT_FALSE(CheckParams(OpSpec{.kind = OpKind::kSum, .ddof = -1}));
  const auto hist = [](std::uint32_t bins, double lo, double hi) {
    return OpSpec{.kind = OpKind::kHistogram, .histogram = {bins, lo, hi}};
  };
  EXPECT_FALSE(CheckParams(hist(1, 0, 1)));
  EXPECT_FALSE(CheckParams(hist(kMaxHistogramBins, -1, 1)));
  EXPECT_EQ(*CheckParams(hist(0, 0, 1)), "histogram.bins must be 1 to 65536, got 0.");
  EXPECT_EQ(*CheckParams(hist(65537, 0, 1)), "histogram.bins must be 1 to 65536, got 65537.");
  EXPECT_EQ(*CheckParams(hist(4, 0, std::nan(""))), "histogram.lo and histogram.hi must be finite, got [0, nan].");
  EXPECT_EQ(*CheckParams(hist(4, 2, 1.5)), "histogram.lo must be less than histogram.hi, got [2, 1.5].");
  EXPECT_EQ(*CheckParams(hist(4, -1e308, 1e308)),
            "histogram range [-1e+308, 1e+308] is too wide: hi - lo overflows float64.");
}

// Parameters compared are the function's own: nanvar's ddof counts, as
// var's does; sum's does not.
TEST(AggRegistry, SameParamsComparesTheFunctionsParameters) {
  EXPECT_FALSE(SameParams(OpSpec{.kind = OpKind::kNanVariance, .ddof = 0}, OpSpec{.kind = OpKind::kNanVariance, .ddof = 1}));
  EXPECT_TRUE(SameParams(OpSpec{.kind = OpKind::kNanStddev, .ddof = 1}, OpSpec{.kind = OpKind::kNanStddev, .ddof = 1}));
  EXPECT_TRUE(SameParams(OpSpec{.kind = OpKind::kSum, .ddof = 0}, OpSpec{.kind = OpKind::kSum, .ddof = 3}));
  EXPECT_FALSE(SameParams(OpSpec{.kind = OpKind::kHistogram, .histogram = {4, 0, 1}},
                          OpSpec{.kind = OpKind::kHistogram, .histogram = {4, 0, 2}}));
}

}  // namespace
}  // namespace tally::rules::agg
