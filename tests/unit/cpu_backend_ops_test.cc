// Every op on every dtype, against high-precision references: sizes around
// the block and chunk edges, NaNs, ties, constant arrays, empty arrays,
// ddof edge cases, integer wraparound and malformed input.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "tests/unit/cpu_test_util.h"

namespace tally::testing {
namespace {

class CpuOpsTest : public ::testing::TestWithParam<DType> {
 protected:
  static void SetUpTestSuite() { backend_ = MakeCpuBackend({.threads = 2}).release(); }
  static void TearDownTestSuite() { delete backend_; }
  static Backend* backend_;
};
Backend* CpuOpsTest::backend_ = nullptr;

std::string DTypeName(const ::testing::TestParamInfo<DType>& info) {
  return std::string(rules::Name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, CpuOpsTest, ::testing::ValuesIn(rules::kAllDTypes), DTypeName);

TEST_P(CpuOpsTest, EveryOpMatchesReferenceAcrossSizes) {
  TALLY_SEEDED_RNG(rng);
  // Around one block (2048), one chunk (65536), primes, and large arrays.
  for (std::uint64_t n : {1ull, 2ull, 31ull, 32ull, 33ull, 97ull, 2039ull, 2048ull, 2049ull,
                          65521ull, 65536ull, 65537ull, 1000000ull, 2500009ull}) {
    for (Fill fill : {Fill::kWide, Fill::kNarrow}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " fill=" << static_cast<int>(fill));
      const Array a = RandomArray(GetParam(), n, rng, fill);
      const auto ops = AllOps(a.dtype, fill);
      auto r = RunPieces(*backend_, Plan(a, 0, ops), a.bytes);
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectMatchesReference(a, 0, ops, *r);
      if (HasFailure()) return;
    }
  }
}

// An op's value must not depend on which other ops share the pass.
TEST_P(CpuOpsTest, FusedOpsGiveTheSameBitsAsEachAlone) {
  TALLY_SEEDED_RNG(rng);
  for (std::uint64_t n : {33ull, 70001ull}) {
    const Array a = RandomArray(GetParam(), n, rng, Fill::kWide);
    const auto ops = AllOps(a.dtype, Fill::kWide);
    auto fused = RunPieces(*backend_, Plan(a, 0, ops), a.bytes);
    ASSERT_TRUE(fused.ok()) << fused.status();
    for (std::size_t k = 0; k < ops.size(); ++k) {
      auto alone = RunPieces(*backend_, Plan(a, 0, {ops[k]}), a.bytes);
      ASSERT_TRUE(alone.ok()) << alone.status();
      EXPECT_TRUE(SameBits(alone->values[0], fused->values[k])) << rules::Name(ops[k].kind);
    }
  }
}

TEST_P(CpuOpsTest, EmptyArray) {
  const Array a{GetParam(), 0, {}};
  const auto ops = AllOps(a.dtype, Fill::kWide, /*with_extremes=*/false);
  auto r = RunPieces(*backend_, Plan(a, 0, ops), a.bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectMatchesReference(a, 0, ops, *r);
  // Spelled out, since the references treat empty specially too.
  if (ResultKindOf(OpKind::kSum, a.dtype) == ResultKind::kDouble) {
    EXPECT_EQ(ValueAt<double>(r->values[0], 0), 0.0);
  }
  EXPECT_TRUE(std::isnan(ValueAt<double>(r->values[1], 0)));  // mean
  EXPECT_EQ(ValueAt<std::uint64_t>(r->values[2], 0), 0u);     // count
  EXPECT_EQ(ValueAt<double>(r->values[3], 0), 0.0);           // sum_squares
  EXPECT_TRUE(std::isnan(ValueAt<double>(r->values[4], 0)));  // variance
  const HistogramResult& h = ValueAt<HistogramResult>(r->values[8], 0);
  EXPECT_EQ(h.counts, std::vector<std::uint64_t>(37, 0));
  EXPECT_EQ(h.below + h.above + h.nan, 0u);

  // min/max/argmin/argmax have no value: an error, not a crash.
  for (OpKind k : {OpKind::kMin, OpKind::kMax, OpKind::kArgmin, OpKind::kArgmax}) {
    auto e = RunPieces(*backend_, Plan(a, 0, {Op(k)}), a.bytes);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << rules::Name(k);
  }
  // Segmented and empty: zero rows.
  auto rows = RunPieces(*backend_, Plan(a, 4, AllOps(a.dtype, Fill::kWide)), a.bytes);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (const OpValues& v : rows->values) {
    EXPECT_EQ(std::visit([](const auto& vec) { return vec.size(); }, v), 0u);
  }
}

TEST_P(CpuOpsTest, ConstantArrays) {
  for (std::uint64_t n : {1ull, 5000ull, 200000ull}) {
    const Array a = rules::VisitDType(GetParam(), [&](auto dt) {
      using V = typename rules::Traits<decltype(dt)::value>::value;
      return MakeArray(GetParam(), std::vector<V>(n, static_cast<V>(3)));
    });
    const auto ops = AllOps(a.dtype, Fill::kNarrow);
    auto r = RunPieces(*backend_, Plan(a, 0, ops), a.bytes);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectMatchesReference(a, 0, ops, *r);
    EXPECT_EQ(ValueAt<double>(r->values[4], 0), 0.0);  // variance: exactly 0
    EXPECT_EQ(ValueAt<double>(r->values[1], 0), 3.0);  // mean
    EXPECT_EQ(ValueAt<std::int64_t>(r->values[12], 0), 0);  // argmin: the first
    EXPECT_EQ(ValueAt<std::int64_t>(r->values[13], 0), 0);  // argmax: the first
  }
}

TEST_P(CpuOpsTest, TiesPickTheFirstOccurrence) {
  TALLY_SEEDED_RNG(rng);
  for (std::uint64_t n : {40ull, 5000ull, 300000ull}) {
    // Plant each extreme at three random places (six distinct places before
    // the last two, so that no plant overwrites another) and again at the
    // end: in different blocks and chunks where n allows.
    Array a = RandomArray(GetParam(), n, rng, Fill::kNarrow);
    rules::VisitDType(a.dtype, [&](auto dt) {
      using V = typename rules::Traits<decltype(dt)::value>::value;
      V* x = reinterpret_cast<V*>(a.bytes.data());
      std::uniform_int_distribution<std::uint64_t> pos(0, n - 3);
      std::set<std::uint64_t> places;
      while (places.size() < 6) places.insert(pos(rng));
      int i = 0;
      for (std::uint64_t p : places) {
        x[p] = i++ % 2 == 0 ? std::numeric_limits<V>::max() : std::numeric_limits<V>::lowest();
      }
      x[n - 1] = std::numeric_limits<V>::max();
      x[n - 2] = std::numeric_limits<V>::lowest();
    });
    const std::vector<OpSpec> ops = {Op(OpKind::kArgmin), Op(OpKind::kArgmax), Op(OpKind::kMin),
                                     Op(OpKind::kMax)};
    auto r = RunPieces(*backend_, Plan(a, 0, ops), a.bytes, {n / 3 + 1});
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectMatchesReference(a, 0, ops, *r);
    EXPECT_LT(ValueAt<std::int64_t>(r->values[0], 0), static_cast<std::int64_t>(n - 2));
    EXPECT_LT(ValueAt<std::int64_t>(r->values[1], 0), static_cast<std::int64_t>(n - 1));
  }
}

class CpuFloatOpsTest : public CpuOpsTest {};
INSTANTIATE_TEST_SUITE_P(FloatDTypes, CpuFloatOpsTest,
                         ::testing::Values(DType::kFloat32, DType::kFloat64), DTypeName);

TEST_P(CpuFloatOpsTest, NanAnywhereWins) {
  TALLY_SEEDED_RNG(rng);
  for (std::uint64_t n : {1ull, 33ull, 5000ull, 140000ull}) {
    const Array base = RandomArray(GetParam(), n, rng, Fill::kWide);
    std::uniform_int_distribution<std::uint64_t> pos(0, n - 1);
    const std::vector<std::vector<std::uint64_t>> placements = {
        {0}, {n / 2}, {n - 1}, {pos(rng), pos(rng), pos(rng)}, {n - 1, 0}};
    for (const auto& where : placements) {
      Array a = base;
      rules::VisitDType(a.dtype, [&](auto dt) {
        using V = typename rules::Traits<decltype(dt)::value>::value;
        if constexpr (rules::kIsFloatValue<V>) {
          V* x = reinterpret_cast<V*>(a.bytes.data());
          for (std::uint64_t i : where) x[i] = std::numeric_limits<V>::quiet_NaN();
        }
      });
      const auto ops = AllOps(a.dtype, Fill::kWide);
      auto r = RunPieces(*backend_, Plan(a, 0, ops), a.bytes, {997});
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectMatchesReference(a, 0, ops, *r);
      const std::int64_t first = static_cast<std::int64_t>(*std::min_element(where.begin(), where.end()));
      EXPECT_EQ(ValueAt<std::int64_t>(r->values[12], 0), first);
      EXPECT_EQ(ValueAt<std::int64_t>(r->values[13], 0), first);
      EXPECT_TRUE(std::isnan(ValueAt<double>(r->values[10], 0)));  // min
      EXPECT_TRUE(std::isnan(ValueAt<double>(r->values[0], 0)));   // sum
    }
  }
}

TEST_P(CpuFloatOpsTest, InfinitiesAndSignedZeros) {
  rules::VisitDType(GetParam(), [&](auto dt) {
    using V = typename rules::Traits<decltype(dt)::value>::value;
    if constexpr (rules::kIsFloatValue<V>) {
      const V inf = std::numeric_limits<V>::infinity();
      const std::vector<V> v = {1, -0.0f, 0.0f, inf, -inf, 2, inf, -inf, 0.0f};
      const Array a = MakeArray(GetParam(), v);
      const std::vector<OpSpec> ops = {Op(OpKind::kMin), Op(OpKind::kMax), Op(OpKind::kArgmin),
                                       Op(OpKind::kArgmax), Op(OpKind::kSum), Hist(4, -1, 3)};
      auto r = RunPieces(*backend_, Plan(a, 0, ops), a.bytes);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(ValueAt<double>(r->values[0], 0), -std::numeric_limits<double>::infinity());
      EXPECT_EQ(ValueAt<double>(r->values[1], 0), std::numeric_limits<double>::infinity());
      EXPECT_EQ(ValueAt<std::int64_t>(r->values[2], 0), 4);
      EXPECT_EQ(ValueAt<std::int64_t>(r->values[3], 0), 3);
      EXPECT_TRUE(std::isnan(ValueAt<double>(r->values[4], 0)));  // inf + -inf
      const HistogramResult& h = ValueAt<HistogramResult>(r->values[5], 0);
      EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{0, 3, 1, 1}));
      EXPECT_EQ(h.below, 2u);
      EXPECT_EQ(h.above, 2u);
    }
  });
}

TEST_P(CpuFloatOpsTest, VarianceOfDataWithALargeMean) {
  TALLY_SEEDED_RNG(rng);
  // sum(x^2) - sum(x)^2/n would lose every digit here.
  std::uniform_real_distribution<double> d(0.0, 1.0);
  for (std::uint64_t n : {1000ull, 300007ull}) {
    const Array a = rules::VisitDType(GetParam(), [&](auto dt) {
      using V = typename rules::Traits<decltype(dt)::value>::value;
      std::vector<V> v(n);
      const double offset = std::is_same_v<V, float> ? 1e4 : 1e9;
      for (V& x : v) x = static_cast<V>(offset + d(rng));
      return MakeArray(GetParam(), v);
    });
    const std::vector<OpSpec> ops = {Op(OpKind::kVariance), Op(OpKind::kStddev, 1)};
    auto r = RunPieces(*backend_, Plan(a, 0, ops), a.bytes);
    ASSERT_TRUE(r.ok()) << r.status();
    // Block means carry the offset's rounding into the merge: ~1e-8
    // relative at mean / stddev = 3e9 (float64), against ~1 for the naive
    // formula.
    rules::VisitDType(a.dtype, [&](auto dt) {
      using V = typename rules::Traits<decltype(dt)::value>::value;
      const long double var = VarianceLD(a.As<V>(), 0), var1 = VarianceLD(a.As<V>(), 1);
      EXPECT_NEAR(ValueAt<double>(r->values[0], 0), static_cast<double>(var), 1e-6 * var);
      EXPECT_NEAR(ValueAt<double>(r->values[1], 0), std::sqrt(static_cast<double>(var1)),
                  1e-6 * std::sqrt(static_cast<double>(var1)));
      EXPECT_GT(var, 0.05L);  // about 1/12: the data is not noise
    });
  }
}

TEST_P(CpuOpsTest, DdofAtAndBeyondTheCount) {
  TALLY_SEEDED_RNG(rng);
  const Array one = RandomArray(GetParam(), 1, rng, Fill::kWide);
  const Array two = rules::VisitDType(GetParam(), [&](auto dt) {
    using V = typename rules::Traits<decltype(dt)::value>::value;
    return MakeArray(GetParam(), std::vector<V>{1, 4});
  });
  const std::vector<OpSpec> ops = {Op(OpKind::kVariance, 1), Op(OpKind::kVariance, 2),
                                   Op(OpKind::kVariance, 7.5), Op(OpKind::kStddev, 2),
                                   Op(OpKind::kVariance, 0.5)};
  auto r1 = RunPieces(*backend_, Plan(one, 0, ops), one.bytes);
  ASSERT_TRUE(r1.ok()) << r1.status();
  ExpectMatchesReference(one, 0, ops, *r1);
  EXPECT_TRUE(std::isnan(ValueAt<double>(r1->values[0], 0)));  // 0 / 0, as numpy
  auto r2 = RunPieces(*backend_, Plan(two, 0, ops), two.bytes);
  ASSERT_TRUE(r2.ok()) << r2.status();
  ExpectMatchesReference(two, 0, ops, *r2);
  EXPECT_EQ(ValueAt<double>(r2->values[0], 0), 4.5);
  EXPECT_EQ(ValueAt<double>(r2->values[1], 0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(ValueAt<double>(r2->values[2], 0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(ValueAt<double>(r2->values[4], 0), 3.0);
}

TEST(CpuIntegerSums, WrapModulo2To64LikeNumpy) {
  auto backend = MakeCpuBackend({.threads = 2});
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t base : {kMax - 5, -kMax + 10}) {  // base - 6 stays in range
    std::vector<std::int64_t> v(100003);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = base - static_cast<std::int64_t>(i % 7);
    const Array a = MakeArray(DType::kInt64, v);
    auto r = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kSum), Op(OpKind::kMean)}), a.bytes);
    ASSERT_TRUE(r.ok()) << r.status();
    const __int128 exact = [&] {
      __int128 s = 0;
      for (std::int64_t x : v) s += x;
      return s;
    }();
    EXPECT_EQ(ValueAt<std::int64_t>(r->values[0], 0),
              static_cast<std::int64_t>(static_cast<std::uint64_t>(static_cast<unsigned __int128>(exact))));
    // The mean is a float64 computation and does not wrap.
    EXPECT_NEAR(ValueAt<double>(r->values[1], 0), static_cast<double>(base), 1e-9 * kMax);
  }
  // Narrow types accumulate in 64 bits: no wrap at 2^32.
  std::vector<std::uint32_t> u(3000017, std::numeric_limits<std::uint32_t>::max());
  const Array au = MakeArray(DType::kUInt32, u);
  auto ru = RunPieces(*backend, Plan(au, 0, {Op(OpKind::kSum)}), au.bytes);
  ASSERT_TRUE(ru.ok()) << ru.status();
  EXPECT_EQ(ValueAt<std::uint64_t>(ru->values[0], 0), 3000017ull * 4294967295ull);
  std::vector<std::int32_t> s(3000017, std::numeric_limits<std::int32_t>::lowest());
  const Array as = MakeArray(DType::kInt32, s);
  auto rs = RunPieces(*backend, Plan(as, 0, {Op(OpKind::kSum)}), as.bytes);
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_EQ(ValueAt<std::int64_t>(rs->values[0], 0), -3000017ll * 2147483648ll);
  std::vector<std::uint8_t> b(1 << 20, 255);
  const Array ab = MakeArray(DType::kUInt8, b);
  auto rb = RunPieces(*backend, Plan(ab, 0, {Op(OpKind::kSum), Op(OpKind::kSumSquares)}), ab.bytes);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(ValueAt<std::uint64_t>(rb->values[0], 0), 255ull << 20);
  EXPECT_EQ(ValueAt<double>(rb->values[1], 0), 65025.0 * (1 << 20));
}

TEST(CpuFloat32Sum, RelativeErrorOfAHundredMillionPositiveValues) {
  TALLY_SEEDED_RNG(rng);
  // x = k * 2^-(24 + s): exact in float32, and the exact sum is an integer
  // multiple of 2^-32, so __int128 holds it.
  constexpr std::size_t kN = 100'000'000;
  std::vector<float> v(kN);
  __int128 exact = 0;
  std::uint64_t state = rng();
  for (float& x : v) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64: fast enough for 10^8 draws
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const std::uint64_t k = z >> 40, s = z & 7;
    x = std::ldexp(static_cast<float>(k), -static_cast<int>(24 + s));
    exact += static_cast<__int128>(k) << (8 - s);
  }
  const long double want = std::ldexp(static_cast<long double>(exact), -32);
  auto backend = MakeCpuBackend({.threads = 2});
  const Array a = MakeArray(DType::kFloat32, v);
  auto r = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kSum)}), a.bytes);
  ASSERT_TRUE(r.ok()) << r.status();
  const long double rel = std::fabs(ValueAt<double>(r->values[0], 0) - want) / want;
  EXPECT_LE(rel, 1e-6L);   // the requirement
  EXPECT_LE(rel, 1e-12L);  // what float64 accumulation actually gives
}

TEST(CpuInput, MisalignedBytesGiveTheSameResult) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (DType dt : rules::kAllDTypes) {
    const Array a = RandomArray(dt, 100003, rng, Fill::kWide);
    std::vector<std::byte> shifted(a.bytes.size() + 1);
    std::memcpy(shifted.data() + 1, a.bytes.data(), a.bytes.size());
    const auto ops = AllOps(dt, Fill::kWide);
    auto aligned = RunPieces(*backend, Plan(a, 0, ops), a.bytes);
    auto odd = RunPieces(*backend, Plan(a, 0, ops), std::span(shifted).subspan(1), {4099});
    ASSERT_TRUE(aligned.ok() && odd.ok());
    for (std::size_t k = 0; k < ops.size(); ++k) {
      EXPECT_TRUE(SameBits(aligned->values[k], odd->values[k])) << rules::Name(dt) << " op " << k;
    }
  }
}

TEST(CpuInput, WrongAmountsOfDataAreErrors) {
  auto backend = MakeCpuBackend({.threads = 1});
  std::vector<std::byte> bytes(40);
  AggregationPlan plan{ArraySpec{DType::kFloat32, 8, 0}, {Op(OpKind::kSum)}};
  {  // too much
    auto red = backend->Start(plan);
    ASSERT_TRUE(red.ok());
    EXPECT_EQ((*red)->Consume(std::span(bytes)).code(), absl::StatusCode::kInvalidArgument);
  }
  {  // too little
    auto red = backend->Start(plan);
    ASSERT_TRUE(red.ok());
    ASSERT_TRUE((*red)->Consume(std::span(bytes).first(28)).ok());
    EXPECT_EQ((*red)->Finish().status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // part of an element
    auto red = backend->Start(plan);
    ASSERT_TRUE(red.ok());
    EXPECT_EQ((*red)->Consume(std::span(bytes).first(6)).code(), absl::StatusCode::kInvalidArgument);
  }
  {  // a row length that does not divide the length
    plan.array.row_length = 3;
    EXPECT_EQ(backend->Start(plan).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(CpuBackendInfo, NameAndDevice) {
  auto backend = MakeCpuBackend({.threads = 3});
  EXPECT_EQ(backend->name(), "cpu");
  EXPECT_NE(backend->device().find("(3 threads)"), std::string::npos) << backend->device();
  auto defaults = MakeCpuBackend({});
  EXPECT_NE(defaults->device().find("thread"), std::string::npos) << defaults->device();
}

}  // namespace
}  // namespace tally::testing
