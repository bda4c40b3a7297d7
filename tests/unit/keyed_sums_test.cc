// Group-by's direct pass on the host (server/engine/grouping/keyed_sums.h)
// against loops over each key's rows, its sums bitwise each key's total of
// ToFixed128 (the GPU's arithmetic), bitwise the same on any number of
// threads, for every key dtype; and RunGroupBy's answers through it equal
// to the general path's (a key column with an all-valid mask takes that),
// bit for bit where the partitioned pass answers for wide keys. And the
// host's faster forms of the fixed-point rules (SplitFixed, FixedSumOf)
// against ToFixed128 and FixedSum; composite keys grouped as their
// combined key.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/cpu/thread_pool.h"
#include "server/engine/functions/function_router.h"
#include "server/engine/grouping/grouped_reduction.h"
#include "server/engine/grouping/keyed_sums.h"
#include "tally/rules/keyed_sums.h"
#include "tests/unit/test_seed.h"

namespace tally::grouping {
namespace {

template <typename T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// Values over [-100, 100] with NaN, +inf, -inf and -0.0 at some rows.
// int32 keys uniform over [base, base + spread).
std::vector<std::int32_t> UniformKeys(std::size_t rows, std::uint64_t spread, std::int32_t base, std::mt19937_64& rng) {
  std::vector<std::int32_t> keys(rows);
  for (auto& k : keys) k = static_cast<std::int32_t>(rng() % spread) + base;
  return keys;
}

template <typename V>
std::vector<V> Values(std::size_t rows, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-100, 100);
  std::vector<V> v(rows);
  for (auto& x : v) x = static_cast<V>(u(rng));
  for (std::size_t i = 0; i < rows; i += 997) v[i] = std::numeric_limits<V>::quiet_NaN();
  for (std::size_t i = 5; i < rows; i += 3001) v[i] = std::numeric_limits<V>::infinity();
  for (std::size_t i = 7; i < rows; i += 4999) v[i] = -std::numeric_limits<V>::infinity();
  for (std::size_t i = 11; i < rows; i += 101) v[i] = static_cast<V>(-0.0);
  return v;
}

struct Reference {
  std::uint64_t count = 0, nan = 0;
  std::uint8_t infinities = 0;
  long double sum = 0, magnitude = 0;
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
};

// The direct pass's sums round each element to a multiple of 2^-scale,
// the scale set by the column's largest finite magnitude and its rows
// (tally/rules/keyed_sums.h): a group of n elements is within n x
// 2^-(scale+1) of its exact sum, before the one rounding to a double.
template <typename V>
double ElementRounding(const std::vector<V>& values) {
  double largest = 0;
  for (const V v : values) {
    if (std::isfinite(static_cast<double>(v))) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  }
  int exponent = 0;
  (void)std::frexp(largest, &exponent);
  return std::ldexp(1.0, exponent + static_cast<int>(std::bit_width(values.size())) - 93);
}

template <typename K, typename V>
void CheckAgainstLoops(const std::vector<K>& keys, const std::vector<V>& values, const KeyedSums& got) {
  const double rounding = ElementRounding(values);
  std::map<K, Reference> want;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    Reference& r = want[keys[i]];
    const double v = static_cast<double>(values[i]);
    ++r.count;
    if (std::isnan(v)) {
      ++r.nan;
      continue;
    }
    if (std::isinf(v)) {
      r.infinities |= v > 0 ? 1 : 2;
    } else {
      r.sum += v;
      r.magnitude += std::fabs(v);
    }
    r.min = std::min(r.min, v);
    r.max = std::max(r.max, v);
  }
  ASSERT_EQ(got.groups, want.size());
  std::size_t g = 0;
  for (const auto& [key, r] : want) {
    K got_key;
    ASSERT_EQ(got.keys.size(), got.groups * sizeof(K));  // the key dtype's bytes
    std::memcpy(&got_key, got.keys.data() + g * sizeof(K), sizeof(K));
    EXPECT_EQ(got_key, key);
    EXPECT_EQ(got.count[g], r.count) << "key " << +key;
    // Empty where no group holds one (KeyedSums).
    EXPECT_EQ(got.nan.empty() ? 0 : got.nan[g], r.nan) << "key " << +key;
    EXPECT_EQ(got.infinities.empty() ? 0 : got.infinities[g], r.infinities) << "key " << +key;
    EXPECT_NEAR(got.sum[g], static_cast<double>(r.sum),
                1e-15 * static_cast<double>(r.magnitude) + static_cast<double>(r.count) * rounding)
        << "key " << +key;
    if (r.count > r.nan) {
      EXPECT_EQ(got.min[g], r.min) << "key " << +key;
      EXPECT_EQ(got.max[g], r.max) << "key " << +key;
    }
    // The mean is the host's division of those two, bit for bit.
    const double mean = got.sum[g] / static_cast<double>(got.count[g]);
    EXPECT_EQ(std::memcmp(&got.mean[g], &mean, sizeof mean), 0) << "key " << +key;
    ++g;
  }
}

// A pool of two participants, as on this 2-core machine's cpu backend.
cpu::ThreadPool& Two() {
  static cpu::ThreadPool pool(2);
  return pool;
}

TEST(SumByKeyOnHost, AgreesWithLoopsOverEachKeysRows) {
  TALLY_SEEDED_RNG(rng);
  for (const std::size_t rows : {std::size_t{1}, std::size_t{1000}, std::size_t{3'000'001}}) {
    std::vector<std::int32_t> keys(rows);
    for (auto& k : keys) k = static_cast<std::int32_t>(rng() % 3 == 0 ? rng() % 4 : rng() % 1000) - 500;  // skewed
    const auto f32 = Values<float>(rows, rng);
    std::optional<KeyedSums> a = SumByKeyOnHost(Bytes(keys), DType::kInt32, Bytes(f32), DType::kFloat32, rows, 4096, &Two());
    ASSERT_TRUE(a.has_value());
    CheckAgainstLoops(keys, f32, *a);
    const auto f64 = Values<double>(rows, rng);
    std::optional<KeyedSums> b = SumByKeyOnHost(Bytes(keys), DType::kInt32, Bytes(f64), DType::kFloat64, rows, 4096, &Two());
    ASSERT_TRUE(b.has_value());
    CheckAgainstLoops(keys, f64, *b);
  }
}

bool SameBits(const KeyedSums& a, const KeyedSums& b) {
  auto same = [](const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
  };
  return a.groups == b.groups && a.keys == b.keys && a.count == b.count && a.nan == b.nan &&
         a.infinities == b.infinities && same(a.sum, b.sum) && same(a.min, b.min) && same(a.max, b.max) &&
         same(a.mean, b.mean);
}

TEST(SumByKeyOnHost, TheSameBitsOnAnyNumberOfThreads) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 5'000'011;
  std::vector<std::uint16_t> keys(rows);
  for (auto& k : keys) k = static_cast<std::uint16_t>(rng() % 65536);
  // Magnitudes over many binades, so that the order of float additions
  // would show.
  std::vector<double> values(rows);
  std::uniform_real_distribution<double> e(-30, 30);
  for (auto& v : values) v = (rng() & 1 ? -1 : 1) * std::exp2(e(rng));
  std::optional<KeyedSums> one = SumByKeyOnHost(Bytes(keys), DType::kUInt16, Bytes(values), DType::kFloat64, rows,
                                                65536, nullptr);
  ASSERT_TRUE(one.has_value());
  for (const int threads : {2, 3, 5}) {
    cpu::ThreadPool pool(threads);
    std::optional<KeyedSums> more = SumByKeyOnHost(Bytes(keys), DType::kUInt16, Bytes(values), DType::kFloat64, rows,
                                                   65536, &pool);
    ASSERT_TRUE(more.has_value());
    EXPECT_TRUE(SameBits(*one, *more)) << threads << " threads";
  }
  // Requests at once on one pool, as a server's are: each takes the idle
  // participants it finds, and every answer is the same.
  cpu::ThreadPool shared(3);
  std::vector<std::optional<KeyedSums>> at_once(6);
  std::vector<std::thread> requests;
  for (std::size_t r = 0; r < at_once.size(); ++r) {
    requests.emplace_back([&, r] {
      at_once[r] = SumByKeyOnHost(Bytes(keys), DType::kUInt16, Bytes(values), DType::kFloat64, rows, 65536, &shared);
    });
  }
  for (std::thread& t : requests) t.join();
  for (std::size_t r = 0; r < at_once.size(); ++r) {
    ASSERT_TRUE(at_once[r].has_value()) << "request " << r;
    EXPECT_TRUE(SameBits(*one, *at_once[r])) << "request " << r << " of " << at_once.size() << " at once";
  }
  // A prefix, as a chunk of a stream would be: its own answer.
  std::optional<KeyedSums> prefix =
      SumByKeyOnHost(Bytes(keys), DType::kUInt16, Bytes(values), DType::kFloat64, rows / 3, 65536, &Two());
  ASSERT_TRUE(prefix.has_value());
  CheckAgainstLoops(std::vector<std::uint16_t>(keys.begin(), keys.begin() + rows / 3),
                    std::vector<double>(values.begin(), values.begin() + rows / 3), *prefix);
}

TEST(SumByKeyOnHost, KeysOfEveryIntegerDtypeAtTheirExtremes) {
  TALLY_SEEDED_RNG(rng);
  const auto values = Values<float>(3000, rng);
  auto check = [&](auto first, DType dtype) {
    using K = decltype(first);
    std::vector<K> keys(values.size());
    for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<K>(first + static_cast<K>(rng() % 200));
    std::optional<KeyedSums> got = SumByKeyOnHost(Bytes(keys), dtype, Bytes(values), DType::kFloat32, keys.size(), 4096, &Two());
    ASSERT_TRUE(got.has_value()) << rules::Name(dtype);
    CheckAgainstLoops(keys, values, *got);
  };
  check(std::numeric_limits<std::int8_t>::min(), DType::kInt8);
  check(std::int16_t{-100}, DType::kInt16);
  check(std::numeric_limits<std::int32_t>::max() - 199, DType::kInt32);
  check(std::numeric_limits<std::int64_t>::min(), DType::kInt64);
  check(std::uint8_t{50}, DType::kUInt8);
  check(std::uint16_t{65000}, DType::kUInt16);
  check(std::uint32_t{7}, DType::kUInt32);
  check(std::numeric_limits<std::uint64_t>::max() - 199, DType::kUInt64);
  // bool: any nonzero byte is True.
  const std::vector<std::uint8_t> flags = {0, 1, 2, 0, 255};
  const std::vector<float> v = {1, 2, 3, 4, 5};
  std::optional<KeyedSums> b = SumByKeyOnHost(Bytes(flags), DType::kBool, Bytes(v), DType::kFloat32, 5, 4096, nullptr);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->keys, (std::vector<std::byte>{std::byte{0}, std::byte{1}}));  // one byte a key
  EXPECT_EQ(b->sum, (std::vector<double>{5, 10}));
}

TEST(SumByKeyOnHost, WideRangesFloatKeysAndOtherValuesTakeAnotherPath) {
  const std::vector<std::int64_t> wide = {0, 5000};
  const std::vector<double> v = {1, 2};
  EXPECT_FALSE(SumByKeyOnHost(Bytes(wide), DType::kInt64, Bytes(v), DType::kFloat64, 2, 4096, &Two()).has_value());
  EXPECT_TRUE(SumByKeyOnHost(Bytes(wide), DType::kInt64, Bytes(v), DType::kFloat64, 2, 5001, &Two()).has_value());
  const std::vector<double> float_keys = {1.0, 2.0};
  EXPECT_FALSE(SumByKeyOnHost(Bytes(float_keys), DType::kFloat64, Bytes(v), DType::kFloat64, 2, 4096, &Two()).has_value());
  const std::vector<std::int32_t> ints = {1, 2};
  EXPECT_FALSE(SumByKeyOnHost(Bytes(ints), DType::kInt32, Bytes(ints), DType::kInt32, 2, 4096, &Two()).has_value());
  EXPECT_FALSE(SumByKeyOnHost(Bytes(ints), DType::kInt32, Bytes(v), DType::kFloat64, 0, 4096, &Two()).has_value());
}

namespace keyed = rules::keyed;

// A double of random sign, significand and binade in [lo, hi).
double AnyDouble(std::mt19937_64& rng, int lo, int hi) {
  const double m = std::ldexp(static_cast<double>(rng() >> 11), -53);  // [0, 1)
  const int e = lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi - lo));
  return (rng() & 1 ? -1 : 1) * std::ldexp(1.0 + m, e);
}

// Whether v x 2^scale is an integer.
bool FixedIsExact(double v, int scale) {
  const double x = std::ldexp(v, scale);
  return v == 0 || (x != 0 && std::trunc(x) == x);
}

TEST(KeyedRules, SplitFixedIsToFixed128) {
  TALLY_SEEDED_RNG(rng);
  int rounded = 0, exact = 0;
  const auto check = [&](double v, int scale) {
    bool inexact = false;
    const keyed::FixedParts f = keyed::SplitFixed(v, keyed::FixedUnit::Of(scale), inexact);
    const __int128 want = keyed::ToFixed128(v, scale);
    ASSERT_TRUE(keyed::FixedTotal(f.high, f.low) == want) << v << " at scale " << scale;
    ASSERT_EQ(inexact, !FixedIsExact(v, scale)) << v << " at scale " << scale;
    (inexact ? rounded : exact) += 1;
  };
  for (int i = 0; i < 2'000'000; ++i) {
    // The largest magnitude and the rows set the scale (FixedScale); the
    // value is at most that magnitude, down to far below its grid.
    const double largest = std::fabs(AnyDouble(rng, -1000, 1000));
    const std::uint64_t rows = std::uint64_t{1} << (rng() % 31);
    std::uint64_t bits;
    std::memcpy(&bits, &largest, 8);
    const int scale = keyed::FixedScale(bits, rows);
    double v = (rng() & 1 ? -1 : 1) * largest * std::ldexp(1.0, -static_cast<int>(rng() % 80));
    if (i % 4 == 0 && std::fabs(v) < 1e38) v = static_cast<float>(v);  // float32 values
    if (i % 16 == 0) {
      // A tie: an odd or even integer and a half, on the scale's grid.
      const double whole = static_cast<double>(rng() % (std::uint64_t{1} << 40));
      v = (rng() & 1 ? -1 : 1) * std::ldexp(whole + 0.5, -scale);
    }
    check(v, scale);
  }
  check(0.0, 60);
  check(-0.0, 60);
  check(std::numeric_limits<double>::denorm_min(), 1000);
  check(std::numeric_limits<double>::denorm_min(), 1100);
  check(-std::numeric_limits<double>::max(), keyed::FixedScale(0x7fefffffffffffffull, 2));
  EXPECT_GT(rounded, 100'000);
  EXPECT_GT(exact, 100'000);
}

TEST(KeyedRules, FixedSumOfIsFixedSum) {
  TALLY_SEEDED_RNG(rng);
  const auto check = [&](__int128 total, int scale) {
    const auto hi = static_cast<std::uint64_t>(static_cast<std::int64_t>(total >> 32));
    const auto lo = static_cast<std::uint64_t>(total) & 0xffffffffull;
    const double want = keyed::FixedSum(hi, lo, scale), got = keyed::FixedSumOf(total, scale);
    ASSERT_EQ(std::memcmp(&want, &got, 8), 0) << want << " against " << got << " at scale " << scale;
  };
  for (int i = 0; i < 2'000'000; ++i) {
    // FixedSum's high word holds totals below 2^95.
    const int bits = static_cast<int>(rng() % 95);
    unsigned __int128 m = (static_cast<unsigned __int128>(rng()) << 64) | rng();
    m = bits == 0 ? 0 : m >> (128 - bits);
    if (i % 8 == 0) m |= 1;                                      // a sticky bit far below
    if (i % 8 == 1 && bits > 60) m &= ~((static_cast<unsigned __int128>(1) << (bits - 54)) - 1);  // exact
    const __int128 total = rng() & 1 ? -static_cast<__int128>(m) : static_cast<__int128>(m);
    const int scale = static_cast<int>(rng() % 2300) - 1100;  // subnormal, normal and infinite answers
    check(total, scale);
  }
  check(0, 5);
  check(static_cast<__int128>(1) << 94, -1000);
  check(-(static_cast<__int128>(1) << 94), 1100);
}

// Each key's sum as the GPU's words give it: the total of ToFixed128 of
// its finite elements at the column's scale, through FixedSum.
template <typename K, typename V>
std::map<K, double> FixedSums(const std::vector<K>& keys, const std::vector<V>& values) {
  std::uint64_t largest = 0;
  for (const V v : values) {
    const double a = std::fabs(static_cast<double>(v));
    std::uint64_t b;
    std::memcpy(&b, &a, 8);
    if (std::isfinite(a)) largest = std::max(largest, b);
  }
  const int scale = keyed::FixedScale(largest, values.size());
  std::map<K, __int128> totals;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const double v = static_cast<double>(values[i]);
    totals[keys[i]] += std::isfinite(v) ? keyed::ToFixed128(v, scale) : 0;
  }
  std::map<K, double> sums;
  for (const auto& [k, t] : totals) {
    sums[k] = keyed::FixedSum(static_cast<std::uint64_t>(static_cast<std::int64_t>(t >> 32)),
                              static_cast<std::uint64_t>(t) & 0xffffffffull, scale);
  }
  return sums;
}

TEST(SumByKeyOnHost, SumsAreEachKeysTotalOfTheGpusFixedPointValues) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 1'000'003;
  std::vector<std::int32_t> keys(rows);
  for (auto& k : keys) k = static_cast<std::int32_t>(rng() % 3 == 0 ? rng() % 3 : rng() % 5000);
  // Magnitudes over many binades, so that elements round to the grid.
  std::vector<double> f64(rows);
  for (auto& v : f64) v = AnyDouble(rng, -60, 20);
  for (std::size_t i = 0; i < rows; i += 997) f64[i] = std::numeric_limits<double>::quiet_NaN();
  for (std::size_t i = 5; i < rows; i += 30011) f64[i] = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 11; i < rows; i += 101) f64[i] = -0.0;
  std::vector<float> f32(f64.begin(), f64.end());
  const auto check = [&](const auto& values, DType dtype) {
    std::optional<KeyedSums> got =
        SumByKeyOnHost(Bytes(keys), DType::kInt32, Bytes(values), dtype, rows, 65536, &Two());
    ASSERT_TRUE(got.has_value());
    CheckAgainstLoops(keys, values, *got);
    const auto want = FixedSums(keys, values);
    ASSERT_EQ(got->groups, want.size());
    std::size_t g = 0;
    for (const auto& [key, sum] : want) {
      EXPECT_EQ(std::memcmp(&got->sum[g], &sum, 8), 0) << "key " << key << ": " << got->sum[g] << " against " << sum;
      ++g;
    }
  };
  check(f64, DType::kFloat64);
  check(f32, DType::kFloat32);
  // Values so small that the scale passes float64's range (FixedUnit).
  for (auto& v : f64) v = std::ldexp(v, -1000);
  check(f64, DType::kFloat64);
}

Validity AllValid(std::size_t rows) {
  return std::make_shared<const std::vector<std::uint32_t>>((rows + 31) / 32, ~std::uint32_t{0});
}

// int64 values from -50,000 to 50,000.
std::vector<std::int64_t> Ints(std::size_t rows, std::mt19937_64& rng) {
  std::vector<std::int64_t> ints(rows);
  for (auto& v : ints) v = static_cast<std::int64_t>(rng() % 100001) - 50000;
  return ints;
}

// Ops the direct pass answers, and ops of the general path.
const std::vector<OpKind> kDirectOps = {OpKind::kNanSum, OpKind::kNanMean, OpKind::kNanCount, OpKind::kNanMax};
const std::vector<OpKind> kGeneralOps = {OpKind::kSum, OpKind::kMean, OpKind::kArgmin};

// `kinds` asked of column `column` of the plan.
void Ask(GroupByPlan& plan, std::size_t column, const std::vector<OpKind>& kinds) {
  ColumnAggregations c{.column = column};
  c.plan.array = ArraySpec{.dtype = plan.columns[column].dtype, .length = plan.rows};
  for (const OpKind kind : kinds) {
    c.positions.push_back(plan.aggregations++);
    c.plan.ops.push_back(OpSpec{.kind = kind});
  }
  plan.values.push_back(c);
}

// A float column asking only the direct pass's ops takes it beside columns
// that take the general path (int64 values, argmin): its answers are those
// it has alone, bit for bit, and so are its neighbours'.
TEST(RunGroupBy, AColumnsAnswersDoNotDependOnItsNeighbours) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 100'003;
  const std::vector<std::int32_t> keys = UniformKeys(rows, 2000, -700, rng);
  const auto floats = Values<double>(rows, rng);
  const std::vector<std::int64_t> ints = Ints(rows, rng);
  const std::vector<OpKind>& direct = kDirectOps;
  const std::vector<OpKind>& general = kGeneralOps;
  std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
  // The plan of the value columns in `which` (1: the floats, 2: the ints).
  auto run = [&](const std::vector<std::size_t>& which, std::vector<const char*>* phases) {
    GroupByPlan plan;
    plan.rows = rows;
    plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt32, .data = Bytes(keys)},
                    GroupColumn{.name = "f", .dtype = DType::kFloat64, .data = Bytes(floats)},
                    GroupColumn{.name = "i", .dtype = DType::kInt64, .data = Bytes(ints)}};
    plan.keys = {0};
    for (const std::size_t w : which) Ask(plan, w, w == 1 ? direct : general);
    absl::StatusOr<GroupedResult> r = RunGroupBy(plan, *backend, 1 << 20, [&](const char* p) {
      if (phases != nullptr) phases->push_back(p);
    });
    EXPECT_TRUE(r.ok()) << r.status();
    return *std::move(r);
  };
  std::vector<const char*> phases;
  const GroupedResult both = run({1, 2}, &phases);
  const GroupedResult floats_alone = run({1}, nullptr);
  const GroupedResult ints_alone = run({2}, nullptr);
  EXPECT_EQ(std::count_if(phases.begin(), phases.end(),
                          [](const char* p) { return std::string(p) == "column summed by key on the host"; }),
            1);
  ASSERT_EQ(both.results.size(), 2u);
  ASSERT_EQ(both.groups, floats_alone.groups);
  ASSERT_EQ(both.groups, ints_alone.groups);
  EXPECT_EQ(both.keys[0].data, floats_alone.keys[0].data);
  EXPECT_EQ(both.keys[0].data, ints_alone.keys[0].data);
  // Bit for bit (a group holding +inf and -inf sums to NaN).
  const auto same = [](const OpValues& a, const OpValues& b) {
    const auto* x = std::get_if<std::vector<double>>(&a);
    const auto* y = std::get_if<std::vector<double>>(&b);
    if (x == nullptr || y == nullptr) return a == b;
    return x->size() == y->size() && std::memcmp(x->data(), y->data(), x->size() * sizeof(double)) == 0;
  };
  for (std::size_t k = 0; k < direct.size(); ++k) {
    EXPECT_TRUE(same(both.results[0].values[k], floats_alone.results[0].values[k])) << rules::Name(direct[k]);
  }
  for (std::size_t k = 0; k < general.size(); ++k) {
    EXPECT_TRUE(same(both.results[1].values[k], ints_alone.results[0].values[k])) << rules::Name(general[k]);
  }
  EXPECT_EQ(*both.plans[0].array.offsets, *ints_alone.plans[0].array.offsets);
}

TEST(RunGroupBy, TheHostDirectPassAnswersAsTheGeneralPath) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 200'003;
  const std::vector<std::int32_t> keys = UniformKeys(rows, 300, -150, rng);
  const auto values = Values<double>(rows, rng);
  const std::vector<OpKind> kinds = {OpKind::kSum,    OpKind::kCount,  OpKind::kMin,    OpKind::kMax,
                                     OpKind::kMean,   OpKind::kNanSum, OpKind::kNanMin, OpKind::kNanMax,
                                     OpKind::kNanMean, OpKind::kNanCount};
  auto run = [&](Validity key_validity) {
    GroupByPlan plan;
    plan.rows = rows;
    plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt32, .data = Bytes(keys), .validity = key_validity},
                    GroupColumn{.name = "v", .dtype = DType::kFloat64, .data = Bytes(values)}};
    plan.keys = {0};
    ColumnAggregations c{.column = 1};
    c.plan.array = ArraySpec{.dtype = DType::kFloat64, .length = rows};
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      c.positions.push_back(i);
      c.plan.ops.push_back(OpSpec{.kind = kinds[i]});
    }
    plan.values = {c};
    plan.aggregations = kinds.size();
    std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
    std::vector<const char*> phases;
    absl::StatusOr<GroupedResult> r = RunGroupBy(plan, *backend, 1 << 20, [&](const char* p) { phases.push_back(p); });
    EXPECT_TRUE(r.ok()) << r.status();
    const bool direct = std::any_of(phases.begin(), phases.end(), [](const char* p) {
      return std::string(p) == "column summed by key on the host";
    });
    return std::make_pair(*std::move(r), direct);
  };
  const auto [direct, took_direct] = run(nullptr);
  const auto [general, took_general] = run(AllValid(rows));
  EXPECT_TRUE(took_direct);
  EXPECT_FALSE(took_general);
  ASSERT_EQ(direct.groups, general.groups);
  EXPECT_EQ(direct.keys[0].data, general.keys[0].data);
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    SCOPED_TRACE(rules::Name(kinds[k]));
    const OpValues& a = direct.results[0].values[k];
    const OpValues& b = general.results[0].values[k];
    ASSERT_EQ(a.index(), b.index());
    if (const auto* d = std::get_if<std::vector<double>>(&a)) {
      const auto& e = std::get<std::vector<double>>(b);
      for (std::size_t g = 0; g < d->size(); ++g) {
        if (std::isnan(e[g])) {
          EXPECT_TRUE(std::isnan((*d)[g])) << "group " << g;
        } else if (std::isinf(e[g])) {
          EXPECT_EQ((*d)[g], e[g]) << "group " << g;
        } else {
          EXPECT_NEAR((*d)[g], e[g], 1e-9 * (1 + std::fabs(e[g]))) << "group " << g;
        }
      }
    } else {
      EXPECT_TRUE(a == b);
    }
  }
}


// A plan of the ten direct ops over one float value column, keyed by one
// int32 column (with `key_validity`, or none).
GroupByPlan DirectPlan(const std::vector<std::int32_t>& keys, Validity key_validity, std::span<const std::byte> values,
                       DType dtype, const std::vector<OpKind>& kinds) {
  GroupByPlan plan;
  plan.rows = keys.size();
  plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt32, .data = Bytes(keys), .validity = key_validity},
                  GroupColumn{.name = "v", .dtype = dtype, .data = values}};
  plan.keys = {0};
  ColumnAggregations c{.column = 1};
  c.plan.array = ArraySpec{.dtype = dtype, .length = keys.size()};
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    c.positions.push_back(i);
    c.plan.ops.push_back(OpSpec{.kind = kinds[i]});
  }
  plan.values = {c};
  plan.aggregations = kinds.size();
  return plan;
}

bool SameBits(const OpValues& a, const OpValues& b) {
  if (a.index() != b.index()) return false;
  if (const auto* d = std::get_if<std::vector<double>>(&a)) {
    const auto& e = std::get<std::vector<double>>(b);
    if (d->size() != e.size()) return false;
    for (std::size_t g = 0; g < d->size(); ++g) {
      // Every NaN answer is numpy's default NaN: the same bits.
      if (std::memcmp(&(*d)[g], &e[g], 8) != 0) {
        ADD_FAILURE() << "group " << g << ": " << (*d)[g] << " against " << e[g];
        return false;
      }
    }
    return true;
  }
  return a == b;
}

// The wide keys' answers through RunGroupBy on a 2-thread cpu backend, and
// whether the host's pass by key (direct or partitioned) gave them.
std::pair<GroupedResult, bool> RunWide(const std::vector<std::int32_t>& keys, Validity key_validity,
                                       std::span<const std::byte> values, DType dtype,
                                       const std::vector<OpKind>& kinds) {
  const GroupByPlan plan = DirectPlan(keys, std::move(key_validity), values, dtype, kinds);
  std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
  std::vector<std::string> phases;
  absl::StatusOr<GroupedResult> r = RunGroupBy(plan, *backend, 1 << 24, [&](const char* p) { phases.push_back(p); });
  EXPECT_TRUE(r.ok()) << r.status();
  const bool by_key = std::find(phases.begin(), phases.end(), "column summed by key on the host") != phases.end();
  return {*std::move(r), by_key};
}

TEST(RunGroupBy, WideKeysTakeThePartitionedPassWithTheGeneralPathsBits) {
  TALLY_SEEDED_RNG(rng);
  const std::vector<OpKind> kinds = {OpKind::kSum,    OpKind::kCount,  OpKind::kMin,    OpKind::kMax,
                                     OpKind::kMean,   OpKind::kNanSum, OpKind::kNanMin, OpKind::kNanMax,
                                     OpKind::kNanMean, OpKind::kNanCount};
  // 700,001 rows over keys from -100,000 to 99,999 (past the direct
  // pass's 65,536), half of them in the first hundred keys: their bucket
  // is split between tasks (PartitionPolicy::kRowsPerTask).
  const std::size_t rows = 700'001;
  std::vector<std::int32_t> keys(rows);
  for (auto& k : keys) k = static_cast<std::int32_t>(rng() % 2 == 0 ? rng() % 100 : rng() % 200'000) - 100'000;
  // Values exact on the fixed-point grid: multiples of 2^-10 below 2^14,
  // with NaN, infinities and zeros of both signs, in groups where a zero
  // is no extreme, and in keys of their own where it is: -0.0 alone, -0.0
  // with NaN, -0.0 with positive values, +0.0 with negative ones.
  std::vector<float> values(rows);
  for (auto& v : values) v = static_cast<float>(std::ldexp(static_cast<double>(rng() % (1 << 24)) - (1 << 23), -10));
  for (std::size_t i = 0; i < rows; i += 997) values[i] = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t i = 5; i < rows; i += 30011) values[i] = std::numeric_limits<float>::infinity();
  for (std::size_t i = 7; i < rows; i += 49999) values[i] = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 11; i < rows; i += 101) {
    if (keys[i] < -99'900) values[i] = (i / 101) % 2 == 0 ? 0.0f : -0.0f;  // the crowded keys'
  }
  const std::vector<std::pair<std::int32_t, std::vector<float>>> own = {
      {99'990, {-0.0f}}, {99'991, {-0.0f, -0.0f}}, {99'992, {-0.0f, std::numeric_limits<float>::quiet_NaN()}},
      {99'993, {-0.0f, 2.0f, 1.0f}}, {99'994, {-3.0f, 0.0f}}, {99'995, {-0.0f, -0.0f, 5.0f}}};
  for (const auto& [key, vs] : own) {
    std::replace(keys.begin(), keys.end(), key, key - 10);
    for (const float v : vs) {
      keys.push_back(key);
      values.push_back(v);
    }
  }
  const auto check = [&](const std::vector<std::int32_t>& k, const std::vector<float>& v, bool partitioned) {
    const auto [fast, took_fast] = RunWide(k, nullptr, Bytes(v), DType::kFloat32, kinds);
    const auto [general, took_general] = RunWide(k, AllValid(k.size()), Bytes(v), DType::kFloat32, kinds);
    EXPECT_EQ(took_fast, partitioned);
    EXPECT_FALSE(took_general);
    ASSERT_EQ(fast.groups, general.groups);
    EXPECT_EQ(fast.keys[0].data, general.keys[0].data);
    EXPECT_EQ(*fast.plans[0].array.offsets, *general.plans[0].array.offsets);
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      EXPECT_TRUE(SameBits(fast.results[0].values[i], general.results[0].values[i])) << rules::Name(kinds[i]);
    }
  };
  check(keys, values, true);
  // Without NaN, without infinities, and without either (KeyedSums then
  // leaves their vectors empty, and the answers are its vectors whole).
  const auto without = [&](bool nan, bool infinity) {
    std::vector<float> v = values;
    for (float& x : v) {
      if ((nan && std::isnan(x)) || (infinity && std::isinf(x))) x = 1.5f;
    }
    return v;
  };
  check(keys, without(true, false), true);
  check(keys, without(false, true), true);
  check(keys, without(true, true), true);
  // The same keys on every number of threads: the same bits.
  std::optional<KeyedSums> one = SumByKeyOnHost(Bytes(keys), DType::kInt32, Bytes(values), DType::kFloat32,
                                                keys.size(), 65536, nullptr, 1 << 24);
  ASSERT_TRUE(one.has_value());
  for (const int threads : {2, 3, 5}) {
    cpu::ThreadPool pool(threads);
    std::optional<KeyedSums> more = SumByKeyOnHost(Bytes(keys), DType::kInt32, Bytes(values), DType::kFloat32,
                                                   keys.size(), 65536, &pool, 1 << 24);
    ASSERT_TRUE(more.has_value());
    EXPECT_TRUE(SameBits(*one, *more)) << threads << " threads";
  }
  // Where the pass cannot give the general path's bits it does not answer:
  // a key whose min is a zero and which holds zeros of both signs (the
  // general path keeps the sign it meets first in its lanes' order), and
  // an element below the fixed-point grid (the general path's sums are
  // exact).
  std::vector<std::int32_t> both = keys;
  std::vector<float> both_values = values;
  std::replace(both.begin(), both.end(), 99'999, 99'989);
  for (const float v : {0.0f, -0.0f, 1.0f}) {
    both.push_back(99'999);
    both_values.push_back(v);
  }
  check(both, both_values, false);
  std::vector<float> fine = values;
  fine[3] = std::ldexp(1.0f, -100);
  check(keys, fine, false);
  // Nor where its rows and slots would pass what admission counts a row
  // (PartitionPolicy::kMostBytesPerRow): float64 values over these keys.
  const std::vector<double> wide(values.begin(), values.end());
  EXPECT_FALSE(SumByKeyOnHost(Bytes(keys), DType::kInt32, Bytes(wide), DType::kFloat64, keys.size(), 65536, &Two(),
                              1 << 24)
                   .has_value());
  // float64 values over fewer keys (70,000 over 1.2M rows: under 1/16)
  // take it, with the general path's bits.
  std::vector<std::int32_t> fewer(1'200'000);
  for (auto& k : fewer) k = static_cast<std::int32_t>(rng() % 70'000);
  std::vector<double> f64(fewer.size());
  for (auto& v : f64) v = std::ldexp(static_cast<double>(rng() % (1 << 30)) - (1 << 29), -20);
  for (std::size_t i = 0; i < f64.size(); i += 1009) f64[i] = std::numeric_limits<double>::quiet_NaN();
  const auto [fast, took_fast] = RunWide(fewer, nullptr, Bytes(f64), DType::kFloat64, kinds);
  const auto [general, took_general] = RunWide(fewer, AllValid(fewer.size()), Bytes(f64), DType::kFloat64, kinds);
  EXPECT_TRUE(took_fast);
  EXPECT_FALSE(took_general);
  ASSERT_EQ(fast.groups, general.groups);
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_TRUE(SameBits(fast.results[0].values[i], general.results[0].values[i])) << rules::Name(kinds[i]);
  }
}

// Composite integer keys are combined into one key on the host, as the
// device combines them: the same groups, tuples and bits as one key column
// holding the combined keys, the direct pass included; ranges multiplying
// past kMaxCombinedRange keep the composite path, with the same groups.
TEST(RunGroupBy, CompositeKeysAreGroupedAsTheirCombinedKey) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 200'003;
  std::vector<std::int8_t> a(rows);
  std::vector<std::uint16_t> b(rows);
  std::vector<std::uint8_t> c(rows);  // bool
  std::vector<std::uint64_t> combined(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    a[i] = static_cast<std::int8_t>(static_cast<int>(rng() % 8) - 3);
    b[i] = static_cast<std::uint16_t>(65000 + rng() % 100);
    c[i] = static_cast<std::uint8_t>(rng() % 2);
    combined[i] = (static_cast<std::uint64_t>(a[i] + 3) * 100 + (b[i] - 65000)) * 2 + c[i];
  }
  const auto floats = Values<double>(rows, rng);
  const std::vector<std::int64_t> ints = Ints(rows, rng);
  const std::vector<OpKind>& direct = kDirectOps;
  const std::vector<OpKind>& general = kGeneralOps;
  std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
  const auto run = [&](std::vector<GroupColumn> keys, std::vector<std::string>* phases) {
    GroupByPlan plan;
    plan.rows = rows;
    plan.columns = std::move(keys);
    for (std::size_t k = 0; k < plan.columns.size(); ++k) plan.keys.push_back(k);
    plan.columns.push_back(GroupColumn{.name = "f", .dtype = DType::kFloat64, .data = Bytes(floats)});
    plan.columns.push_back(GroupColumn{.name = "i", .dtype = DType::kInt64, .data = Bytes(ints)});
    Ask(plan, plan.columns.size() - 2, direct);
    Ask(plan, plan.columns.size() - 1, general);
    absl::StatusOr<GroupedResult> r =
        RunGroupBy(plan, *backend, 1 << 20, [&](const char* p) { if (phases) phases->push_back(p); });
    EXPECT_TRUE(r.ok()) << r.status();
    return *std::move(r);
  };
  std::vector<std::string> phases;
  const GroupedResult tuples = run({GroupColumn{.name = "a", .dtype = DType::kInt8, .data = Bytes(a)},
                                    GroupColumn{.name = "b", .dtype = DType::kUInt16, .data = Bytes(b)},
                                    GroupColumn{.name = "c", .dtype = DType::kBool, .data = Bytes(c)}},
                                   &phases);
  const GroupedResult one = run({GroupColumn{.name = "k", .dtype = DType::kUInt64, .data = Bytes(combined)}}, nullptr);
  EXPECT_NE(std::find(phases.begin(), phases.end(), "key columns combined on the host"), phases.end());
  EXPECT_NE(std::find(phases.begin(), phases.end(), "column summed by key on the host"), phases.end());
  ASSERT_EQ(tuples.groups, one.groups);
  ASSERT_EQ(tuples.groups, 8u * 100 * 2);
  ASSERT_EQ(tuples.keys.size(), 3u);
  for (std::uint64_t g = 0; g < tuples.groups; ++g) {
    std::uint64_t k = 0;
    std::memcpy(&k, one.keys[0].data.data() + 8 * g, 8);
    ASSERT_EQ(static_cast<int>(static_cast<std::int8_t>(tuples.keys[0].data[g])), static_cast<int>(k / 200) - 3);
    std::uint16_t bk = 0;
    std::memcpy(&bk, tuples.keys[1].data.data() + 2 * g, 2);
    ASSERT_EQ(bk, 65000 + (k / 2) % 100);
    ASSERT_EQ(static_cast<std::uint64_t>(tuples.keys[2].data[g]), k % 2);
  }
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t k = 0; k < tuples.results[r].values.size(); ++k) {
      EXPECT_TRUE(SameBits(tuples.results[r].values[k], one.results[r].values[k])) << "column " << r << " op " << k;
    }
  }
  // Past kMaxCombinedRange (2^40 x 2^13 keys): the composite path, each
  // tuple one group, in ascending order.
  std::vector<std::int64_t> wide(rows);
  std::vector<std::int32_t> narrow(rows);
  std::map<std::pair<std::int64_t, std::int32_t>, std::uint64_t> count;
  for (std::size_t i = 0; i < rows; ++i) {
    wide[i] = static_cast<std::int64_t>(rng() % 1000) * (std::int64_t{1} << 30) - (std::int64_t{1} << 39);
    narrow[i] = static_cast<std::int32_t>(rng() % 8192);
    ++count[{wide[i], narrow[i]}];
  }
  phases.clear();
  const GroupedResult apart = run({GroupColumn{.name = "w", .dtype = DType::kInt64, .data = Bytes(wide)},
                                   GroupColumn{.name = "n", .dtype = DType::kInt32, .data = Bytes(narrow)}},
                                  &phases);
  EXPECT_EQ(std::find(phases.begin(), phases.end(), "key columns combined on the host"), phases.end());
  ASSERT_EQ(apart.groups, count.size());
  const auto& counts = std::get<std::vector<std::uint64_t>>(apart.results[0].values[2]);  // nancount
  std::uint64_t g = 0;
  for (const auto& [tuple, n] : count) {
    std::int64_t w = 0;
    std::int32_t m = 0;
    std::memcpy(&w, apart.keys[0].data.data() + 8 * g, 8);
    std::memcpy(&m, apart.keys[1].data.data() + 4 * g, 4);
    ASSERT_EQ(w, tuple.first);
    ASSERT_EQ(m, tuple.second);
    // NaN elements are not counted.
    EXPECT_LE(counts[g], n);
    ++g;
  }
}

}  // namespace
}  // namespace tally::grouping
