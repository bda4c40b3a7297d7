// Segmented arrays (row_length > 0): one result per row, for short rows
// (reduced whole, rows in parallel) and long rows (split across threads),
// fed in uneven pieces that cut rows and blocks anywhere.
#include <malloc.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "tests/unit/cpu_test_util.h"

namespace tally::testing {
namespace {

struct RowCase {
  std::uint64_t row_length;
  std::uint64_t rows;
};

class CpuRowsTest : public ::testing::TestWithParam<DType> {};

INSTANTIATE_TEST_SUITE_P(AllDTypes, CpuRowsTest, ::testing::ValuesIn(rules::kAllDTypes),
                         [](const auto& info) { return std::string(rules::Name(info.param)); });

TEST_P(CpuRowsTest, EveryRowMatchesReference) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  // 65536 is the longest row reduced whole; 65537 the shortest split.
  const RowCase cases[] = {{1, 5000},     {32, 20000}, {33, 3001}, {1000, 301},
                           {65536, 5},    {65537, 3},  {300007, 2}};
  std::uniform_int_distribution<std::uint64_t> piece(1, 200000);
  for (const RowCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "row_length=" << c.row_length << " rows=" << c.rows);
    const Array a = RandomArray(GetParam(), c.row_length * c.rows, rng, Fill::kWide);
    std::vector<OpSpec> ops = AllOps(a.dtype, Fill::kWide);
    ops[8].histogram.bins = 5;  // rows x bins stays small
    std::vector<std::uint64_t> pieces;
    for (int i = 0; i < 8; ++i) pieces.push_back(piece(rng) % (2 * c.row_length + 5) + 1);
    auto r = RunPieces(*backend, Plan(a, c.row_length, ops), a.bytes, pieces);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectMatchesReference(a, c.row_length, ops, *r);
    if (HasFailure()) return;
  }
}

TEST(CpuRows, NansAndTiesStayInTheirRow) {
  auto backend = MakeCpuBackend({.threads = 2});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Rows of 3: [1 NaN 0] [5 5 -1] [2 2 2] [NaN NaN 7]
  const Array a = MakeArray(DType::kFloat64, std::vector<double>{1, nan, 0, 5, 5, -1, 2, 2, 2,
                                                                 nan, nan, 7});
  const std::vector<OpSpec> ops = {Op(OpKind::kArgmin), Op(OpKind::kArgmax), Op(OpKind::kMin),
                                   Op(OpKind::kSum), Op(OpKind::kCount)};
  auto r = RunPieces(*backend, Plan(a, 3, ops), a.bytes, {2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values[0]), (std::vector<std::int64_t>{1, 2, 0, 0}));
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values[1]), (std::vector<std::int64_t>{1, 0, 0, 0}));
  const auto& mins = std::get<std::vector<double>>(r->values[2]);
  EXPECT_TRUE(std::isnan(mins[0]));
  EXPECT_EQ(mins[1], -1.0);
  EXPECT_EQ(mins[2], 2.0);
  EXPECT_TRUE(std::isnan(mins[3]));
  EXPECT_EQ(std::get<std::vector<double>>(r->values[3])[1], 9.0);
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(r->values[4]), (std::vector<std::uint64_t>(4, 3)));
  ExpectMatchesReference(a, 3, ops, *r);
}

// Heap bytes in use, mmapped blocks included.
std::size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// A header that declares 2^19 rows of 2^21 elements, followed by 4000 bytes:
// the results of rows that have not arrived are not built (they were, all
// 2^19 of them, before the first element: about 100 MiB).
TEST(CpuRows, ResultsAreBuiltOnlyForRowsThatArrived) {
  auto backend = MakeCpuBackend({.threads = 2});
  const AggregationPlan plan{ArraySpec{DType::kUInt8, std::uint64_t{1} << 40, std::uint64_t{1} << 21},
                             {Op(OpKind::kVariance), Op(OpKind::kSum), Op(OpKind::kArgmax), Hist(16, 0, 255)}};
  const std::vector<std::byte> data(4000, std::byte{7});
  const std::size_t before = HeapInUse();
  auto reduction = backend->Start(plan);
  ASSERT_TRUE(reduction.ok()) << reduction.status();
  ASSERT_TRUE((*reduction)->Consume(data).ok());
  EXPECT_LT(HeapInUse() - before, std::size_t{1} << 20);
}

}  // namespace
}  // namespace tally::testing
