// The functions whose state the registry keeps, run above a backend
// (server/engine/functions): a plan that mixes them with fused ops answers
// each in its place; any chunking gives the same answer; rows, segments and
// masks follow the functions' rules row by row; the merging path that a
// GPU dataset's shards take gives bitwise the one-pass state; holistic
// states are held within --max_holistic_bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/functions/function_router.h"
#include "server/engine/reduce_pieces.h"
#include "tally/rules/agg/registry.h"
#include "tests/unit/cpu_test_util.h"
#include "tests/unit/test_seed.h"

namespace tally::testing {
namespace {

std::unique_ptr<Backend> Router(std::uint64_t max_holistic_bytes = std::uint64_t{1} << 30) {
  return MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), max_holistic_bytes);
}

OpSpec Quantile(std::vector<double> q, OpKind kind = OpKind::kQuantile) {
  OpSpec op{.kind = kind};
  op.q = std::move(q);
  return op;
}
OpSpec TopK(std::uint32_t k, OpKind kind = OpKind::kTopK) {
  OpSpec op{.kind = kind};
  op.k = k;
  return op;
}

// One row's answer of `op` over `values`, by the function's steps alone.
template <typename V>
rules::agg::RowAnswer Direct(const OpSpec& op, DType dtype, std::span<const V> values) {
  std::unique_ptr<rules::agg::State> s = rules::agg::Of(op.kind).state->Init(op, dtype);
  s->Update(rules::agg::Elements{.data = reinterpret_cast<const std::byte*>(values.data()), .count = values.size()});
  rules::agg::RowAnswer out;
  EXPECT_EQ(s->Finalize(out), std::nullopt);
  return out;
}

bool SameAnswer(const rules::agg::RowAnswer& a, const rules::agg::RowAnswer& b) {
  if (a.doubles.size() != b.doubles.size()) return false;
  for (std::size_t i = 0; i < a.doubles.size(); ++i) {
    if (std::bit_cast<std::uint64_t>(a.doubles[i]) != std::bit_cast<std::uint64_t>(b.doubles[i])) return false;
  }
  return a.int64s == b.int64s && a.uint64s == b.uint64s && a.indices == b.indices;
}

TEST(FunctionRouter, MixedPlanAnswersEachOpInPlaceForAnyChunking) {
  TALLY_SEEDED_RNG(rng);
  const Array a = RandomArray(DType::kFloat64, 10'000, rng, Fill::kWide);
  const std::span<const double> v = a.As<double>();
  auto backend = Router();
  const AggregationPlan plan = Plan(a, 0, {Op(OpKind::kSum), Quantile({0.1, 0.5, 0.99}), Op(OpKind::kMax),
                                          TopK(5), Op(OpKind::kCountDistinct)});
  absl::StatusOr<AggregationResult> whole = RunPieces(*backend, plan, a.bytes);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->values.size(), 5u);
  absl::StatusOr<AggregationResult> fused = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kSum), Op(OpKind::kMax)}), a.bytes);
  ASSERT_TRUE(fused.ok());
  EXPECT_TRUE(SameBits(whole->values[0], fused->values[0]));
  EXPECT_TRUE(SameBits(whole->values[2], fused->values[1]));
  const auto& q = std::get<std::vector<rules::agg::RowAnswer>>(whole->values[1]);
  EXPECT_TRUE(SameAnswer(q.at(0), Direct(plan.ops[1], DType::kFloat64, v)));
  const auto& top = std::get<std::vector<rules::agg::RowAnswer>>(whole->values[3]);
  EXPECT_EQ(top.at(0).doubles.front(), *std::max_element(v.begin(), v.end()));
  EXPECT_EQ(std::get<std::vector<rules::agg::RowAnswer>>(whole->values[4]).at(0).uint64s.at(0),
            Direct(plan.ops[4], DType::kFloat64, v).uint64s.at(0));
  for (const std::vector<std::uint64_t>& pieces : {std::vector<std::uint64_t>{1}, {7, 1000, 3}, {4096}}) {
    absl::StatusOr<AggregationResult> again = RunPieces(*backend, plan, a.bytes, pieces);
    ASSERT_TRUE(again.ok()) << again.status();
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
      if (const auto* w = std::get_if<std::vector<rules::agg::RowAnswer>>(&whole->values[i])) {
        EXPECT_TRUE(SameAnswer(w->at(0), std::get<std::vector<rules::agg::RowAnswer>>(again->values[i]).at(0)));
      } else {
        EXPECT_TRUE(SameBits(whole->values[i], again->values[i]));
      }
    }
  }
}

TEST(FunctionRouter, SegmentsAndMasksAnswerRowByRow) {
  TALLY_SEEDED_RNG(rng);
  const Array a = RandomArray(DType::kInt32, 3000, rng, Fill::kNarrow);
  const std::span<const std::int32_t> v = a.As<std::int32_t>();
  AggregationPlan plan = Plan(a, 0, {Op(OpKind::kMedian), TopK(3, OpKind::kBottomK), Op(OpKind::kCountDistinct)});
  plan.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0, 10, 10, 1500, 3000});
  std::vector<std::uint32_t> mask((a.length + 31) / 32);
  for (std::uint64_t i = 0; i < a.length; ++i) {
    if (i % 3 != 0) mask[i / 32] |= 1u << (i % 32);
  }
  plan.array.validity = std::make_shared<const std::vector<std::uint32_t>>(mask);
  auto backend = Router();
  absl::StatusOr<AggregationResult> r = RunPieces(*backend, plan, a.bytes, {333});
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& median = std::get<std::vector<rules::agg::RowAnswer>>(r->values[0]);
  ASSERT_EQ(median.size(), 4u);
  EXPECT_TRUE(std::isnan(median[1].doubles.at(0)));  // an empty segment: NaN, as numpy.median
  for (std::uint64_t s : {0, 2, 3}) {
    std::vector<std::int32_t> valid;
    for (std::uint64_t i = (*plan.array.offsets)[s]; i < (*plan.array.offsets)[s + 1]; ++i) {
      if (i % 3 != 0) valid.push_back(v[i]);
    }
    EXPECT_TRUE(SameAnswer(median[s], Direct(plan.ops[0], DType::kInt32, std::span<const std::int32_t>(valid))))
        << "segment " << s;
    const auto& bottom = std::get<std::vector<rules::agg::RowAnswer>>(r->values[1])[s];
    // Indices count from the segment's start, at valid elements only.
    for (std::size_t j = 0; j < bottom.indices.size(); ++j) {
      EXPECT_NE((bottom.indices[j] + (*plan.array.offsets)[s]) % 3, 0u);
      EXPECT_EQ(bottom.int64s[j], v[(*plan.array.offsets)[s] + bottom.indices[j]]);
    }
  }
  EXPECT_TRUE(std::get<std::vector<rules::agg::RowAnswer>>(r->values[1])[1].indices.empty());
}

TEST(FunctionRouter, AnEmptyArrayHasNoQuantileButAllMaskedRowsSayWhich) {
  TALLY_SEEDED_RNG(rng);
  const Array a = RandomArray(DType::kFloat32, 64, rng, Fill::kWide);
  AggregationPlan plan = Plan(a, 16, {Quantile({0.5})});
  std::vector<std::uint32_t> mask(2, 0xffffffffu);
  mask[1] = 0xffff0000u;  // row 2 (elements 32..47) all masked out
  plan.array.validity = std::make_shared<const std::vector<std::uint32_t>>(mask);
  auto backend = Router();
  absl::StatusOr<AggregationResult> r = RunPieces(*backend, plan, a.bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("row 2"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("quantile"), std::string::npos) << r.status();
}

TEST(FunctionRouter, MergedPiecesGiveTheOnePassStateBitwise) {
  TALLY_SEEDED_RNG(rng);
  const Array a = RandomArray(DType::kFloat32, 20'000, rng, Fill::kWide);
  auto backend = Router();
  AggregationPlan plan = Plan(a, 5000, {Quantile({0.25, 0.75}, OpKind::kNanQuantile), TopK(50), Op(OpKind::kSum)});
  for (OpSpec& op : plan.ops) op.partial = true;
  absl::StatusOr<AggregationResult> one = RunPieces(*backend, plan, a.bytes);
  ASSERT_TRUE(one.ok()) << one.status();
  const std::size_t es = 4;
  std::vector<PlacedPiece> pieces;
  for (const auto& [first, end] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 3333}, {3333, 12000}, {12000, 20000}}) {
    pieces.push_back({first, Extent::PageableHost(std::span<const std::byte>(a.bytes).subspan(first * es, (end - first) * es))});
  }
  absl::StatusOr<AggregationResult> merged = ReducePiecesByMerging(*backend, plan, pieces, [] { return false; });
  ASSERT_TRUE(merged.ok()) << merged.status();
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& w = std::get<std::vector<rules::PartialState>>(one->values[i]);
    const auto& g = std::get<std::vector<rules::PartialState>>(merged->values[i]);
    ASSERT_EQ(w.size(), 4u);
    for (std::size_t row = 0; row < w.size(); ++row) {
      EXPECT_FALSE(w[row].function_state.empty());
      EXPECT_EQ(w[row].function_state, g[row].function_state) << rules::Name(plan.ops[i].kind) << " row " << row;
      EXPECT_EQ(w[row].count, g[row].count);
    }
  }
}

TEST(FunctionRouter, HolisticStatesPastTheBudgetAreRefusedNamingTheFlag) {
  TALLY_SEEDED_RNG(rng);
  const Array a = RandomArray(DType::kFloat64, 100'000, rng, Fill::kWide);  // 800 KB of elements
  auto backend = Router(256 << 10);
  absl::StatusOr<AggregationResult> r = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kMedian)}), a.bytes, {10'000});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("--max_holistic_bytes=262144"), std::string::npos) << r.status();
  // Rows that fit, one at a time, are served: a row's states go when it ends.
  absl::StatusOr<AggregationResult> rows = RunPieces(*backend, Plan(a, 10'000, {Op(OpKind::kMedian)}), a.bytes);
  EXPECT_TRUE(rows.ok()) << rows.status();
  // A sketch keeps no elements and is not held to it.
  OpSpec hll{.kind = OpKind::kHll};
  hll.precision = 12;
  absl::StatusOr<AggregationResult> sketch = RunPieces(*backend, Plan(a, 0, {hll}), a.bytes);
  EXPECT_TRUE(sketch.ok()) << sketch.status();
}

}  // namespace
}  // namespace tally::testing
