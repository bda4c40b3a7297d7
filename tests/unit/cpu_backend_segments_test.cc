// Variable-length segments (ArraySpec::offsets): every segment's results are
// bitwise those of its slice sent alone, whatever the mix of lengths (empty,
// single elements, short rows reduced whole, long ones split across
// threads) and however the bytes arrive (pieces that cut segments and
// elements anywhere, or a message's runs at once). The slice's own answers
// are checked against references in the other CPU tests, so this checks
// where each segment begins and ends and what an empty one gives.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/host_runs.h"
#include "tests/unit/cpu_test_util.h"

namespace tally::testing {
namespace {

class CpuSegmentsTest : public ::testing::TestWithParam<DType> {};

INSTANTIATE_TEST_SUITE_P(AllDTypes, CpuSegmentsTest, ::testing::ValuesIn(rules::kAllDTypes),
                         [](const auto& info) { return std::string(rules::Name(info.param)); });

// Segment lengths that visit every path: empty ones (leading, in runs,
// trailing), single elements, short ones, the longest reduced whole
// (65536) and the shortest split across threads (65537), and a long one.
std::vector<std::uint64_t> MixedLengths(std::mt19937_64& rng, bool with_empty) {
  std::vector<std::uint64_t> lengths;
  if (with_empty) lengths.insert(lengths.end(), {0, 0});
  std::uniform_int_distribution<std::uint64_t> tiny(1, 64), mid(100, 5000);
  for (int i = 0; i < 300; ++i) {
    lengths.push_back(tiny(rng));
    if (with_empty && i % 37 == 0) lengths.insert(lengths.end(), {0, 0, 0});
  }
  lengths.insert(lengths.end(), {1, 65536, 1, 65537, mid(rng), 200003});
  for (int i = 0; i < 20; ++i) lengths.push_back(mid(rng));
  if (with_empty) lengths.insert(lengths.end(), {0, 7, 0, 0});
  return lengths;
}

std::shared_ptr<const std::vector<std::uint64_t>> OffsetsOf(const std::vector<std::uint64_t>& lengths) {
  std::vector<std::uint64_t> off{0};
  for (const std::uint64_t n : lengths) off.push_back(off.back() + n);
  return std::make_shared<const std::vector<std::uint64_t>>(std::move(off));
}

// Ops with a value on an empty array (every segment may be one), and on
// floats the NaN-skipping ones too.
std::vector<OpSpec> OpsForEmpty(DType dtype) {
  std::vector<OpSpec> ops = AllOps(dtype, Fill::kWide, /*with_extremes=*/false);
  for (OpKind k : {OpKind::kNanSum, OpKind::kNanMean, OpKind::kNanVariance, OpKind::kNanCount, OpKind::kProduct,
                   OpKind::kCountNonzero, OpKind::kAny, OpKind::kAll}) {
    ops.push_back(Op(k));
  }
  return ops;
}

std::vector<OpSpec> OpsWithExtremes(DType dtype) {
  std::vector<OpSpec> ops = {Op(OpKind::kMin), Op(OpKind::kMax), Op(OpKind::kArgmin), Op(OpKind::kArgmax),
                             Op(OpKind::kSum), Op(OpKind::kMean), Op(OpKind::kNanMin), Op(OpKind::kNanArgmax)};
  if (dtype != DType::kBool) ops.push_back(Op(OpKind::kPtp));
  return ops;
}

// Each segment's results against its slice's, bitwise.
void ExpectEachSegmentIsItsSlice(Backend& backend, const Array& a, const AggregationPlan& plan,
                                 const AggregationResult& got) {
  const std::uint64_t rows = plan.array.rows();
  const std::size_t es = rules::SizeOf(a.dtype);
  for (std::uint64_t s = 0; s < rows; ++s) {
    const std::uint64_t start = plan.array.RowStart(s), n = plan.array.RowLength(s);
    const AggregationPlan alone{ArraySpec{a.dtype, n, 0, nullptr}, plan.ops};
    auto want = RunPieces(backend, alone, std::span(a.bytes).subspan(start * es, n * es));
    ASSERT_TRUE(want.ok()) << want.status();
    for (std::size_t k = 0; k < plan.ops.size(); ++k) {
      ASSERT_TRUE(SameBits(RowOf(got.values[k], s), want->values[k]))
          << rules::Name(plan.ops[k].kind) << " of segment " << s << " [" << start << ", " << start + n << ")";
    }
  }
}

TEST_P(CpuSegmentsTest, EverySegmentIsItsSliceBitwise) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 3});
  for (const bool with_empty : {true, false}) {
    SCOPED_TRACE(with_empty ? "with empty segments" : "no empty segments");
    const auto offsets = OffsetsOf(MixedLengths(rng, with_empty));
    const Array a = RandomArray(GetParam(), offsets->back(), rng, Fill::kWide);
    AggregationPlan plan{ArraySpec{a.dtype, a.length, 0, offsets},
                         with_empty ? OpsForEmpty(a.dtype) : OpsWithExtremes(a.dtype)};
    std::uniform_int_distribution<std::uint64_t> piece(1, 100000);
    std::vector<std::uint64_t> pieces;
    for (int i = 0; i < 16; ++i) pieces.push_back(piece(rng) % (i % 2 == 0 ? 70 : 100000) + 1);
    auto in_pieces = RunPieces(*backend, plan, a.bytes, pieces);
    ASSERT_TRUE(in_pieces.ok()) << in_pieces.status();
    ExpectEachSegmentIsItsSlice(*backend, a, plan, *in_pieces);
    // gRPC's 64 KiB receive slices, and a run that cuts every element.
    for (const std::size_t run : {std::size_t{65536}, std::size_t{1000003}}) {
      auto as_runs = RunAsRuns(*backend, plan, a.bytes, run);
      ASSERT_TRUE(as_runs.ok()) << as_runs.status();
      for (std::size_t k = 0; k < plan.ops.size(); ++k) {
        EXPECT_TRUE(SameBits(as_runs->values[k], in_pieces->values[k])) << rules::Name(plan.ops[k].kind);
      }
    }
    if (HasFailure()) return;
  }
}

TEST(CpuSegments, EmptySegmentsFollowTheEmptyArrayRules) {
  auto backend = MakeCpuBackend({.threads = 2});
  const Array a = MakeArray(DType::kInt32, std::vector<std::int32_t>{3, 4, 5});
  // Segments: [] [3 4] [] [5] []
  const auto offsets = std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0, 0, 2, 2, 3, 3});
  const AggregationPlan plan{ArraySpec{a.dtype, a.length, 0, offsets},
                             {Op(OpKind::kSum), Op(OpKind::kCount), Op(OpKind::kMean), Op(OpKind::kProduct),
                              Op(OpKind::kAny), Op(OpKind::kAll), Hist(2, 0, 10)}};
  auto r = RunPieces(*backend, plan, a.bytes, {1});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values[0]), (std::vector<std::int64_t>{0, 7, 0, 5, 0}));
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(r->values[1]), (std::vector<std::uint64_t>{0, 2, 0, 1, 0}));
  const auto& mean = std::get<std::vector<double>>(r->values[2]);
  EXPECT_TRUE(std::isnan(mean[0]) && std::isnan(mean[2]) && std::isnan(mean[4]));
  EXPECT_EQ(mean[1], 3.5);
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values[3]), (std::vector<std::int64_t>{1, 12, 1, 5, 1}));
  const auto& hist = std::get<std::vector<HistogramResult>>(r->values[6]);
  ASSERT_EQ(hist.size(), 5u);
  EXPECT_EQ(hist[0].counts, (std::vector<std::uint64_t>{0, 0}));
  EXPECT_EQ(hist[1].counts, (std::vector<std::uint64_t>{2, 0}));
  EXPECT_EQ(hist[3].counts, (std::vector<std::uint64_t>{0, 1}));
}

TEST(CpuSegments, NoSegmentsOfAnEmptyArray) {
  auto backend = MakeCpuBackend({.threads = 2});
  const auto offsets = std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0});
  const AggregationPlan plan{ArraySpec{DType::kFloat32, 0, 0, offsets}, {Op(OpKind::kMin), Op(OpKind::kSum)}};
  auto r = RunPieces(*backend, plan, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(std::get<std::vector<double>>(r->values[0]).empty());
  EXPECT_TRUE(std::get<std::vector<double>>(r->values[1]).empty());
}

TEST(CpuSegments, RefusedPlansNameTheFault) {
  auto backend = MakeCpuBackend({.threads = 1});
  struct Case {
    std::uint64_t row_length;
    std::vector<std::uint64_t> offsets;  // of 4 elements
    OpKind op;
    std::string says;
  };
  const std::vector<Case> cases = {
      {0, {0, 2, 2, 4}, OpKind::kArgmin, "segment 1"},
      {0, {0, 2, 2, 4}, OpKind::kNanMax, "segment 1"},
      {2, {0, 2, 4}, OpKind::kSum, "not both"},
      {0, {0, 3, 2, 4}, OpKind::kSum, "never decrease"},
      {0, {0, 2, 3}, OpKind::kSum, "end at"},
      {0, {1, 2, 4}, OpKind::kSum, "start at 0"},
  };
  for (const Case& c : cases) {
    const ArraySpec array{DType::kFloat32, 4, c.row_length,
                          std::make_shared<const std::vector<std::uint64_t>>(c.offsets)};
    auto r = backend->Start(AggregationPlan{array, {Op(c.op)}});
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status();
  }
}

TEST(CpuSegments, AllNanSegmentIsNamed) {
  auto backend = MakeCpuBackend({.threads = 1});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Array a = MakeArray(DType::kFloat64, std::vector<double>{1, 2, nan, nan, 3});
  const auto offsets = std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0, 2, 4, 5});
  auto r = RunPieces(*backend, AggregationPlan{ArraySpec{a.dtype, a.length, 0, offsets}, {Op(OpKind::kNanArgmin)}},
                     a.bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("segment 1 is all NaN"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace tally::testing
