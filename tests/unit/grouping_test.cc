// Group-by's engine: the groups of key columns (group_keys.h) against
// std::map references, and a plan's aggregations per group on the cpu
// backend (grouped_reduction.h) against loops over each group's rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/functions/function_router.h"
#include "server/engine/grouping/grouped_reduction.h"
#include "tests/unit/test_seed.h"

namespace tally::grouping {
namespace {

template <typename T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

template <typename T>
KeyColumn Key(const std::vector<T>& v, DType dtype, Validity validity = nullptr) {
  return KeyColumn{.dtype = dtype, .data = Bytes(v), .validity = std::move(validity)};
}

Validity Mask(const std::vector<bool>& valid) {
  std::vector<std::uint32_t> words((valid.size() + 31) / 32, 0);
  for (std::size_t i = 0; i < valid.size(); ++i) {
    if (valid[i]) words[i / 32] |= 1u << (i % 32);
  }
  return std::make_shared<const std::vector<std::uint32_t>>(std::move(words));
}

Groups Find(std::vector<KeyColumn> keys, std::uint64_t rows, GroupOptions options = {}) {
  absl::StatusOr<Groups> g = FindGroups(keys, rows, options);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : Groups{};
}

constexpr std::uint32_t X = kNoGroup;

TEST(FindGroups, SortsKeysAscendingOrKeepsTheOrderTheyAreFirstSeenIn) {
  const std::vector<std::int32_t> k = {3, 1, 3, -2, 1};
  Groups sorted = Find({Key(k, DType::kInt32)}, k.size());
  EXPECT_EQ(sorted.count, 3u);
  EXPECT_EQ(sorted.of_row, (std::vector<std::uint32_t>{2, 1, 2, 0, 1}));
  EXPECT_EQ(sorted.first_row, (std::vector<std::uint64_t>{3, 1, 0}));
  Groups seen = Find({Key(k, DType::kInt32)}, k.size(), {.sort = false});
  EXPECT_EQ(seen.of_row, (std::vector<std::uint32_t>{0, 1, 0, 2, 1}));
  EXPECT_EQ(seen.first_row, (std::vector<std::uint64_t>{0, 1, 3}));
}

TEST(FindGroups, UnsignedKeysAboveTheSignedRangeSortAsUnsigned) {
  const std::vector<std::uint64_t> k = {~std::uint64_t{0}, 1, std::uint64_t{1} << 63};
  EXPECT_EQ(Find({Key(k, DType::kUInt64)}, k.size()).of_row, (std::vector<std::uint32_t>{2, 0, 1}));
}

TEST(FindGroups, NegativeZeroIsZeroAndEveryNanIsOneNaKeyDroppedOrSortedLast) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> k = {0.0, -0.0, nan, -1.5, -nan, 2.0};
  EXPECT_EQ(Find({Key(k, DType::kFloat64)}, k.size()).of_row, (std::vector<std::uint32_t>{1, 1, X, 0, X, 2}));
  Groups kept = Find({Key(k, DType::kFloat64)}, k.size(), {.dropna = false});
  EXPECT_EQ(kept.count, 4u);
  EXPECT_EQ(kept.of_row, (std::vector<std::uint32_t>{1, 1, 3, 0, 3, 2}));
  Groups seen = Find({Key(k, DType::kFloat64)}, k.size(), {.sort = false, .dropna = false});
  EXPECT_EQ(seen.of_row, (std::vector<std::uint32_t>{0, 0, 1, 2, 1, 3}));
}

TEST(FindGroups, AMissingKeyIsNaLikeNan) {
  const std::vector<std::int16_t> k = {5, 7, 5, 9};
  const Validity valid = Mask({true, false, true, false});
  EXPECT_EQ(Find({Key(k, DType::kInt16, valid)}, k.size()).of_row, (std::vector<std::uint32_t>{0, X, 0, X}));
  EXPECT_EQ(Find({Key(k, DType::kInt16, valid)}, k.size(), {.dropna = false}).of_row,
            (std::vector<std::uint32_t>{0, 1, 0, 1}));
  const KeyColumn column = Key(k, DType::kInt16, valid);
  EXPECT_FALSE(KeyIsMissing(column, 0));
  EXPECT_TRUE(KeyIsMissing(column, 3));
}

TEST(FindGroups, CompositeKeysCompareColumnByColumn) {
  const std::vector<std::int8_t> a = {1, 1, 2, 2, 1, 0};
  const std::vector<float> b = {5, 4, 5, 5, 4, 9};
  EXPECT_EQ(Find({Key(a, DType::kInt8), Key(b, DType::kFloat32)}, a.size()).of_row,
            (std::vector<std::uint32_t>{2, 1, 3, 3, 1, 0}));
  EXPECT_EQ(Find({Key(a, DType::kInt8), Key(b, DType::kFloat32)}, a.size(), {.sort = false}).of_row,
            (std::vector<std::uint32_t>{0, 1, 2, 2, 1, 3}));
  // An NA in any key column drops the row, or is that column's last value.
  const std::vector<float> c = {5, std::nanf(""), 5, 5, 4, 9};
  EXPECT_EQ(Find({Key(a, DType::kInt8), Key(c, DType::kFloat32)}, a.size()).of_row,
            (std::vector<std::uint32_t>{2, X, 3, 3, 1, 0}));
  EXPECT_EQ(Find({Key(a, DType::kInt8), Key(c, DType::kFloat32)}, a.size(), {.dropna = false}).of_row,
            (std::vector<std::uint32_t>{2, 3, 4, 4, 1, 0}));
}

TEST(FindGroups, MoreGroupsThanTheLimitIsResourceExhaustedNamingTheFlag) {
  std::vector<std::int64_t> k(100);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::int64_t>(i % 10);
  const std::vector<KeyColumn> keys = {Key(k, DType::kInt64)};
  EXPECT_TRUE(FindGroups(keys, k.size(), {.max_groups = 10}).ok());
  absl::StatusOr<Groups> over = FindGroups(keys, k.size(), {.max_groups = 9});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("--max_groups"), std::string_view::npos) << over.status();
}

TEST(FindGroups, NoKeyColumnIsOneGroupOfEveryRow) {
  Groups g = Find({}, 4);
  EXPECT_EQ(g.count, 1u);
  EXPECT_EQ(g.of_row, (std::vector<std::uint32_t>(4, 0)));
  EXPECT_EQ(Find({}, 0).count, 0u);
}

TEST(FindGroups, RandomCompositeKeysNumberTheirTuplesInMapOrder) {
  TALLY_SEEDED_RNG(rng);
  for (int round = 0; round < 20; ++round) {
    const std::size_t rows = 1 + rng() % 5000;
    const int span_a = 1 + static_cast<int>(rng() % 40), span_b = 1 + static_cast<int>(rng() % 300);
    std::vector<std::int32_t> a(rows);
    std::vector<std::uint16_t> b(rows);
    std::map<std::pair<std::int32_t, std::uint16_t>, std::uint32_t> tuples;
    for (std::size_t i = 0; i < rows; ++i) {
      a[i] = static_cast<std::int32_t>(rng() % span_a) - span_a / 2;
      b[i] = static_cast<std::uint16_t>(rng() % span_b);
      tuples.emplace(std::make_pair(a[i], b[i]), 0);
    }
    std::uint32_t n = 0;
    for (auto& [key, rank] : tuples) rank = n++;
    Groups g = Find({Key(a, DType::kInt32), Key(b, DType::kUInt16)}, rows);
    ASSERT_EQ(g.count, tuples.size());
    for (std::size_t i = 0; i < rows; ++i) ASSERT_EQ(g.of_row[i], tuples.at({a[i], b[i]})) << "row " << i;
    for (std::uint32_t k = 0; k < g.count; ++k) {
      const std::uint64_t r = g.first_row[k];
      ASSERT_EQ(g.of_row[r], k);
      for (std::uint64_t earlier = 0; earlier < r; ++earlier) ASSERT_NE(g.of_row[earlier], k);
    }
  }
}

// Keys spread too wide for a direct table take the hash map: the same
// numbering, sorted and first-seen.
TEST(FindGroups, WideAndFloatKeysNumberTheirTuplesInMapOrderAndFirstSeenOrder) {
  TALLY_SEEDED_RNG(rng);
  for (int round = 0; round < 10; ++round) {
    const std::size_t rows = 1 + rng() % 5000;
    std::vector<std::int64_t> a(rows);
    std::vector<double> b(rows);
    std::map<std::pair<std::int64_t, double>, std::uint32_t> tuples;
    std::map<std::pair<std::int64_t, double>, std::uint32_t> seen;
    for (std::size_t i = 0; i < rows; ++i) {
      a[i] = (static_cast<std::int64_t>(rng() % 50) - 25) * (std::int64_t{1} << 40);
      b[i] = static_cast<double>(rng() % 20) * 0.25 - 2.0;
      tuples.emplace(std::make_pair(a[i], b[i]), 0);
      seen.emplace(std::make_pair(a[i], b[i]), static_cast<std::uint32_t>(seen.size()));
    }
    std::uint32_t n = 0;
    for (auto& [key, rank] : tuples) rank = n++;
    const std::vector<KeyColumn> keys = {Key(a, DType::kInt64), Key(b, DType::kFloat64)};
    Groups sorted = Find(keys, rows);
    Groups first = Find(keys, rows, {.sort = false});
    ASSERT_EQ(sorted.count, tuples.size());
    for (std::size_t i = 0; i < rows; ++i) {
      ASSERT_EQ(sorted.of_row[i], tuples.at({a[i], b[i]})) << "row " << i;
      ASSERT_EQ(first.of_row[i], seen.at({a[i], b[i]})) << "row " << i;
    }
  }
}

// Many distinct keys, spread wide (the sort by a digit at a time): signed
// and unsigned 64-bit keys past both signs and the signed range, floats of
// both signs with infinities and -0.0, in ascending order as std::map
// orders them.
TEST(FindGroups, ManyWideKeysOfEveryKindSortAscending) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 60000;
  std::vector<std::int64_t> s(rows);
  std::vector<std::uint64_t> u(rows);
  std::vector<double> f(rows);
  std::map<std::int64_t, int> ss;
  std::map<std::uint64_t, int> us;
  std::map<double, int> fs;
  for (std::size_t i = 0; i < rows; ++i) {
    s[i] = static_cast<std::int64_t>(rng() % 40000) * ((std::int64_t{1} << 45) + 7) - (std::int64_t{1} << 61);
    u[i] = (rng() % 2 ? std::uint64_t{1} << 63 : 0) + rng() % 30000 * 1000003;
    const int pick = static_cast<int>(rng() % 100);
    f[i] = pick == 0 ? -std::numeric_limits<double>::infinity()
           : pick == 1 ? std::numeric_limits<double>::infinity()
           : pick == 2 ? -0.0
                       : std::ldexp(static_cast<double>(static_cast<std::int64_t>(rng() % 60000) - 30000),
                                    static_cast<int>(rng() % 200) - 100);
    ss.emplace(s[i], 0);
    us.emplace(u[i], 0);
    fs.emplace(f[i] == 0 ? 0.0 : f[i], 0);
  }
  const auto expect_ranks = [&](const auto& sorted, const auto& column, DType dtype, const char* what) {
    std::map<typename std::decay_t<decltype(sorted)>::key_type, std::uint32_t> rank;
    std::uint32_t n = 0;
    for (const auto& [key, unused] : sorted) rank.emplace(key, n++);
    ASSERT_GT(n, 4096u) << what << ": few enough keys for std::sort";
    Groups g = Find({Key(column, dtype)}, rows);
    ASSERT_EQ(g.count, n) << what;
    for (std::size_t i = 0; i < rows; ++i) {
      const auto key = column[i];
      ASSERT_EQ(g.of_row[i], rank.at(key == 0 ? decltype(key){0} : key)) << what << ", row " << i;
    }
  };
  expect_ranks(ss, s, DType::kInt64, "int64");
  expect_ranks(us, u, DType::kUInt64, "uint64");
  expect_ranks(fs, f, DType::kFloat64, "float64");
}

// Eight key columns whose distinct counts multiply past 2^64 (so the
// mixed-radix numbers are coded once midway), with NA in one of them: the
// tuples' order sorted (NA last in its column) and first-seen, NA rows
// dropped or kept as one key per column.
TEST(FindGroups, EightKeysPastSixtyFourBitsNumberTheirTuplesInMapOrder) {
  TALLY_SEEDED_RNG(rng);
  for (int round = 0; round < 6; ++round) {
    const std::size_t rows = 2000 + rng() % 3000;
    constexpr int kKeys = 7;  // and the NaN column: 8, the most a request takes
    std::vector<std::vector<std::int64_t>> cols(kKeys, std::vector<std::int64_t>(rows));
    std::vector<double> with_nan(rows);
    for (std::size_t i = 0; i < rows; ++i) {
      for (int k = 0; k < kKeys; ++k) {
        // Wide values (a hash map each), few enough repeats that tuples
        // are mostly distinct; column 3 narrow, so that some repeat.
        cols[k][i] = k == 3 ? static_cast<std::int64_t>(rng() % 3)
                            : static_cast<std::int64_t>(rng() % 1000000007) * 1000003;
      }
      with_nan[i] = rng() % 10 == 0 ? std::nan("") : static_cast<double>(rng() % 7);
      if (i % 5 == 1) cols[0][i] = cols[0][i - 1];  // repeated tuples
      if (i % 5 == 1) {
        for (int k = 1; k < kKeys; ++k) cols[k][i] = cols[k][i - 1];
        with_nan[i] = with_nan[i - 1];
      }
    }
    std::vector<KeyColumn> keys;
    for (int k = 0; k < kKeys; ++k) keys.push_back(Key(cols[k], DType::kInt64));
    keys.insert(keys.begin() + 2, Key(with_nan, DType::kFloat64));
    for (const bool dropna : {true, false}) {
      // Tuples as (NA flag, value) per column, NA sorting last.
      using Tuple = std::vector<std::pair<int, double>>;
      std::map<Tuple, std::uint32_t> sorted_rank;
      std::map<Tuple, std::uint32_t> seen;
      std::vector<Tuple> of_row(rows);
      std::vector<bool> dropped(rows, false);
      for (std::size_t i = 0; i < rows; ++i) {
        Tuple t;
        for (int k = 0; k < kKeys + 1; ++k) {
          if (k == 2) {
            const bool na = std::isnan(with_nan[i]);
            t.emplace_back(na ? 1 : 0, na ? 0.0 : with_nan[i]);
          } else {
            t.emplace_back(0, static_cast<double>(cols[k < 2 ? k : k - 1][i]));
          }
        }
        dropped[i] = dropna && t[2].first == 1;
        of_row[i] = t;
        if (dropped[i]) continue;
        sorted_rank.emplace(t, 0);
        seen.emplace(t, static_cast<std::uint32_t>(seen.size()));
      }
      std::uint32_t n = 0;
      for (auto& [t, rank] : sorted_rank) rank = n++;
      const Groups by_key = Find(keys, rows, {.sort = true, .dropna = dropna});
      const Groups first = Find(keys, rows, {.sort = false, .dropna = dropna});
      ASSERT_EQ(by_key.count, sorted_rank.size());
      ASSERT_EQ(first.count, seen.size());
      for (std::size_t i = 0; i < rows; ++i) {
        if (dropped[i]) {
          ASSERT_EQ(by_key.of_row[i], kNoGroup) << "row " << i;
          ASSERT_EQ(first.of_row[i], kNoGroup) << "row " << i;
          continue;
        }
        ASSERT_EQ(by_key.of_row[i], sorted_rank.at(of_row[i])) << "row " << i << " dropna " << dropna;
        ASSERT_EQ(first.of_row[i], seen.at(of_row[i])) << "row " << i << " dropna " << dropna;
      }
    }
  }
}

// Composite keys whose numbers spread past a direct table but fit 64 bits,
// with more distinct numbers than the hash map takes (three columns of 400
// values over 1.2M rows: about 1.19M tuples), are coded by sorting the
// rows' numbers: the tuples' order, rows with a NaN key dropped or grouped
// last, each group's first row; the group limit refused by name on this
// path too.
TEST(FindGroups, ManyDistinctCompositeKeysAreNumberedBySortingTheirNumbers) {
  TALLY_SEEDED_RNG(rng);
  constexpr std::size_t kRows = 1200000;
  std::vector<std::int32_t> a(kRows);
  std::vector<std::uint16_t> b(kRows);
  std::vector<float> c(kRows);
  for (std::size_t i = 0; i < kRows; ++i) {
    a[i] = static_cast<std::int32_t>(rng() % 400) * 1000 - 170000;
    b[i] = static_cast<std::uint16_t>(rng() % 400);
    c[i] = rng() % 50 == 0 ? std::nanf("") : static_cast<float>(rng() % 399) - 0.5f;
  }
  const std::vector<KeyColumn> keys = {Key(a, DType::kInt32), Key(b, DType::kUInt16), Key(c, DType::kFloat32)};
  for (const bool dropna : {true, false}) {
    // Each kept row's tuple, c as (NA flag, value) so that NA sorts last,
    // sorted with its row; a group's rank is the count of distinct tuples
    // before it.
    using Tuple = std::tuple<std::int32_t, std::uint16_t, int, float>;
    std::vector<std::pair<Tuple, std::uint32_t>> rows;
    for (std::size_t i = 0; i < kRows; ++i) {
      const bool na = std::isnan(c[i]);
      if (na && dropna) continue;
      rows.push_back({Tuple{a[i], b[i], na ? 1 : 0, na ? 0.0f : c[i]}, static_cast<std::uint32_t>(i)});
    }
    std::sort(rows.begin(), rows.end());
    std::vector<std::uint32_t> want(kRows, kNoGroup);
    std::uint32_t groups = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i > 0 && rows[i].first != rows[i - 1].first) ++groups;
      want[rows[i].second] = groups;
    }
    ++groups;
    ASSERT_GT(groups, 1u << 20) << "too few distinct tuples to pass the hash map";
    const Groups by_key = Find(keys, kRows, {.sort = true, .dropna = dropna, .max_groups = 1u << 24});
    ASSERT_EQ(by_key.count, groups);
    ASSERT_EQ(by_key.of_row, want) << "dropna " << dropna;
    std::vector<std::uint64_t> first(groups, ~std::uint64_t{0});
    for (std::size_t r = 0; r < kRows; ++r) {
      if (want[r] != kNoGroup && first[want[r]] == ~std::uint64_t{0}) first[want[r]] = r;
    }
    ASSERT_EQ(by_key.first_row, first);
    absl::StatusOr<Groups> over = FindGroups(keys, kRows, {.sort = true, .dropna = dropna, .max_groups = groups - 1});
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(over.status().message().find("--max_groups"), std::string_view::npos) << over.status();
  }
}

// The table of `keys` and `values` with sum, argmin and count of `values`
// per group on the cpu backend.
TEST(RunGroupBy, AnswersEachGroupsRowsAndIndicesAreRowsOfTheTable) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 20000;
  std::vector<std::int64_t> keys(rows);
  std::vector<double> values(rows);
  std::vector<bool> valid(rows);
  std::uniform_real_distribution<double> u(-100, 100);
  for (std::size_t i = 0; i < rows; ++i) {
    keys[i] = static_cast<std::int64_t>(rng() % 97) * 1000;
    values[i] = u(rng);
    valid[i] = rng() % 10 != 0;
  }
  GroupByPlan plan;
  plan.rows = rows;
  plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt64, .data = Bytes(keys)},
                  GroupColumn{.name = "v", .dtype = DType::kFloat64, .data = Bytes(values), .validity = Mask(valid)}};
  plan.keys = {0};
  ColumnAggregations c{.column = 1, .positions = {0, 1, 2}};
  c.plan.array = ArraySpec{.dtype = DType::kFloat64, .length = rows};
  c.plan.ops = {OpSpec{.kind = OpKind::kSum}, OpSpec{.kind = OpKind::kArgmin}, OpSpec{.kind = OpKind::kCount}};
  plan.values = {c};
  plan.aggregations = 3;
  std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
  absl::StatusOr<GroupedResult> result = RunGroupBy(plan, *backend, 1000);
  ASSERT_TRUE(result.ok()) << result.status();

  // The reference: each group's valid values in table order.
  std::map<std::int64_t, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < rows; ++i) groups[keys[i]].push_back(i);
  ASSERT_EQ(result->groups, groups.size());
  const auto& sums = std::get<std::vector<double>>(result->results[0].values[0]);
  const auto& argmins = std::get<std::vector<std::int64_t>>(result->results[0].values[1]);
  const auto& counts = std::get<std::vector<std::uint64_t>>(result->results[0].values[2]);
  std::size_t g = 0;
  for (const auto& [key, members] : groups) {
    std::int64_t got_key;
    std::memcpy(&got_key, result->keys[0].data.data() + g * 8, 8);
    EXPECT_EQ(got_key, key);
    double sum = 0;
    std::uint64_t count = 0;
    std::size_t best = members.size();
    for (std::size_t m = 0; m < members.size(); ++m) {
      const std::size_t r = members[m];
      if (!valid[r]) continue;
      sum += values[r];
      ++count;
      if (best == members.size() || values[r] < values[members[best]]) best = m;
    }
    EXPECT_NEAR(sums[g], sum, 1e-9 * (1 + std::abs(sum))) << "group " << key;
    EXPECT_EQ(counts[g], count) << "group " << key;
    ASSERT_LT(best, members.size());
    EXPECT_EQ(argmins[g], static_cast<std::int64_t>(members[best])) << "group " << key;
    ++g;
  }
}

// Partial states per group: argmax's index is the table's row plus
// base_index, whichever rows the group has.
TEST(RunGroupBy, PartialStatesCarryRowsOfTheTablePlusTheBaseIndex) {
  const std::vector<std::int32_t> keys = {7, 3, 7, 3, 3, 9};
  const std::vector<float> values = {1, 5, 8, 2, 6, 0};
  GroupByPlan plan;
  plan.rows = keys.size();
  plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt32, .data = Bytes(keys)},
                  GroupColumn{.name = "v", .dtype = DType::kFloat32, .data = Bytes(values)}};
  plan.keys = {0};
  ColumnAggregations c{.column = 1, .positions = {0}};
  c.plan.array = ArraySpec{.dtype = DType::kFloat32, .length = keys.size()};
  c.plan.ops = {OpSpec{.kind = OpKind::kArgmax, .partial = true, .base_index = 100}};
  plan.values = {c};
  plan.aggregations = 1;
  std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
  absl::StatusOr<GroupedResult> result = RunGroupBy(plan, *backend, 10);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& states = std::get<std::vector<rules::PartialState>>(result->results[0].values[0]);
  ASSERT_EQ(states.size(), 3u);  // keys 3, 7, 9
  EXPECT_EQ(states[0].index, 104);
  EXPECT_EQ(states[1].index, 102);
  EXPECT_EQ(states[2].index, 105);
  EXPECT_EQ(states[0].count, 3u);
}

// More groups than one plan's results may hold (a 65536-bin histogram per
// group: 255 groups a batch) run in batches, answered as one.
TEST(RunGroupBy, ManyGroupsRunInBatchesAnsweredAsOne) {
  const std::size_t groups = 600, rows = 3000;
  std::vector<std::int32_t> keys(rows);
  std::vector<double> values(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    keys[i] = static_cast<std::int32_t>((i * 7919) % groups);
    values[i] = static_cast<double>((i * 104729) % 1000) / 1000.0;
  }
  GroupByPlan plan;
  plan.rows = rows;
  plan.columns = {GroupColumn{.name = "k", .dtype = DType::kInt32, .data = Bytes(keys)},
                  GroupColumn{.name = "v", .dtype = DType::kFloat64, .data = Bytes(values)}};
  plan.keys = {0};
  ColumnAggregations c{.column = 1, .positions = {0, 1, 2}};
  c.plan.array = ArraySpec{.dtype = DType::kFloat64, .length = rows};
  c.plan.ops = {OpSpec{.kind = OpKind::kSum}, OpSpec{.kind = OpKind::kArgmin},
                OpSpec{.kind = OpKind::kHistogram, .histogram = {.bins = 65536, .lo = 0, .hi = 1}}};
  plan.values = {c};
  plan.aggregations = 3;
  std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
  absl::StatusOr<GroupedResult> result = RunGroupBy(plan, *backend, groups);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->groups, groups);
  const auto& sums = std::get<std::vector<double>>(result->results[0].values[0]);
  const auto& argmins = std::get<std::vector<std::int64_t>>(result->results[0].values[1]);
  const auto& hists = std::get<std::vector<HistogramResult>>(result->results[0].values[2]);
  ASSERT_EQ(sums.size(), groups);
  ASSERT_EQ(hists.size(), groups);
  for (std::size_t g = 0; g < groups; ++g) {
    double sum = 0;
    std::int64_t best = -1;
    std::uint64_t in_bins = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      if (static_cast<std::size_t>(keys[i]) != g) continue;
      sum += values[i];
      if (best < 0 || values[i] < values[static_cast<std::size_t>(best)]) best = static_cast<std::int64_t>(i);
    }
    for (const std::uint64_t n : hists[g].counts) in_bins += n;
    EXPECT_NEAR(sums[g], sum, 1e-12) << "group " << g;
    EXPECT_EQ(argmins[g], best) << "group " << g;
    EXPECT_EQ(in_bins, rows / groups) << "group " << g;
  }
}

// No group (an empty table, or every key NA and dropped): no rows in any
// answer, and min, which refuses an empty array, refuses nothing.
TEST(RunGroupBy, NoGroupAnswersNoRows) {
  const std::vector<double> keys = {std::nan(""), std::nan("")};
  const std::vector<float> values = {1, 2};
  for (const std::uint64_t rows : {std::uint64_t{0}, std::uint64_t{2}}) {
    GroupByPlan plan;
    plan.rows = rows;
    plan.columns = {GroupColumn{.name = "k", .dtype = DType::kFloat64, .data = Bytes(keys).first(rows * 8)},
                    GroupColumn{.name = "v", .dtype = DType::kFloat32, .data = Bytes(values).first(rows * 4)}};
    plan.keys = {0};
    ColumnAggregations c{.column = 1, .positions = {0, 1}};
    c.plan.array = ArraySpec{.dtype = DType::kFloat32, .length = rows};
    c.plan.ops = {OpSpec{.kind = OpKind::kMin}, OpSpec{.kind = OpKind::kSum}};
    plan.values = {c};
    plan.aggregations = 2;
    std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
    absl::StatusOr<GroupedResult> result = RunGroupBy(plan, *backend, 10);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->groups, 0u);
    EXPECT_TRUE(result->keys[0].data.empty());
    EXPECT_TRUE(std::get<std::vector<double>>(result->results[0].values[0]).empty());
    EXPECT_TRUE(std::get<std::vector<double>>(result->results[0].values[1]).empty());
  }
}

}  // namespace
// A count alone over a column without a mask is each group's size, taken
// from the groups without reading the column; the same as the count that
// reduces the column (beside a sum), and as its partial state. Over a
// column with a mask, the valid rows.
TEST(RunGroupBy, ACountAloneIsEachGroupsSizeAsTheReductionCountsIt) {
  TALLY_SEEDED_RNG(rng);
  const std::size_t rows = 30000;
  std::vector<double> keys(rows);
  std::vector<std::int8_t> values(rows);
  std::vector<bool> valid(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    keys[i] = rng() % 50 == 0 ? std::nan("") : static_cast<double>(rng() % 211) * 0.5;
    values[i] = static_cast<std::int8_t>(rng() % 7);
    valid[i] = rng() % 4 != 0;
  }
  for (const bool dropna : {true, false}) {
    GroupByPlan plan;
    plan.rows = rows;
    plan.dropna = dropna;
    plan.columns = {GroupColumn{.name = "k", .dtype = DType::kFloat64, .data = Bytes(keys)},
                    GroupColumn{.name = "v", .dtype = DType::kInt8, .data = Bytes(values)},
                    GroupColumn{.name = "m", .dtype = DType::kInt8, .data = Bytes(values), .validity = Mask(valid)}};
    plan.keys = {0};
    const ArraySpec array{.dtype = DType::kInt8, .length = rows};
    ColumnAggregations alone{.column = 1, .positions = {0, 1}};
    alone.plan = {array, {OpSpec{.kind = OpKind::kCount}, OpSpec{.kind = OpKind::kCount, .partial = true}}};
    ColumnAggregations reduced{.column = 1, .positions = {2, 3}};
    reduced.plan = {array, {OpSpec{.kind = OpKind::kCount}, OpSpec{.kind = OpKind::kSum}}};
    ColumnAggregations masked{.column = 2, .positions = {4}};
    masked.plan = {array, {OpSpec{.kind = OpKind::kCount}}};
    plan.values = {alone, reduced, masked};
    plan.aggregations = 5;
    std::unique_ptr<Backend> backend = MakeFunctionRouter(MakeCpuBackend(CpuBackendOptions{.threads = 2}), 1 << 30);
    std::vector<std::string> phases;
    absl::StatusOr<GroupedResult> result =
        RunGroupBy(plan, *backend, 1000, [&](const char* phase) { phases.emplace_back(phase); });
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(std::count(phases.begin(), phases.end(), "column counted"), 1) << "dropna " << dropna;

    std::map<double, std::pair<std::uint64_t, std::uint64_t>> want;  // key -> rows, valid rows; NaN apart
    std::pair<std::uint64_t, std::uint64_t> nan{0, 0};
    for (std::size_t i = 0; i < rows; ++i) {
      auto& w = std::isnan(keys[i]) ? nan : want[keys[i]];
      ++w.first;
      w.second += valid[i] ? 1 : 0;
    }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> in_order;
    for (const auto& [k, w] : want) in_order.push_back(w);
    if (!dropna) in_order.push_back(nan);  // the NA group last
    ASSERT_EQ(result->groups, in_order.size());
    const auto& sizes = std::get<std::vector<std::uint64_t>>(result->results[0].values[0]);
    const auto& states = std::get<std::vector<rules::PartialState>>(result->results[0].values[1]);
    const auto& counted = std::get<std::vector<std::uint64_t>>(result->results[1].values[0]);
    const auto& valid_counts = std::get<std::vector<std::uint64_t>>(result->results[2].values[0]);
    for (std::size_t g = 0; g < in_order.size(); ++g) {
      EXPECT_EQ(sizes[g], in_order[g].first) << "group " << g;
      EXPECT_EQ(counted[g], in_order[g].first) << "group " << g;
      EXPECT_EQ(states[g].count, in_order[g].first) << "group " << g;
      EXPECT_EQ(valid_counts[g], in_order[g].second) << "group " << g;
    }
  }
}

}  // namespace tally::grouping
