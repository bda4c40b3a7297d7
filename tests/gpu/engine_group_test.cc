// Group-by on the device (Backend::SumByKeyOnDevice, NumberKeysOnDevice,
// OrderByKeyOnDevice and CombineKeysOnDevice, tally/kernels/group.h)
// against the host's steps on the same table: the same groups and keys,
// the same counts, extremes and rows of argmin, sums and moments to
// rounding (and every bit where the host takes its direct pass too), every
// key dtype (floats with pandas' zeros and NaN group), skewed, wide and
// sparse keys, and run twice for the same bits.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "server/engine/functions/function_router.h"
#include "server/engine/grouping/grouped_reduction.h"
#include "server/engine/grouping/keyed_sums.h"
#include "tally/kernels/group.h"
#include "tally/rules/half.h"
#include "tests/gpu/engine_test_util.h"

namespace tally::engine_test {
namespace {

std::unique_ptr<ResidentMemory> Resident(Backend& b, std::span<const std::byte> data) {
  absl::StatusOr<std::unique_ptr<ResidentMemory>> m = b.AllocateResident(data.size(), 0);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  EXPECT_TRUE((*m)->Append(Extent::PageableHost(data)).ok());
  EXPECT_TRUE((*m)->Seal().ok());
  return std::move(*m);
}

template <typename K>
std::vector<std::byte> Keys(std::uint64_t rows, std::uint64_t spread, bool skew, std::int64_t base,
                            std::mt19937_64& rng) {
  std::vector<std::byte> out(rows * sizeof(K));
  std::geometric_distribution<std::uint64_t> geo(0.05);
  for (std::uint64_t i = 0; i < rows; ++i) {
    const std::uint64_t r = skew ? geo(rng) % spread : rng() % spread;
    const K k = static_cast<K>(base + static_cast<std::int64_t>(r));
    std::memcpy(out.data() + i * sizeof(K), &k, sizeof(K));
  }
  return out;
}

// 90% of the rows on a few keys near `base` (geometric, p 0.05), the rest
// uniform over `spread` keys: hot buckets of the partitioned pass.
template <typename K>
std::vector<std::byte> HotKeys(std::uint64_t rows, std::uint64_t spread, std::int64_t base, std::mt19937_64& rng) {
  std::vector<std::byte> out(rows * sizeof(K));
  std::geometric_distribution<std::uint64_t> geo(0.05);
  for (std::uint64_t i = 0; i < rows; ++i) {
    const std::uint64_t r = rng() % 10 != 0 ? geo(rng) % spread : rng() % spread;
    const K k = static_cast<K>(base + static_cast<std::int64_t>(r));
    std::memcpy(out.data() + i * sizeof(K), &k, sizeof(K));
  }
  return out;
}

// Whether the values hold NaN and infinities (in some groups only).
enum class Specials { kSome, kNone };

void CompareOps(DType key_dtype, const std::vector<std::byte>& keys, std::uint64_t rows, std::mt19937_64& rng,
                const std::string& what, const std::vector<OpSpec>& ops, bool on_gpu, bool direct, bool facts_kept,
                Match match, Specials specials, bool dropna);

// Where the device's steps take a plan: the direct pass with a copy of
// each slot per thread or per lane (keys within
// kernels::kMaxLaneCopiesRange; the ranges up to 8 below take the first), the
// direct pass over buckets of 2,048 keys (wider keys, up to
// kMaxPartitionedRange and twice the rows and 65,536 more), or the order by key (wider keys, float keys), whose
// group numbers then take the direct pass (no facts of the key column
// kept for the next request). The host's direct pass (keys within
// grouping::kMaxHostDirectRange) gives the device's direct pass's bits.
enum class Keyed { kLaneCopies, kBuckets, kOrdered };

void Compare(DType key_dtype, const std::vector<std::byte>& keys, std::uint64_t rows, std::mt19937_64& rng,
             const std::string& what, Keyed keyed, bool host_direct = false, Specials specials = Specials::kSome,
             bool dropna = true) {
  const bool by_key = keyed == Keyed::kLaneCopies || keyed == Keyed::kBuckets;
  const Match match = by_key && host_direct ? Match::kBits : Match::kRounded;
  struct Case {
    std::vector<OpSpec> ops;
    bool on_gpu;
    bool direct;  // summed by key (or group number) on the device
    Match match;
  };
  const std::vector<Case> cases = {
      // The direct pass over keys or group numbers.
      {{Op(OpKind::kSum), Op(OpKind::kCount), Op(OpKind::kMin), Op(OpKind::kMax), Op(OpKind::kMean)}, true, true,
       match},
      // The same for the NaN-skipping ops (which the segmented kernels do
      // not compute).
      {{Op(OpKind::kNanSum), Op(OpKind::kNanCount), Op(OpKind::kNanMin), Op(OpKind::kNanMax), Op(OpKind::kNanMean)},
       true, true, match},
      // Two ops, so that only some of the groups' arrays come back (no
      // counts, sums or minima asked: they come only where a group holds
      // a NaN or an infinity).
      {{Op(OpKind::kNanMean), Op(OpKind::kMax)}, true, true, match},
      // Ops of neither: the host over the gathered column.
      {{Op(OpKind::kArgmin), Op(OpKind::kVariance, 1.0), Op(OpKind::kSum)}, false, false, Match::kRounded}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CompareOps(key_dtype, keys, rows, rng, what + " ops " + std::to_string(i), cases[i].ops, cases[i].on_gpu,
               cases[i].direct, by_key && cases[i].direct, cases[i].match, specials, dropna);
  }
}

void CompareOps(DType key_dtype, const std::vector<std::byte>& keys, std::uint64_t rows, std::mt19937_64& rng,
                const std::string& what, const std::vector<OpSpec>& ops, bool on_gpu, bool direct, bool facts_kept,
                Match match, Specials specials, bool dropna) {
  SCOPED_TRACE(what + (dropna ? "" : ", dropna=False"));
  BackendOptions o = TestOptions();
  std::unique_ptr<Backend> cuda = MakeFunctionRouter(MakeCuda(o), 1 << 30);
  std::unique_ptr<Backend> cpu = MakeFunctionRouter(MakeCpu(), 1 << 30);
  // Normal values, a few NaN (in some groups only), and an infinity now
  // and then; no -0.0, whose sign min and max give by order on the host.
  std::vector<std::byte> values(rows * sizeof(float));
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (std::uint64_t i = 0; i < rows; ++i) {
    float v = normal(rng);
    const std::uint64_t r = rng() % 100000;
    if (specials == Specials::kSome && r < 30) v = std::nanf("");
    if (specials == Specials::kSome && r == 77) v = std::numeric_limits<float>::infinity();
    if (v == 0.0f) v = 1.0f;
    std::memcpy(values.data() + i * sizeof(float), &v, sizeof(float));
  }
  std::unique_ptr<ResidentMemory> dk = Resident(*cuda, keys), dv = Resident(*cuda, values);
  ASSERT_TRUE(dk && dv);

  GroupByPlan plan;
  plan.rows = rows;
  plan.columns = {GroupColumn{.name = "k", .dtype = key_dtype, .data = dk->extent().bytes,
                              .placement = dk->extent().placement},
                  GroupColumn{.name = "v", .dtype = DType::kFloat32, .data = dv->extent().bytes,
                              .placement = dv->extent().placement}};
  plan.keys = {0};
  ColumnAggregations c{.column = 1};
  for (std::size_t i = 0; i < ops.size(); ++i) c.positions.push_back(i);
  c.plan.array = ArraySpec{.dtype = DType::kFloat32, .length = rows};
  c.plan.ops = ops;
  plan.values = {c};
  plan.aggregations = ops.size();
  plan.dropna = dropna;
  GroupByPlan on_host = plan;
  on_host.columns[0].data = keys;
  on_host.columns[0].placement = Placement::PageableHost();
  on_host.columns[1].data = values;
  on_host.columns[1].placement = Placement::PageableHost();
  // As resident datasets' columns: the first request reads the keys'
  // range and the values' magnitude and leaves them in the facts, the
  // second takes them from there, and both give the same bits.
  ColumnFacts key_facts, value_facts;
  plan.columns[0].facts = &key_facts;
  plan.columns[1].facts = &value_facts;

  std::string steps, steps_again;  // the path taken, as the phases it noted
  absl::StatusOr<grouping::GroupedResult> dev =
      grouping::RunGroupBy(plan, *cuda, 1 << 26, [&](const char* step) { steps += std::string(step) + "; "; });
  ASSERT_TRUE(dev.ok()) << dev.status();
  absl::StatusOr<grouping::GroupedResult> again = grouping::RunGroupBy(
      plan, *cuda, 1 << 26, [&](const char* step) { steps_again += std::string(step) + "; "; });
  ASSERT_TRUE(again.ok()) << again.status();
  constexpr const char* kKnown = "known from an earlier request";
  EXPECT_EQ(steps.find(kKnown), std::string::npos) << steps;
  EXPECT_EQ(steps_again.find(kKnown) != std::string::npos, facts_kept) << steps_again;
  if (facts_kept) {
    ASSERT_TRUE(key_facts.key_range().has_value() && value_facts.largest_magnitude().has_value());
  }
  absl::StatusOr<grouping::GroupedResult> ref = grouping::RunGroupBy(on_host, *cpu, 1 << 26);
  ASSERT_TRUE(ref.ok()) << ref.status();
  if (on_gpu) {
    EXPECT_EQ(dev->backend, "cuda") << steps;
  }
  EXPECT_EQ(steps.find("summed by key on the device") != std::string::npos, direct) << steps;
  ASSERT_EQ(dev->groups, ref->groups);
  EXPECT_EQ(dev->keys[0].data, ref->keys[0].data);
  // The groups as segments of the rows in group order (the direct pass's
  // summed on the device), as the host's steps give them.
  ASSERT_TRUE(dev->plans[0].array.offsets != nullptr && ref->plans[0].array.offsets != nullptr);
  EXPECT_EQ(*dev->plans[0].array.offsets, *ref->plans[0].array.offsets);
  ExpectSame(dev->plans[0], dev->results[0], again->results[0], Match::kBits, what + " twice");
  ExpectSame(dev->plans[0], ref->results[0], dev->results[0], match, what + " against the host");
}

TEST(EngineGroupBy, DeviceOrderGivesTheHostsGroupsEveryKeyDtype) {
  TALLY_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t rows = 300001;
  static_assert(kernels::kMaxLaneCopiesRange == 32 && kernels::kMaxPartitionedRange == (1 << 26) &&
                    grouping::kMaxHostDirectRange == 65536,
                "the spreads below pick the device's and the host's paths");
  // A geometric skew with p 0.05 over 300,001 rows stays within a few hundred.
  Compare(DType::kInt32, Keys<std::int32_t>(rows, 16, false, -7, rng), rows, rng, "int32, 16 keys", Keyed::kLaneCopies,
          true);
  Compare(DType::kInt32, Keys<std::int32_t>(rows, 5000, true, 0, rng), rows, rng, "int32, skewed", Keyed::kBuckets,
          true);
  Compare(DType::kUInt64, Keys<std::uint64_t>(rows, 1000, false, 0, rng), rows, rng, "uint64", Keyed::kBuckets, true);
  Compare(DType::kInt8, Keys<std::int8_t>(rows, 200, false, -100, rng), rows, rng, "int8", Keyed::kBuckets, true);
  Compare(DType::kBool, Keys<bool>(rows, 2, false, 0, rng), rows, rng, "bool", Keyed::kLaneCopies, true);
  Compare(DType::kInt32, Keys<std::int32_t>(rows, 8, true, 3, rng), rows, rng, "int32, 8 keys, skewed",
          Keyed::kLaneCopies, true);
  Compare(DType::kInt64, Keys<std::int64_t>(1000, 3, false, 0, rng), 1000, rng, "int64, tiny", Keyed::kLaneCopies, true);
  // (Keys within one bucket, above, are read where they lie.) Buckets of
  // one item (stored outright), of several (added by atomics), hot ones,
  // and values with no NaN or infinity (none copied back).
  Compare(DType::kInt32, Keys<std::int32_t>(rows, 65536, false, 1000, rng), rows, rng, "int32, 65536 keys",
          Keyed::kBuckets, true);
  Compare(DType::kInt32, Keys<std::int32_t>(rows, 5000, false, -2500, rng), rows, rng, "int32, 5000 keys",
          Keyed::kBuckets, true);
  // Two buckets' keys in one pass, read in place.
  Compare(DType::kInt16, Keys<std::int16_t>(rows, 4096, false, -2048, rng), rows, rng, "int16, 4096 keys",
          Keyed::kBuckets, true);
  Compare(DType::kInt32, HotKeys<std::int32_t>(rows, 3000, 11, rng), rows, rng, "int32, 3000 hot keys",
          Keyed::kBuckets, true);
  Compare(DType::kInt16, HotKeys<std::int16_t>(rows, 30000, -15000, rng), rows, rng, "int16, hot keys",
          Keyed::kBuckets, true);
  Compare(DType::kInt32, HotKeys<std::int32_t>(rows, 60000, 7, rng), rows, rng, "int32, hot keys, no NaN",
          Keyed::kBuckets, true, Specials::kNone);
  Compare(DType::kUInt16, Keys<std::uint16_t>(rows, 60000, false, 0, rng), rows, rng, "uint16", Keyed::kBuckets,
          true);
  Compare(DType::kInt64, Keys<std::int64_t>(rows, 200000, false, -(std::int64_t{1} << 40), rng), rows, rng,
          "int64, far from 0", Keyed::kBuckets);
  // Keys spread past twice the rows: the order by key.
  Compare(DType::kInt64, Keys<std::int64_t>(rows, 4000000, false, 3, rng), rows, rng, "int64, sparse",
          Keyed::kOrdered);
  // Keys spread past 2^32: the order by key over 64-bit codes.
  Compare(DType::kInt64, Keys<std::int64_t>(rows, std::uint64_t{1} << 41, false, 5, rng), rows, rng,
          "int64, spread past 2^32", Keyed::kOrdered);
}

// Float keys from `distinct` values (normal, with ties), -0.0 and 0.0,
// both infinities and NaNs of several payloads and both signs, which
// group as pandas groups them: the zeros one key, the NaNs one key.
template <typename T>
std::vector<std::byte> FloatKeys(std::uint64_t rows, std::uint64_t distinct, std::mt19937_64& rng) {
  std::vector<T> pool;
  std::normal_distribution<double> normal(0.0, 1000.0);
  for (std::uint64_t i = 0; i < distinct; ++i) pool.push_back(T(std::round(normal(rng) * 8.0) / 8.0));
  const auto bits = [](std::uint64_t b) {
    T t;
    std::memcpy(&t, &b, sizeof(T));
    return t;
  };
  constexpr int kWidth = 8 * sizeof(T);
  const std::uint64_t sign = std::uint64_t{1} << (kWidth - 1);
  const int exponent = sizeof(T) == 8 ? 11 : sizeof(T) == 4 ? 8 : std::is_same_v<T, rules::BFloat16> ? 8 : 5;
  const std::uint64_t infinity = ((std::uint64_t{1} << exponent) - 1) << (kWidth - 1 - exponent);
  const std::uint64_t quiet = std::uint64_t{1} << (kWidth - 2 - exponent);
  for (const std::uint64_t b : {std::uint64_t{0}, sign, infinity, infinity | sign, infinity | quiet,
                                infinity | quiet | 1, infinity | quiet | sign, infinity | 1}) {
    pool.push_back(bits(b));
  }
  std::vector<std::byte> out(rows * sizeof(T));
  for (std::uint64_t i = 0; i < rows; ++i) {
    // One row in 16 from the last eight (zeros, infinities, NaNs).
    const std::uint64_t r = rng() % 16 == 0 ? pool.size() - 1 - rng() % 8 : rng() % distinct;
    std::memcpy(out.data() + i * sizeof(T), &pool[r], sizeof(T));
  }
  return out;
}

// Keys the direct pass does not take: float keys of every width, kept and
// dropped NaN, keys that are all NaN, and integers spread over all 64 bits.
TEST(EngineGroupBy, DeviceOrderTakesFloatAndSparseKeys) {
  TALLY_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t rows = 300001;
  for (const bool dropna : {true, false}) {
    Compare(DType::kFloat32, FloatKeys<float>(rows, 1000, rng), rows, rng, "float32 keys", Keyed::kOrdered, false,
            Specials::kSome, dropna);
    Compare(DType::kFloat64, FloatKeys<double>(rows, 100000, rng), rows, rng, "float64 keys", Keyed::kOrdered, false,
            Specials::kSome, dropna);
    Compare(DType::kFloat16, FloatKeys<rules::Float16>(rows, 300, rng), rows, rng, "float16 keys", Keyed::kOrdered,
            false, Specials::kSome, dropna);
    Compare(DType::kBFloat16, FloatKeys<rules::BFloat16>(rows, 300, rng), rows, rng, "bfloat16 keys",
            Keyed::kOrdered, false, Specials::kSome, dropna);
    std::vector<std::byte> nan(1000 * sizeof(float));
    for (std::size_t i = 0; i < 1000; ++i) {
      const float f = i % 3 == 0 ? -std::nanf("") : std::nanf("");
      std::memcpy(nan.data() + i * sizeof f, &f, sizeof f);
    }
    Compare(DType::kFloat32, nan, 1000, rng, "every key NaN", Keyed::kOrdered, false, Specials::kSome, dropna);
  }
  // The whole 64-bit range (its span wraps to 0) and random 64-bit keys.
  std::vector<std::byte> wide = Keys<std::uint64_t>(rows, ~std::uint64_t{0}, false, 0, rng);
  const std::uint64_t ends[2] = {0, ~std::uint64_t{0}};
  std::memcpy(wide.data() + 17 * 8, &ends[0], 8);
  std::memcpy(wide.data() + 99 * 8, &ends[1], 8);
  Compare(DType::kUInt64, wide, rows, rng, "uint64 over every bit", Keyed::kOrdered);
  // 50 keys 2^56 apart: few groups, 64-bit codes.
  std::vector<std::byte> apart(rows * sizeof(std::int64_t));
  for (std::uint64_t i = 0; i < rows; ++i) {
    const std::int64_t k = (static_cast<std::int64_t>(rng() % 50) - 25) * (std::int64_t{1} << 56) + 3;
    std::memcpy(apart.data() + i * sizeof k, &k, sizeof k);
  }
  // The ends of int64 among them: the largest is the one key a hash
  // table's empty slot stands for.
  const std::int64_t int64_ends[2] = {std::numeric_limits<std::int64_t>::min(),
                                      std::numeric_limits<std::int64_t>::max()};
  std::memcpy(apart.data() + 5 * 8, &int64_ends[0], 8);
  std::memcpy(apart.data() + 6 * 8, &int64_ends[1], 8);
  std::memcpy(apart.data() + 70001 * 8, &int64_ends[1], 8);
  Compare(DType::kInt64, apart, rows, rng, "int64, 50 keys far apart and both ends", Keyed::kOrdered);
}

// Sparse keys past --max_groups: the hash table's numbering stops and the
// order names the limit; within it, every distinct key is a group.
TEST(EngineGroupBy, SparseKeysPastTheGroupLimitAreRefusedByName) {
  TALLY_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t rows = 200000;
  const std::vector<std::byte> keys = Keys<std::int64_t>(rows, std::uint64_t{1} << 50, false, 0, rng);
  std::vector<std::byte> values(rows * sizeof(float));
  std::unique_ptr<Backend> cuda = MakeFunctionRouter(MakeCuda(TestOptions()), 1 << 30);
  std::unique_ptr<ResidentMemory> dk = Resident(*cuda, keys), dv = Resident(*cuda, values);
  ASSERT_TRUE(dk && dv);
  GroupByPlan plan;
  plan.rows = rows;
  plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt64, .data = dk->extent().bytes,
                              .placement = dk->extent().placement},
                  GroupColumn{.name = "v", .dtype = DType::kFloat32, .data = dv->extent().bytes,
                              .placement = dv->extent().placement}};
  plan.keys = {0};
  ColumnAggregations c{.column = 1, .positions = {0}};
  c.plan.array = ArraySpec{.dtype = DType::kFloat32, .length = rows};
  c.plan.ops = {Op(OpKind::kSum)};
  plan.values = {c};
  plan.aggregations = 1;
  absl::StatusOr<grouping::GroupedResult> refused = grouping::RunGroupBy(plan, *cuda, 1000);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("--max_groups"), std::string_view::npos) << refused.status();
  std::string steps;
  absl::StatusOr<grouping::GroupedResult> answered =
      grouping::RunGroupBy(plan, *cuda, rows, [&](const char* step) { steps += std::string(step) + "; "; });
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_NE(steps.find("numbered by a hash table"), std::string::npos) << steps;
  std::vector<std::int64_t> distinct(rows);
  std::memcpy(distinct.data(), keys.data(), keys.size());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  ASSERT_EQ(answered->groups, distinct.size());
  ASSERT_EQ(answered->keys[0].data.size(), distinct.size() * sizeof(std::int64_t));
  EXPECT_EQ(std::memcmp(answered->keys[0].data.data(), distinct.data(), answered->keys[0].data.size()), 0);
}

// Many rows per key: every bucket of the partitioned pass cut into several
// items, a million keys, and a table moved in parts, against the host.
TEST(EngineGroupBy, PartitionedPassOverAMillionKeys) {
  TALLY_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t rows = std::uint64_t{1} << 23;
  Compare(DType::kInt32, Keys<std::int32_t>(rows, 1000000, false, 0, rng), rows, rng, "int32, 1M keys",
          Keyed::kBuckets);
  Compare(DType::kUInt32, Keys<std::uint32_t>(rows, 20000, false, 0, rng), rows, rng, "uint32, 20000 keys",
          Keyed::kBuckets, true, Specials::kNone);
  // Past 2^25 float32 rows the table is moved in two parts (256 MiB of
  // moved rows at a time), every item's slots added by atomics.
  const std::uint64_t more = (std::uint64_t{1} << 25) + 4097;
  Compare(DType::kInt32, Keys<std::int32_t>(more, 3000, false, -1500, rng), more, rng, "int32, two parts",
          Keyed::kBuckets, true);
  // The widest range the buckets take: 32,768 of them, the count's and the
  // move's counters 128 KiB of shared memory a block.
  Compare(DType::kInt32, Keys<std::int32_t>(more, kernels::kMaxPartitionedRange, false, -3, rng), more, rng,
          "int32, 2^26 keys", Keyed::kBuckets);
}

// Two value columns of `rows` rows: float32 (normal, about one NaN in a
// thousand) and int64 (-1,000 to 1,000).
struct ValueColumns {
  std::vector<std::byte> floats, wide;
};
ValueColumns MakeValueColumns(std::uint64_t rows, std::mt19937_64& rng) {
  ValueColumns out{std::vector<std::byte>(rows * sizeof(float)), std::vector<std::byte>(rows * sizeof(std::int64_t))};
  std::normal_distribution<float> normal(0.0f, 100.0f);
  for (std::uint64_t i = 0; i < rows; ++i) {
    float v = normal(rng);
    if (rng() % 1000 == 0) v = std::nanf("");
    const auto w = static_cast<std::int64_t>(rng() % 2001) - 1000;
    std::memcpy(out.floats.data() + i * sizeof(float), &v, sizeof(float));
    std::memcpy(out.wide.data() + i * sizeof(w), &w, sizeof(w));
  }
  return out;
}

// `values`' columns appended to `plan` (after its keys) with their
// aggregations: the float column's those the direct pass takes, the int64
// column's those the order by key and the segmented kernels take (an
// argmin mapped back to table rows among them).
void AddValueColumns(GroupByPlan& plan, const ValueColumns& values) {
  const std::size_t first = plan.columns.size();
  plan.columns.push_back(GroupColumn{.name = "f", .dtype = DType::kFloat32, .data = values.floats});
  plan.columns.push_back(GroupColumn{.name = "i", .dtype = DType::kInt64, .data = values.wide});
  const std::vector<std::vector<OpSpec>> ops = {
      {Op(OpKind::kNanSum), Op(OpKind::kNanCount), Op(OpKind::kNanMin), Op(OpKind::kNanMax), Op(OpKind::kNanMean)},
      {Op(OpKind::kSum), Op(OpKind::kMin), Op(OpKind::kMax), Op(OpKind::kArgmin)}};
  for (std::size_t v = 0; v < ops.size(); ++v) {
    ColumnAggregations c{.column = first + v};
    for (std::size_t i = 0; i < ops[v].size(); ++i) c.positions.push_back(plan.aggregations + i);
    c.plan.array = ArraySpec{.dtype = plan.columns[c.column].dtype, .length = plan.rows};
    c.plan.ops = ops[v];
    plan.aggregations += ops[v].size();
    plan.values.push_back(c);
  }
}

// A table that arrives in host memory (inline, a shared-memory region) is
// copied to the GPU and grouped there from cuda::EnginePolicy::
// kMinRowsToGroupOnDevice rows, with the answers the host's steps give;
// a smaller one stays on the host.
TEST(EngineGroupBy, HostTablesOfManyRowsAreGroupedOnTheDevice) {
  TALLY_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  BackendOptions o = TestOptions();
  std::unique_ptr<Backend> cuda = MakeFunctionRouter(MakeCuda(o), 1 << 30);
  std::unique_ptr<Backend> cpu = MakeFunctionRouter(MakeCpu(), 1 << 30);
  for (const std::uint64_t rows : {std::uint64_t{1} << 20, (std::uint64_t{1} << 20) + 4099, std::uint64_t{200003}}) {
    const bool copied = rows >= (std::uint64_t{1} << 20);
    SCOPED_TRACE(rows);
    const std::vector<std::byte> keys = Keys<std::int32_t>(rows, 3000, true, -50, rng);
    const ValueColumns values = MakeValueColumns(rows, rng);
    GroupByPlan plan;
    plan.rows = rows;
    plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt32, .data = keys}};
    plan.keys = {0};
    AddValueColumns(plan, values);
    std::string steps;
    absl::StatusOr<grouping::GroupedResult> dev =
        grouping::RunGroupBy(plan, *cuda, 1 << 26, [&](const char* step) { steps += std::string(step) + "; "; });
    ASSERT_TRUE(dev.ok()) << dev.status();
    absl::StatusOr<grouping::GroupedResult> ref = grouping::RunGroupBy(plan, *cpu, 1 << 26);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(steps.find("columns copied to the device") != std::string::npos, copied) << steps;
    EXPECT_EQ(dev->on_device, copied) << steps;
    ASSERT_EQ(dev->groups, ref->groups);
    EXPECT_EQ(dev->keys[0].data, ref->keys[0].data);
    ASSERT_EQ(dev->results.size(), 2u);
    // Keys within 65,536: the host's direct pass gives the device's bits;
    // int64 sums, extremes and argmin are exact either way.
    ExpectSame(dev->plans[0], ref->results[0], dev->results[0], Match::kBits, "float values");
    ExpectSame(dev->plans[1], ref->results[1], dev->results[1], Match::kBits, "int64 values");
  }
}

// A key column of a composite key: its dtype and its elements.
struct KeyColumnOf {
  DType dtype;
  std::vector<std::byte> keys;
};

// GROUP BY several integer key columns: combined into one key on the
// device (Backend::CombineKeysOnDevice) and grouped as one, each group's
// tuple read back, against the host's steps on the same table; columns
// resident on the GPU, or `rows` of them in host memory (copied there from
// kMinRowsToGroupOnDevice rows). `combined`: whether the device combines
// them (their ranges multiply within 2^32).
void CompareComposite(const std::vector<KeyColumnOf>& key_columns, std::uint64_t rows, bool resident, bool combined,
                      std::mt19937_64& rng, const std::string& what) {
  SCOPED_TRACE(what);
  BackendOptions o = TestOptions();
  std::unique_ptr<Backend> cuda = MakeFunctionRouter(MakeCuda(o), 1 << 30);
  std::unique_ptr<Backend> cpu = MakeFunctionRouter(MakeCpu(), 1 << 30);
  const ValueColumns values = MakeValueColumns(rows, rng);
  GroupByPlan plan;
  plan.rows = rows;
  for (std::size_t k = 0; k < key_columns.size(); ++k) {
    plan.columns.push_back(GroupColumn{.name = "k" + std::to_string(k), .dtype = key_columns[k].dtype,
                                       .data = key_columns[k].keys});
    plan.keys.push_back(k);
  }
  // The direct pass takes the float column where the combined range lets it.
  AddValueColumns(plan, values);
  GroupByPlan on_gpu = plan;
  std::vector<std::unique_ptr<ResidentMemory>> held;
  if (resident) {
    for (GroupColumn& c : on_gpu.columns) {
      held.push_back(Resident(*cuda, c.data));
      ASSERT_TRUE(held.back());
      c.data = held.back()->extent().bytes;
      c.placement = held.back()->extent().placement;
    }
  }
  std::string steps;
  absl::StatusOr<grouping::GroupedResult> dev =
      grouping::RunGroupBy(on_gpu, *cuda, 1 << 26, [&](const char* step) { steps += std::string(step) + "; "; });
  ASSERT_TRUE(dev.ok()) << dev.status();
  absl::StatusOr<grouping::GroupedResult> ref = grouping::RunGroupBy(plan, *cpu, 1 << 26);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(steps.find("key columns combined on the device") != std::string::npos, combined) << steps;
  EXPECT_EQ(dev->on_device, combined) << steps;
  ASSERT_EQ(dev->groups, ref->groups);
  ASSERT_EQ(dev->keys.size(), key_columns.size());
  for (std::size_t k = 0; k < key_columns.size(); ++k) {
    EXPECT_EQ(dev->keys[k].dtype, key_columns[k].dtype) << "key column " << k;
    EXPECT_EQ(dev->keys[k].data, ref->keys[k].data) << "key column " << k;
    EXPECT_EQ(dev->keys[k].validity, nullptr);
  }
  ASSERT_EQ(dev->results.size(), 2u);
  // The host groups composite keys by its general path, whose float sums
  // are rounded by another route than the direct pass's fixed point.
  ExpectSame(dev->plans[0], ref->results[0], dev->results[0], Match::kRounded, "float values");
  ExpectSame(dev->plans[1], ref->results[1], dev->results[1], Match::kBits, "int64 values");
}

TEST(EngineGroupBy, CompositeKeysAreCombinedOnTheDevice) {
  TALLY_REQUIRE_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t rows = 300001;
  // 16 x 10 tuples: the direct pass over the combined key.
  CompareComposite({{DType::kInt32, Keys<std::int32_t>(rows, 16, false, -7, rng)},
                    {DType::kInt16, Keys<std::int16_t>(rows, 10, true, -5, rng)}},
                   rows, true, true, rng, "int32 x int16, 160 tuples");
  // Four columns, signed, unsigned and bool, one far from 0: 1.2M tuples,
  // past twice the rows, so the order by key.
  CompareComposite({{DType::kInt8, Keys<std::int8_t>(rows, 200, false, -100, rng)},
                    {DType::kUInt16, Keys<std::uint16_t>(rows, 300, false, 65000, rng)},
                    {DType::kBool, Keys<bool>(rows, 2, false, 0, rng)},
                    {DType::kInt64, Keys<std::int64_t>(rows, 10, false, -(std::int64_t{1} << 40), rng)}},
                   rows, true, true, rng, "int8 x uint16 x bool x int64, ordered");
  // Ranges whose product passes 2^32: the host's steps over copies.
  CompareComposite({{DType::kInt64, Keys<std::int64_t>(rows, std::uint64_t{1} << 20, false, 0, rng)},
                    {DType::kUInt32, Keys<std::uint32_t>(rows, std::uint64_t{1} << 13, false, 0, rng)}},
                   rows, true, false, rng, "ranges past 2^32");
  // A host table of 2^20 + 5 rows: copied to the GPU, combined there.
  const std::uint64_t more = (std::uint64_t{1} << 20) + 5;
  CompareComposite({{DType::kUInt8, Keys<std::uint8_t>(more, 100, false, 0, rng)},
                    {DType::kInt32, Keys<std::int32_t>(more, 100, true, 1 << 20, rng)}},
                   more, false, true, rng, "host table, 100 x 100");
}

}  // namespace
}  // namespace tally::engine_test
