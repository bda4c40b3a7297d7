// The quantile and top-k states (tally/rules/agg/quantile_state.h,
// topk_state.h) against answers worked out from numpy's definitions, and
// their merge: any split of a row gives the state, and the bytes, of the
// whole row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tally/rules/agg/quantile_state.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/state.h"
#include "test_seed.h"

namespace tally::rules::agg {
namespace {

template <typename T>
Elements Block(const std::vector<T>& v, std::uint64_t first = 0, std::uint64_t begin = 0,
            std::uint64_t end = ~std::uint64_t{0}) {
  end = std::min<std::uint64_t>(end, v.size());
  return Elements{.data = reinterpret_cast<const std::byte*>(v.data() + begin), .count = end - begin,
                  .first = first + begin};
}

OpSpec Quantile(std::vector<double> q, QuantileMethod m = QuantileMethod::kLinear, OpKind kind = OpKind::kQuantile) {
  OpSpec op;
  op.kind = kind;
  op.q = std::move(q);
  op.method = m;
  return op;
}

template <typename T>
RowAnswer Answer(const OpSpec& op, DType dtype, const std::vector<T>& v) {
  std::unique_ptr<State> s = Of(op.kind).state->Init(op, dtype);
  s->Update(Block(v));
  RowAnswer out;
  EXPECT_EQ(s->Finalize(out), std::nullopt);
  return out;
}

TEST(QuantileState, LinearInterpolatesAsNumpy) {
  // numpy.quantile([3, 1, 4, 1, 5], [0, 0.3, 0.5, 1]) = [1, 1.4, 3, 5]
  const std::vector<double> v{3, 1, 4, 1, 5};
  const RowAnswer a = Answer(Quantile({0, 0.3, 0.5, 1}), DType::kFloat64, v);
  ASSERT_EQ(a.doubles.size(), 4u);
  EXPECT_EQ(a.doubles[0], 1.0);
  EXPECT_DOUBLE_EQ(a.doubles[1], 1.4);
  EXPECT_EQ(a.doubles[2], 3.0);
  EXPECT_EQ(a.doubles[3], 5.0);
}

TEST(QuantileState, DiscontinuousMethodsPickElements) {
  // n = 4, q = 0.5: lower 2, higher 3, nearest round(1.5) = 2 -> 3 (even: index 2), midpoint 2.5
  const std::vector<std::int32_t> v{4, 2, 1, 3};
  EXPECT_EQ(Answer(Quantile({0.5}, QuantileMethod::kLower), DType::kInt32, v).doubles[0], 2.0);
  EXPECT_EQ(Answer(Quantile({0.5}, QuantileMethod::kHigher), DType::kInt32, v).doubles[0], 3.0);
  EXPECT_EQ(Answer(Quantile({0.5}, QuantileMethod::kNearest), DType::kInt32, v).doubles[0], 3.0);
  EXPECT_EQ(Answer(Quantile({0.5}, QuantileMethod::kMidpoint), DType::kInt32, v).doubles[0], 2.5);
  // inverted_cdf: n*q - 1 = 1, gamma 0 -> index 1 -> 2
  EXPECT_EQ(Answer(Quantile({0.5}, QuantileMethod::kInvertedCdf), DType::kInt32, v).doubles[0], 2.0);
  // averaged_inverted_cdf: virtual 1, gamma 0 -> 0.5 -> 2.5
  EXPECT_EQ(Answer(Quantile({0.5}, QuantileMethod::kAveragedInvertedCdf), DType::kInt32, v).doubles[0], 2.5);
}

TEST(QuantileState, NanPoisonsQuantileAndIsSkippedByNanquantile) {
  const std::vector<double> v{1, std::nan(""), 3};
  EXPECT_TRUE(std::isnan(Answer(Quantile({0.5}), DType::kFloat64, v).doubles[0]));
  EXPECT_EQ(Answer(Quantile({0.5}, QuantileMethod::kLinear, OpKind::kNanQuantile), DType::kFloat64, v).doubles[0], 2.0);
  const std::vector<double> all_nan{std::nan(""), std::nan("")};
  EXPECT_TRUE(std::isnan(Answer(Quantile({0.5}, QuantileMethod::kLinear, OpKind::kNanQuantile), DType::kFloat64, all_nan).doubles[0]));
}

TEST(QuantileState, EmptyQuantileHasNoValueButNanquantileIsNan) {
  const OpSpec op = Quantile({0.5});
  std::unique_ptr<State> s = Of(op.kind).state->Init(op, DType::kFloat32);
  RowAnswer out;
  EXPECT_NE(s->Finalize(out), std::nullopt);
  const std::vector<float> none;
  EXPECT_TRUE(std::isnan(Answer(Quantile({0.5}, QuantileMethod::kLinear, OpKind::kNanQuantile), DType::kFloat32, none).doubles[0]));
}

TEST(QuantileState, InfinityInterpolatesToNanAsNumpy) {
  // numpy.quantile([1, 2, inf], [0.5, 1]) = [nan, nan]: inf - inf and inf * 0.
  const std::vector<double> v{1, 2, std::numeric_limits<double>::infinity()};
  const RowAnswer a = Answer(Quantile({0.5, 1.0}), DType::kFloat64, v);
  EXPECT_TRUE(std::isnan(a.doubles[0]));
  EXPECT_TRUE(std::isnan(a.doubles[1]));
}

TEST(QuantileState, MedianAveragesInTheDtypesArithmetic) {
  OpSpec op;
  op.kind = OpKind::kMedian;
  EXPECT_EQ(Answer(op, DType::kFloat32, std::vector<float>{0, 1, 2, 3}).doubles[0], 1.5);
  EXPECT_EQ(Answer(op, DType::kInt8, std::vector<std::int8_t>{0, 1, 2, 3}).doubles[0], 1.5);
  // float32: (a + b) rounds in float32 before the halving.
  const float big = 16777216.0f;  // 2^24: big + 1 rounds to big in float32
  EXPECT_EQ(Answer(op, DType::kFloat32, std::vector<float>{big, 1.0f}).doubles[0], static_cast<double>(big / 2));
}

TEST(QuantileState, AnySplitGivesTheSameStateBytesAndAnswer) {
  TALLY_SEEDED_RNG(rng);
  std::normal_distribution<double> normal;
  std::vector<float> v(5000);
  for (float& x : v) x = static_cast<float>(normal(rng));
  v[17] = std::nanf("");
  const OpSpec op = Quantile({0.01, 0.5, 0.99}, QuantileMethod::kHazen, OpKind::kNanQuantile);
  std::unique_ptr<State> whole = Of(op.kind).state->Init(op, DType::kFloat32);
  whole->Update(Block(v));
  std::string whole_bytes;
  whole->Serialize(whole_bytes);
  for (int trial = 0; trial < 5; ++trial) {
    const std::uint64_t cut = std::uniform_int_distribution<std::uint64_t>(0, v.size())(rng);
    std::unique_ptr<State> a = Of(op.kind).state->Init(op, DType::kFloat32);
    std::unique_ptr<State> b = Of(op.kind).state->Init(op, DType::kFloat32);
    a->Update(Block(v, 0, 0, cut));
    b->Update(Block(v, 0, cut));
    std::string b_bytes;
    b->Serialize(b_bytes);
    std::unique_ptr<State> b_read = Of(op.kind).state->Init(op, DType::kFloat32);
    ASSERT_EQ(b_read->Deserialize(b_bytes), std::nullopt);
    a->Combine(*b_read);
    std::string merged;
    a->Serialize(merged);
    EXPECT_EQ(merged, whole_bytes) << "cut at " << cut;
  }
}

// ValuesAtRanks against the row sorted by NumberKey (zeros as 0.0): rows
// long enough for the radix selection and short ones, ranks at the ends,
// sharing buckets and spread, ties and both zeros, and rows whose ranks'
// buckets hold most of the row (selected in place).
template <typename S>
void ExpectValuesAtRanks(std::vector<S> v, std::mt19937_64& rng, const char* what) {
  std::vector<S> sorted = v;
  std::sort(sorted.begin(), sorted.end(), [](S a, S b) { return NumberKey(a) < NumberKey(b); });
  // A few ranks (the median's, the ends: fewer bucket bits) and many.
  std::vector<std::uint64_t> few{0, v.size() / 2, v.size() - 1};
  std::vector<std::uint64_t> many{0, v.size() - 1, v.size() / 2, v.size() / 2 + 1};
  for (int i = 0; i < 60; ++i) many.push_back(std::uniform_int_distribution<std::uint64_t>(0, v.size() - 1)(rng));
  for (std::vector<std::uint64_t> ranks : {few, many}) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    std::vector<S> row = v;  // ValuesAtRanks may reorder it
    const std::vector<S> got = quantile_detail::ValuesAtRanks(row, ranks);
    ASSERT_EQ(got.size(), ranks.size()) << what;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      S want = sorted[ranks[i]];
      if constexpr (std::is_floating_point_v<S>) {
        if (want == 0) want = S{0};
        EXPECT_FALSE(std::signbit(got[i]) && got[i] == 0) << what << ": a zero answers 0.0";
      }
      EXPECT_EQ(BitsOf(got[i]), BitsOf(want)) << what << ", rank " << ranks[i] << " of " << v.size();
    }
  }
}

TEST(QuantileState, ValuesAtRanksAreThoseOfTheSortedRow) {
  TALLY_SEEDED_RNG(rng);
  std::normal_distribution<double> normal;
  for (const std::size_t n : {std::size_t{1000}, quantile_detail::kRadixSelectMinElements,
                              std::size_t{300007}}) {
    std::vector<float> f(n);
    for (float& x : f) x = static_cast<float>(normal(rng));
    ExpectValuesAtRanks(f, rng, "float32 normal");
    std::vector<double> d(n);  // ties, both zeros, infinities
    const double pool[] = {-0.0, 0.0, 1.5, -2.25, std::numeric_limits<double>::infinity(), 1e-310};
    for (double& x : d) x = rng() % 2 ? pool[rng() % 6] : normal(rng) * 1e3;
    ExpectValuesAtRanks(d, rng, "float64 with ties");
    std::vector<double> zeros(n);  // only zeros: every rank in one bucket, selected in place
    for (double& x : zeros) x = rng() % 2 ? -0.0 : 0.0;
    ExpectValuesAtRanks(zeros, rng, "float64 zeros");
    std::vector<std::int32_t> i32(n);
    for (auto& x : i32) x = static_cast<std::int32_t>(rng());
    ExpectValuesAtRanks(i32, rng, "int32");
    std::vector<std::int64_t> i64(n);
    for (auto& x : i64) x = static_cast<std::int64_t>(rng() >> (rng() % 60));
    ExpectValuesAtRanks(i64, rng, "int64 of many widths");
    std::vector<std::uint32_t> small(n);
    for (auto& x : small) x = static_cast<std::uint32_t>(rng() % 1000);
    ExpectValuesAtRanks(small, rng, "uint32 below 1000");
  }
}

TEST(QuantileState, LongRowsAnswerAsNumpy) {
  TALLY_SEEDED_RNG(rng);
  std::normal_distribution<double> normal;
  std::vector<float> v(200001);
  for (float& x : v) x = static_cast<float>(normal(rng));
  std::vector<float> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(Answer(Quantile({}, QuantileMethod::kLinear, OpKind::kMedian), DType::kFloat32, v).doubles,
            std::vector<double>{sorted[100000]});
  const RowAnswer q = Answer(Quantile({0.0, 0.25, 1.0}, QuantileMethod::kLower), DType::kFloat32, v);
  EXPECT_EQ(q.doubles, (std::vector<double>{sorted[0], sorted[50000], sorted[200000]}));
}

TEST(QuantileState, StatesOfOtherParametersAreRefused) {
  const OpSpec op = Quantile({0.5});
  std::unique_ptr<State> s = Of(op.kind).state->Init(op, DType::kFloat64);
  std::string bytes;
  s->Serialize(bytes);
  const OpSpec other = Quantile({0.25});
  std::unique_ptr<State> t = Of(other.kind).state->Init(other, DType::kFloat64);
  EXPECT_NE(t->Deserialize(bytes), std::nullopt);
  std::unique_ptr<State> u = Of(op.kind).state->Init(op, DType::kFloat32);
  EXPECT_NE(u->Deserialize(bytes), std::nullopt);
  std::unique_ptr<State> w = Of(op.kind).state->Init(op, DType::kFloat64);
  EXPECT_NE(w->Deserialize(bytes.substr(0, bytes.size() - 1) + "xy"), std::nullopt);
}

OpSpec TopK(std::uint32_t k, bool largest = true) {
  OpSpec op;
  op.kind = largest ? OpKind::kTopK : OpKind::kBottomK;
  op.k = k;
  return op;
}

TEST(TopKState, SortedWithTiesToTheSmallerIndexAndNanFirst) {
  const double nan = std::nan("");
  const std::vector<double> v{1, 5, nan, 5, -0.0, 0.0, 3};
  const RowAnswer top = Answer(TopK(4), DType::kFloat64, v);
  ASSERT_EQ(top.indices, (std::vector<std::int64_t>{2, 1, 3, 6}));
  EXPECT_TRUE(std::isnan(top.doubles[0]));
  const RowAnswer bottom = Answer(TopK(3, false), DType::kFloat64, v);
  EXPECT_EQ(bottom.indices, (std::vector<std::int64_t>{4, 5, 0}));
  const RowAnswer all = Answer(TopK(100, false), DType::kFloat64, v);
  EXPECT_EQ(all.indices.size(), v.size());
  EXPECT_EQ(all.indices.back(), 2);  // NaN last, as numpy.sort puts it
}

TEST(TopKState, MergedStatesEqualTheWholeRows) {
  TALLY_SEEDED_RNG(rng);
  std::vector<std::int16_t> v(20000);
  for (auto& x : v) x = static_cast<std::int16_t>(std::uniform_int_distribution<int>(-50, 50)(rng));  // many ties
  const OpSpec op = TopK(700);
  std::unique_ptr<State> whole = Of(op.kind).state->Init(op, DType::kInt16);
  whole->Update(Block(v));
  std::string whole_bytes;
  whole->Serialize(whole_bytes);
  std::unique_ptr<State> merged = Of(op.kind).state->Init(op, DType::kInt16);
  for (std::uint64_t at = 0; at < v.size(); at += 3001) {
    std::unique_ptr<State> part = Of(op.kind).state->Init(op, DType::kInt16);
    part->Update(Block(v, 0, at, at + 3001));
    merged->Combine(*part);
  }
  std::string merged_bytes;
  merged->Serialize(merged_bytes);
  EXPECT_EQ(merged_bytes, whole_bytes);
  RowAnswer a;
  ASSERT_EQ(merged->Finalize(a), std::nullopt);
  ASSERT_EQ(a.int64s.size(), 700u);
  for (std::size_t i = 1; i < a.int64s.size(); ++i) {
    ASSERT_TRUE(a.int64s[i - 1] > a.int64s[i] || (a.int64s[i - 1] == a.int64s[i] && a.indices[i - 1] < a.indices[i]));
  }
  EXPECT_EQ(a.int64s.front(), 50);
}

}  // namespace
}  // namespace tally::rules::agg
