// Validity masks (ArraySpec::validity): every op of every row answers as
// numpy on the row's x[valid] (checked against the higher-precision
// references of cpu_test_util.h on the gathered valid elements), argmin and
// argmax give the element's position in the row, masks that are all-valid,
// all-invalid, random or periodic take every path (whole chunks across
// threads, short rows in parallel, blocks met one at a time), and the bits
// do not depend on how the bytes arrive.
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

class CpuMasksTest : public ::testing::TestWithParam<DType> {};

INSTANTIATE_TEST_SUITE_P(AllDTypes, CpuMasksTest, ::testing::ValuesIn(rules::kAllDTypes),
                         [](const auto& info) { return std::string(rules::Name(info.param)); });

enum class Pattern { kRandom, kEvery7th, kBlocks, kAllValid };

// A mask of n bits in the server's form (32-bit words, bits past n clear).
// kBlocks alternates runs of `run` all-valid, all-invalid and random bits:
// a few blocks long, both shortcuts and the gather run.
Validity MakeMask(std::uint64_t n, Pattern p, std::mt19937_64& rng, std::uint64_t run_length = 5000) {
  std::vector<std::uint32_t> words((n + 31) / 32, 0);
  for (std::uint64_t i = 0; i < n; ++i) {
    bool valid = true;
    switch (p) {
      case Pattern::kRandom: valid = (rng() & 1) != 0; break;
      case Pattern::kEvery7th: valid = i % 7 != 3; break;
      case Pattern::kBlocks: {
        const std::uint64_t run = (i / run_length) % 3;
        valid = run == 0 || (run == 2 && (rng() & 3) != 0);
        break;
      }
      case Pattern::kAllValid: break;
    }
    if (valid) words[i / 32] |= std::uint32_t{1} << (i % 32);
  }
  return std::make_shared<const std::vector<std::uint32_t>>(std::move(words));
}

std::vector<OpSpec> MaskedOps(DType dtype) {
  std::vector<OpSpec> ops = AllOps(dtype, Fill::kWide);
  for (OpKind k : {OpKind::kCountNonzero, OpKind::kAny, OpKind::kAll}) ops.push_back(Op(k));
  if (rules::IsFloat(dtype)) {
    for (OpKind k : {OpKind::kNanSum, OpKind::kNanMin, OpKind::kNanArgmax, OpKind::kNanCount}) ops.push_back(Op(k));
  }
  return ops;
}

// Row r's answers against the references on its valid elements; argmin
// and argmax at the valid element's position in the row.
template <DType kD>
void ExpectRowsAreTheirValidElements(const Array& a, const ArraySpec& spec, const std::vector<OpSpec>& ops,
                                     const AggregationResult& got) {
  using V = typename rules::Traits<kD>::value;
  const std::span<const V> x = a.As<V>();
  for (std::uint64_t r = 0; r < spec.rows(); ++r) {
    std::vector<V> valid;
    std::vector<std::int64_t> where;
    for (std::uint64_t i = 0; i < spec.RowLength(r); ++i) {
      if (!spec.Valid(spec.RowStart(r) + i)) continue;
      valid.push_back(x[spec.RowStart(r) + i]);
      where.push_back(static_cast<std::int64_t>(i));
    }
    SCOPED_TRACE(::testing::Message() << spec.RowWord() << " " << r << ", " << valid.size() << " of "
                                      << spec.RowLength(r) << " valid");
    for (std::size_t k = 0; k < ops.size(); ++k) {
      SCOPED_TRACE(rules::Name(ops[k].kind));
      const OpKind kind = ops[k].kind;
      if (kind == OpKind::kArgmin || kind == OpKind::kArgmax) {
        const std::int64_t at = kind == OpKind::kArgmin ? ArgExtreme<false>(std::span<const V>(valid))
                                                        : ArgExtreme<true>(std::span<const V>(valid));
        EXPECT_EQ(ValueAt<std::int64_t>(got.values[k], r), where.at(static_cast<std::size_t>(at)));
      } else if (rules::IsNanSkipping(kind) || kind == OpKind::kCountNonzero || kind == OpKind::kAny ||
                 kind == OpKind::kAll) {
        // Checked against the unmasked backend on the valid elements: these
        // ops' own references live in their tests.
        continue;
      } else {
        CheckRow<kD>(ops[k], std::span<const V>(valid), got.values[k], r);
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// The same ops over each row's valid elements sent alone, without a mask:
// exact for everything but float sums and moments, which the references
// above already check.
void ExpectIntegerAnswersOfTheValidElements(Backend& backend, const Array& a, const ArraySpec& spec,
                                            const std::vector<OpSpec>& ops, const AggregationResult& got) {
  const std::size_t es = rules::SizeOf(a.dtype);
  for (std::uint64_t r = 0; r < spec.rows(); ++r) {
    std::vector<std::byte> valid;
    for (std::uint64_t i = spec.RowStart(r); i < spec.RowStart(r) + spec.RowLength(r); ++i) {
      if (spec.Valid(i)) valid.insert(valid.end(), a.bytes.begin() + i * es, a.bytes.begin() + (i + 1) * es);
    }
    std::vector<OpSpec> exact;
    std::vector<std::size_t> at;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const OpKind kind = ops[k].kind;
      if (kind == OpKind::kCountNonzero || kind == OpKind::kAny || kind == OpKind::kAll ||
          kind == OpKind::kNanMin || kind == OpKind::kNanCount) {
        exact.push_back(ops[k]);
        at.push_back(k);
      }
    }
    if (exact.empty()) return;
    auto want = RunPieces(backend, AggregationPlan{ArraySpec{a.dtype, valid.size() / es, 0}, exact}, valid);
    ASSERT_TRUE(want.ok()) << want.status();
    for (std::size_t j = 0; j < exact.size(); ++j) {
      EXPECT_TRUE(SameBits(RowOf(got.values[at[j]], r), want->values[j]))
          << rules::Name(exact[j].kind) << " of " << spec.RowWord() << " " << r;
    }
  }
}

void CheckShape(Backend& backend, const Array& a, const ArraySpec& spec, std::mt19937_64& rng) {
  const std::vector<OpSpec> ops = MaskedOps(a.dtype);
  const AggregationPlan plan{spec, ops};
  std::uniform_int_distribution<std::uint64_t> piece(1, 100000);
  std::vector<std::uint64_t> pieces;
  for (int i = 0; i < 16; ++i) pieces.push_back(piece(rng) % (i % 2 == 0 ? 70 : 100000) + 1);
  auto in_pieces = RunPieces(backend, plan, a.bytes, pieces);
  ASSERT_TRUE(in_pieces.ok()) << in_pieces.status();
  rules::VisitDType(a.dtype, [&](auto d) {
    ExpectRowsAreTheirValidElements<decltype(d)::value>(a, spec, ops, *in_pieces);
  });
  ExpectIntegerAnswersOfTheValidElements(backend, a, spec, ops, *in_pieces);
  auto as_runs = RunAsRuns(backend, plan, a.bytes, 65536);
  ASSERT_TRUE(as_runs.ok()) << as_runs.status();
  for (std::size_t k = 0; k < ops.size(); ++k) {
    EXPECT_TRUE(SameBits(as_runs->values[k], in_pieces->values[k])) << rules::Name(ops[k].kind);
  }
}

TEST_P(CpuMasksTest, EveryOpReadsOnlyTheValidElements) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 3});
  const std::uint64_t n = 300007;  // whole chunks across threads, and a tail
  const Array a = RandomArray(GetParam(), n, rng, Fill::kWide);
  for (const Pattern p : {Pattern::kRandom, Pattern::kEvery7th, Pattern::kBlocks, Pattern::kAllValid}) {
    SCOPED_TRACE(::testing::Message() << "pattern " << static_cast<int>(p));
    const Validity mask = MakeMask(n, p, rng);
    {
      SCOPED_TRACE("whole array");
      CheckShape(*backend, a, ArraySpec{a.dtype, n, 0, nullptr, mask}, rng);
    }
    if (HasFailure()) return;
    {
      SCOPED_TRACE("rows of 1000 (short rows in parallel)");
      const Array rows = RandomArray(GetParam(), 50000, rng, Fill::kNarrow);
      CheckShape(*backend, rows, ArraySpec{rows.dtype, rows.length, 1000, nullptr, MakeMask(rows.length, p, rng, 40)},
                 rng);
    }
    if (HasFailure()) return;
    {
      SCOPED_TRACE("segments, one long enough to split across threads");
      const auto offsets = std::make_shared<const std::vector<std::uint64_t>>(
          std::vector<std::uint64_t>{0, 100, 5100, 5200, 205200, 205300, n});
      CheckShape(*backend, a, ArraySpec{a.dtype, n, 0, offsets, MakeMask(n, p, rng, 40)}, rng);
    }
    if (HasFailure()) return;
  }
}

TEST(CpuMasks, RowsWithNoValidElementsFollowTheEmptyArrayRules) {
  auto backend = MakeCpuBackend({.threads = 2});
  const Array a = MakeArray(DType::kInt32, std::vector<std::int32_t>{3, 4, 5, 6, 7, 8});
  // Rows [3 4] [5 6] [7 8], valid: 3, none, 8.
  const Validity mask = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>{0b100001});
  const ArraySpec spec{a.dtype, a.length, 2, nullptr, mask};
  auto r = RunPieces(*backend, AggregationPlan{spec, {Op(OpKind::kSum), Op(OpKind::kCount), Op(OpKind::kMean),
                                                      Op(OpKind::kProduct), Op(OpKind::kAll), Hist(2, 0, 10)}},
                     a.bytes, {1});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values[0]), (std::vector<std::int64_t>{3, 0, 8}));
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(r->values[1]), (std::vector<std::uint64_t>{1, 0, 1}));
  const auto& mean = std::get<std::vector<double>>(r->values[2]);
  EXPECT_EQ(mean[0], 3.0);
  EXPECT_TRUE(std::isnan(mean[1]));
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r->values[3]), (std::vector<std::int64_t>{3, 1, 8}));
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(r->values[4]), (std::vector<std::uint64_t>{1, 1, 1}));
  const auto& hist = std::get<std::vector<HistogramResult>>(r->values[5]);
  EXPECT_EQ(hist[0].counts, (std::vector<std::uint64_t>{1, 0}));
  EXPECT_EQ(hist[1].counts, (std::vector<std::uint64_t>{0, 0}));
  EXPECT_EQ(hist[2].counts, (std::vector<std::uint64_t>{0, 1}));
  // An op with no value on an empty array names the row.
  for (const OpKind k : {OpKind::kMin, OpKind::kArgmax, OpKind::kPtp}) {
    auto refused = RunPieces(*backend, AggregationPlan{spec, {Op(OpKind::kSum), Op(k)}}, a.bytes);
    ASSERT_FALSE(refused.ok()) << rules::Name(k);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("row 1 has no valid elements"), std::string::npos) << refused.status();
  }
  // Partial states of such a row are empty ones, not refused.
  OpSpec partial_min = Op(OpKind::kMin);
  partial_min.partial = true;
  auto states = RunPieces(*backend, AggregationPlan{spec, {partial_min}}, a.bytes);
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ(std::get<std::vector<rules::PartialState>>(states->values[0])[1].count, 0u);
}

TEST(CpuMasks, AWholeArrayWithNoValidElementIsNamed) {
  auto backend = MakeCpuBackend({.threads = 1});
  const Array a = MakeArray(DType::kFloat64, std::vector<double>(100, 1.0));
  const Validity none = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>(4, 0));
  auto r = RunPieces(*backend, AggregationPlan{ArraySpec{a.dtype, a.length, 0, nullptr, none}, {Op(OpKind::kNanMax)}},
                     a.bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the array has no valid elements"), std::string::npos) << r.status();
  auto sum = RunPieces(*backend, AggregationPlan{ArraySpec{a.dtype, a.length, 0, nullptr, none}, {Op(OpKind::kSum)}},
                       a.bytes);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(std::get<std::vector<double>>(sum->values[0])[0], 0.0);
}

TEST(CpuMasks, AMaskOfTheWrongSizeIsRefused) {
  auto backend = MakeCpuBackend({.threads = 1});
  const Validity short_mask = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>(1, ~0u));
  auto r = backend->Start(AggregationPlan{ArraySpec{DType::kFloat32, 33, 0, nullptr, short_mask}, {Op(OpKind::kSum)}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.validity"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace tally::testing
