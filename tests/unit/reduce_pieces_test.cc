// Arrays in pieces (server/engine/reduce_pieces.h) on the cpu backend: host
// pieces give bitwise the one-extent answer; the merging path that device
// shards take gives the exact results exactly and float results to
// rounding, for rows that cross the pieces, and keeps a caller's partial
// states and base indices; a sharded dataset's pieces hold its bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/engine/reduce_pieces.h"
#include "tests/unit/cpu_test_util.h"

namespace tally::testing {
namespace {

std::vector<OpSpec> EveryMergeableOp(DType dtype) {
  std::vector<OpSpec> ops;
  for (OpKind k : {OpKind::kSum, OpKind::kMean, OpKind::kCount, OpKind::kSumSquares, OpKind::kVariance,
                   OpKind::kStddev, OpKind::kMin, OpKind::kMax, OpKind::kArgmin, OpKind::kArgmax}) {
    ops.push_back(OpSpec{.kind = k, .ddof = k == OpKind::kStddev ? 1.0 : 0.0});
  }
  const double hi = rules::IsFloat(dtype) ? 1000.0 : 200.0;
  ops.push_back(OpSpec{.kind = OpKind::kHistogram, .histogram = {37, -hi, hi}});
  return ops;
}

// `bytes` cut at `cuts` (element indices, increasing) into host pieces.
std::vector<PlacedPiece> Cut(std::span<const std::byte> bytes, std::size_t es, std::vector<std::uint64_t> cuts) {
  std::vector<PlacedPiece> pieces;
  std::uint64_t at = 0;
  cuts.push_back(bytes.size() / es);
  for (const std::uint64_t c : cuts) {
    if (c == at) continue;
    pieces.push_back(PlacedPiece{at, Extent::PageableHost(bytes.subspan(at * es, (c - at) * es))});
    at = c;
  }
  return pieces;
}

bool Close(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

// Exact for every alternative but doubles of sums and moments.
void ExpectAgree(const AggregationPlan& plan, const AggregationResult& want, const AggregationResult& got,
                 bool exact, const std::string& what) {
  ASSERT_EQ(want.values.size(), got.values.size()) << what;
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    const OpKind k = plan.ops[i].kind;
    const std::string where = what + ", " + rules::Name(k);
    const auto* w = std::get_if<std::vector<double>>(&want.values[i]);
    if (w == nullptr || exact || k == OpKind::kMin || k == OpKind::kMax) {
      EXPECT_TRUE(want.values[i] == got.values[i]) << where;
      continue;
    }
    const auto& g = std::get<std::vector<double>>(got.values[i]);
    ASSERT_EQ(w->size(), g.size()) << where;
    for (std::size_t r = 0; r < w->size(); ++r) EXPECT_TRUE(Close((*w)[r], g[r])) << where << " row " << r;
  }
}

const auto kNever = [] { return false; };

TEST(ReducePieces, HostPiecesGiveBitwiseTheOneExtentAnswer) {
  TALLY_SEEDED_RNG(rng);
  auto cpu = MakeCpuBackend({.threads = 2});
  for (const DType dt : rules::kAllDTypes) {
    const Array a = RandomArray(dt, 70001, rng, Fill::kWide);
    const std::size_t es = rules::SizeOf(dt);
    for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{7}}) {
      const std::uint64_t n = row == 0 ? a.length : a.length / row * row;
      const AggregationPlan plan{{dt, n, row}, EveryMergeableOp(dt)};
      const std::span<const std::byte> bytes = std::span(a.bytes).first(n * es);
      const PlacedPiece whole{0, Extent::PageableHost(bytes)};
      absl::StatusOr<AggregationResult> want = ReducePieces(*cpu, plan, std::span(&whole, 1), kNever);
      absl::StatusOr<AggregationResult> got = ReducePieces(*cpu, plan, Cut(bytes, es, {1, 20000, 20003, 55555}), kNever);
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " / " << got.status();
      ExpectAgree(plan, *want, *got, /*exact=*/true, std::string(rules::Name(dt)) + " rows " + std::to_string(row));
    }
  }
}

TEST(ReducePieces, MergedPiecesGiveTheExactResultsExactlyWhereverRowsCross) {
  TALLY_SEEDED_RNG(rng);
  auto cpu = MakeCpuBackend({.threads = 2});
  for (const DType dt : rules::kAllDTypes) {
    for (const Fill fill : {Fill::kWide, Fill::kNarrow}) {  // narrow: ties across pieces
      // 24,000 elements: rows of 1 take a state per element, so the size
      // sets this test's time (73 s at 60,000 on 2 cores).
      const Array a = RandomArray(dt, 24000, rng, fill);
      const std::size_t es = rules::SizeOf(dt);
      // Rows of 1, rows that pieces cut in two and in several, one row over all.
      for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{8}, std::uint64_t{1000},
                                      std::uint64_t{8000}, std::uint64_t{24000}}) {
        const AggregationPlan plan{{dt, a.length, row}, EveryMergeableOp(dt)};
        const PlacedPiece whole{0, Extent::PageableHost(a.bytes)};
        absl::StatusOr<AggregationResult> want = ReducePieces(*cpu, plan, std::span(&whole, 1), kNever);
        for (const std::vector<std::uint64_t>& cuts :
             {std::vector<std::uint64_t>{12000}, {3, 4001, 4002, 12200, 23999}, {6000, 12000, 18000}}) {
          std::vector<std::string> phases;
          absl::StatusOr<AggregationResult> got = ReducePiecesByMerging(
              *cpu, plan, Cut(a.bytes, es, cuts), kNever, [&](const char* p) { phases.emplace_back(p); });
          ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " / " << got.status();
          ExpectAgree(plan, *want, *got, /*exact=*/false,
                      std::string(rules::Name(dt)) + " rows " + std::to_string(row) + " in " +
                          std::to_string(cuts.size() + 1) + " pieces");
          // The request's phases in order, and each part's launch and finish
          // between "started"'s neighbours (at least one part per piece).
          std::vector<std::string> main;
          std::size_t launched = 0, finished = 0;
          for (const std::string& p : phases) {
            if (p == "part launched") {
              ++launched;
            } else if (p == "part finished") {
              ++finished;
            } else {
              main.push_back(p);
            }
          }
          EXPECT_EQ(main, (std::vector<std::string>{"started", "consumed", "finished"}));
          EXPECT_EQ(launched, finished);
          EXPECT_GE(launched, cuts.size() + 1);
          EXPECT_EQ(phases.front(), "part launched");
          EXPECT_EQ(phases[phases.size() - 3], "part finished");
        }
      }
    }
  }
}

// Variable-length segments cut by the pieces anywhere: inside a segment,
// on its boundaries, where empty segments lie (at the array's start, at a
// cut, at the end), and a segment spanning three pieces.
TEST(ReducePieces, MergedPiecesCutSegmentsAnywhere) {
  TALLY_SEEDED_RNG(rng);
  auto cpu = MakeCpuBackend({.threads = 2});
  const std::vector<std::uint64_t> offsets = {0, 0, 5, 5, 5, 1000, 1001, 1001, 20000, 20003, 59000, 60000, 60000};
  const std::vector<std::vector<std::uint64_t>> cutss = {
      {5}, {1, 5, 1000, 1001}, {999, 1002, 30000, 40000, 59999}, {20000, 20001, 59000}};
  for (const DType dt : rules::kAllDTypes) {
    const Array a = RandomArray(dt, 60000, rng, Fill::kNarrow);
    const std::size_t es = rules::SizeOf(dt);
    for (const bool empties : {true, false}) {
      std::vector<std::uint64_t> off = offsets;
      if (!empties) off.erase(std::unique(off.begin(), off.end()), off.end());
      std::vector<OpSpec> ops = EveryMergeableOp(dt);
      if (empties) {  // min, max, argmin and argmax have no value on an empty segment
        std::erase_if(ops, [](const OpSpec& op) { return rules::NeedsNonEmpty(op.kind); });
      }
      const AggregationPlan plan{
          {dt, a.length, 0, std::make_shared<const std::vector<std::uint64_t>>(off)}, ops};
      const PlacedPiece whole{0, Extent::PageableHost(a.bytes)};
      absl::StatusOr<AggregationResult> want = ReducePieces(*cpu, plan, std::span(&whole, 1), kNever);
      ASSERT_TRUE(want.ok()) << want.status();
      for (const std::vector<std::uint64_t>& cuts : cutss) {
        absl::StatusOr<AggregationResult> got = ReducePiecesByMerging(*cpu, plan, Cut(a.bytes, es, cuts), kNever);
        ASSERT_TRUE(got.ok()) << got.status();
        ExpectAgree(plan, *want, *got, /*exact=*/false,
                    std::string(rules::Name(dt)) + (empties ? " with" : " without") + " empty segments in " +
                        std::to_string(cuts.size() + 1) + " pieces");
      }
    }
  }
}

TEST(ReducePieces, CallersPartialStatesKeepTheirBaseIndex) {
  TALLY_SEEDED_RNG(rng);
  auto cpu = MakeCpuBackend({.threads = 2});
  const Array a = RandomArray(DType::kInt32, 9000, rng, Fill::kNarrow);
  for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{900}}) {
    AggregationPlan plan{{DType::kInt32, a.length, row}, EveryMergeableOp(DType::kInt32)};
    for (OpSpec& op : plan.ops) {
      op.partial = true;
      op.base_index = 1000000;
    }
    const PlacedPiece whole{0, Extent::PageableHost(a.bytes)};
    absl::StatusOr<AggregationResult> want = ReducePieces(*cpu, plan, std::span(&whole, 1), kNever);
    absl::StatusOr<AggregationResult> got = ReducePiecesByMerging(*cpu, plan, Cut(a.bytes, 4, {450, 4001}), kNever);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " / " << got.status();
    // Exact but for the moments (float64 means and M2s, merged in another
    // order); the argmin and argmax indices include the base.
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
      const auto& w = std::get<std::vector<rules::PartialState>>(want->values[i]);
      const auto& g = std::get<std::vector<rules::PartialState>>(got->values[i]);
      ASSERT_EQ(w.size(), g.size());
      for (std::size_t r = 0; r < w.size(); ++r) {
        const std::string where = std::string(rules::Name(plan.ops[i].kind)) + " row " + std::to_string(r) +
                                  " of rows of " + std::to_string(row);
        EXPECT_TRUE(Close(w[r].mean, g[r].mean) && Close(w[r].m2, g[r].m2)) << where;
        rules::PartialState a = w[r], b = g[r];
        a.mean = b.mean = a.m2 = b.m2 = 0;
        EXPECT_TRUE(a == b) << where;
        if (plan.ops[i].kind == OpKind::kArgmax) {
          EXPECT_GE(g[r].index, 1000000) << where;
        }
      }
    }
  }
}

TEST(ReducePieces, PiecesThatAreNotThePlansElementsAreRefused) {
  auto cpu = MakeCpuBackend({.threads = 2});
  std::vector<std::byte> bytes(4 * 1000);
  const AggregationPlan plan{{DType::kFloat32, 1000, 0}, {OpSpec{.kind = OpKind::kSum}}};
  for (const std::uint64_t drop : {std::uint64_t{4}, std::uint64_t{400}}) {
    const std::vector<PlacedPiece> short_of = Cut(std::span(bytes).first(bytes.size() - drop), 4, {100});
    EXPECT_EQ(ReducePiecesByMerging(*cpu, plan, short_of, kNever).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ReducePieces(*cpu, plan, short_of, kNever).status().code(), absl::StatusCode::kInvalidArgument);
  }
  const AggregationPlan ragged{{DType::kFloat32, 1000, 7}, {OpSpec{.kind = OpKind::kSum}}};  // 7 does not divide
  EXPECT_EQ(ReducePiecesByMerging(*cpu, ragged, Cut(bytes, 4, {100}), kNever).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// prod, count_nonzero, any, all and ptp merge across pieces (as a GPU
// dataset's shards do) into the one-reduction answer: int32 rows of 50 cut
// mid-row, products that wrap modulo 2^64, a row with a zero, ptp that wraps
// at 32 bits (numpy.ptp of int32).
TEST(ReducePieces, ProductsNonzeroCountsAndPtpMergeAcrossPieces) {
  auto cpu = MakeCpuBackend({.threads = 2});
  std::vector<std::int32_t> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int32_t>((i * 7919) % 201) - 100;
  x[0] = std::numeric_limits<std::int32_t>::min();
  x[7] = std::numeric_limits<std::int32_t>::max();
  for (std::size_t i = 50; i < 100; ++i) x[i] = 3;  // row 1: no zero, a product that wraps
  const std::span<const std::byte> bytes = std::as_bytes(std::span(x));
  const std::vector<OpSpec> ops = {OpSpec{.kind = OpKind::kProduct}, OpSpec{.kind = OpKind::kCountNonzero},
                                   OpSpec{.kind = OpKind::kAny}, OpSpec{.kind = OpKind::kAll},
                                   OpSpec{.kind = OpKind::kPtp}};
  for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{50}}) {
    const AggregationPlan plan{{DType::kInt32, 1000, row}, ops};
    absl::StatusOr<AggregationResult> whole = ReducePieces(*cpu, plan, Cut(bytes, 4, {}), kNever);
    absl::StatusOr<AggregationResult> merged = ReducePiecesByMerging(*cpu, plan, Cut(bytes, 4, {1, 75, 120, 999}), kNever);
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_EQ(whole->values, merged->values) << "row_length " << row;
    if (row == 0) {
      EXPECT_EQ(std::get<std::vector<std::int64_t>>(merged->values[4])[0], -1);  // max - min wraps in int32
    } else {
      std::int64_t three_to_50 = 1;
      for (int i = 0; i < 50; ++i) three_to_50 = static_cast<std::int64_t>(static_cast<std::uint64_t>(three_to_50) * 3u);
      EXPECT_EQ(std::get<std::vector<std::int64_t>>(merged->values[0])[1], three_to_50);
      EXPECT_EQ(std::get<std::vector<std::uint64_t>>(merged->values[3])[1], 1u);  // all() of row 1
    }
  }
  // On integers the NaN-skipping ops are their plain ops, which merge:
  // nanvar of [1, 2, 4] in int32 is numpy.var's, inf where ddof >= n.
  const std::vector<std::int32_t> ints = {1, 2, 4};
  const std::span<const std::byte> int_bytes = std::as_bytes(std::span(ints));
  for (const double ddof : {0.0, 3.0}) {
    const AggregationPlan nan_ops{{DType::kInt32, 3, 0},
                                  {OpSpec{.kind = OpKind::kNanVariance, .ddof = ddof}, OpSpec{.kind = OpKind::kNanMin}}};
    absl::StatusOr<AggregationResult> got = ReducePiecesByMerging(*cpu, nan_ops, Cut(int_bytes, 4, {1}), kNever);
    ASSERT_TRUE(got.ok()) << got.status();
    const double var = std::get<std::vector<double>>(got->values[0])[0];
    if (ddof == 0.0) {
      EXPECT_DOUBLE_EQ(var, 14.0 / 9.0);
    } else {
      EXPECT_TRUE(std::isinf(var)) << var;
    }
    EXPECT_EQ(std::get<std::vector<std::int64_t>>(got->values[1])[0], 1);
  }
}

// Float NaN-skipping ops merged across pieces (as a GPU dataset's shards
// are) give the one-reduction answer: rows of 8, cut mid-row, one piece all
// NaN, one row all NaN. nanmin of the all-NaN row is NaN (numpy warns);
// nanargmin of it is refused naming the row (numpy raises).
TEST(ReducePieces, NanOpsMergeAcrossPiecesAsOneReductionAnswers) {
  auto cpu = MakeCpuBackend({.threads = 2});
  const float nan = std::nanf("");
  std::vector<float> x(40);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 23) - 11.0f;
  for (std::size_t i = 10; i < 14; ++i) x[i] = nan;  // the second piece below, all NaN
  for (std::size_t i = 24; i < 32; ++i) x[i] = nan;  // row 3
  x[3] = nan;
  const std::span<const std::byte> bytes = std::as_bytes(std::span(x));
  const std::vector<OpSpec> ops = {OpSpec{.kind = OpKind::kNanSum}, OpSpec{.kind = OpKind::kNanMin},
                                   OpSpec{.kind = OpKind::kNanMax}, OpSpec{.kind = OpKind::kNanMean},
                                   OpSpec{.kind = OpKind::kNanVariance, .ddof = 1.0},
                                   OpSpec{.kind = OpKind::kNanCount}};
  const AggregationPlan plan{{DType::kFloat32, 40, 8}, ops};
  absl::StatusOr<AggregationResult> whole = ReducePieces(*cpu, plan, Cut(bytes, 4, {}), kNever);
  absl::StatusOr<AggregationResult> merged = ReducePiecesByMerging(*cpu, plan, Cut(bytes, 4, {10, 14, 27}), kNever);
  ASSERT_TRUE(whole.ok() && merged.ok()) << whole.status() << " / " << merged.status();
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (k == 5) {
      EXPECT_EQ(std::get<std::vector<std::uint64_t>>(merged->values[k]),
                std::get<std::vector<std::uint64_t>>(whole->values[k]));
      continue;
    }
    const auto& want = std::get<std::vector<double>>(whole->values[k]);
    const auto& got = std::get<std::vector<double>>(merged->values[k]);
    ASSERT_EQ(got.size(), 5u);
    for (std::size_t r = 0; r < got.size(); ++r) {
      if (std::isnan(want[r])) {
        EXPECT_TRUE(std::isnan(got[r])) << "op " << k << " row " << r;
      } else {
        EXPECT_NEAR(got[r], want[r], 1e-12 * std::max(1.0, std::fabs(want[r]))) << "op " << k << " row " << r;
      }
    }
  }
  EXPECT_TRUE(std::isnan(std::get<std::vector<double>>(merged->values[1])[3]));  // nanmin, the all-NaN row
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(merged->values[5])[3], 0u);
  // nanargmin and nanargmax with row 3 no longer all NaN: the indices of
  // rows cut mid-row count from the row's start, as one reduction's do.
  std::vector<float> y = x;
  for (std::size_t i = 24; i < 30; ++i) y[i] = static_cast<float>(i % 5);
  const AggregationPlan args{{DType::kFloat32, 40, 8},
                             {OpSpec{.kind = OpKind::kNanArgmin}, OpSpec{.kind = OpKind::kNanArgmax}}};
  const std::span<const std::byte> y_bytes = std::as_bytes(std::span(y));
  absl::StatusOr<AggregationResult> args_whole = ReducePieces(*cpu, args, Cut(y_bytes, 4, {}), kNever);
  absl::StatusOr<AggregationResult> args_merged =
      ReducePiecesByMerging(*cpu, args, Cut(y_bytes, 4, {10, 14, 27}), kNever);
  ASSERT_TRUE(args_whole.ok() && args_merged.ok()) << args_whole.status() << " / " << args_merged.status();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(args_whole->values[0]),
            (std::vector<std::int64_t>{0, 6, 7, 1, 1}));  // row 1 past the all-NaN piece, row 3 cut at 27
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(std::get<std::vector<std::int64_t>>(args_merged->values[k]),
              std::get<std::vector<std::int64_t>>(args_whole->values[k])) << "op " << k;
  }
  // nanargmin over the all-NaN row: refused, naming it, merged or not.
  const AggregationPlan arg{{DType::kFloat32, 40, 8}, {OpSpec{.kind = OpKind::kNanArgmin}}};
  for (const bool merge : {false, true}) {
    const absl::Status s = (merge ? ReducePiecesByMerging(*cpu, arg, Cut(bytes, 4, {10, 14, 27}), kNever)
                                  : ReducePieces(*cpu, arg, Cut(bytes, 4, {}), kNever)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << merge;
    EXPECT_NE(s.message().find("row 3 is all NaN"), std::string::npos) << s;
  }
}

TEST(ReducePieces, ACancelStopsBetweenPieces) {
  auto cpu = MakeCpuBackend({.threads = 2});
  std::vector<std::byte> bytes(4 * 1000);
  const AggregationPlan plan{{DType::kFloat32, 1000, 0}, {OpSpec{.kind = OpKind::kSum}}};
  int polls = 0;
  const auto third = [&] { return ++polls >= 3; };
  EXPECT_EQ(ReducePiecesByMerging(*cpu, plan, Cut(bytes, 4, {100, 200, 300, 400}), third).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(polls, 3);
}

class ShardedStore : public ::testing::Test {
 protected:
  absl::StatusOr<DatasetInfo> Put(DatasetStore& store, const std::string& name, const Array& a) {
    auto up = store.BeginUpload(name, a.dtype, a.length, /*replace=*/true, std::nullopt);
    if (!up.ok()) return up.status();
    for (std::size_t at = 0; at < a.bytes.size(); at += 999) {
      const std::span<const std::byte> piece = std::span(a.bytes).subspan(at, std::min<std::size_t>(999, a.bytes.size() - at));
      if (absl::Status s = (*up)->Append(Extent::PageableHost(piece)); !s.ok()) return s;
    }
    return (*up)->Commit();
  }
  std::unique_ptr<Backend> cpu_ = MakeCpuBackend({.threads = 2});
};

TEST_F(ShardedStore, ShardsHoldTheBytesAndAnswerAsOne) {
  TALLY_SEEDED_RNG(rng);
  DatasetStore store(*cpu_, DatasetOptions{.shards = 3, .min_shard_bytes = 4000}, nullptr);
  const Array a = RandomArray(DType::kFloat32, 10007, rng, Fill::kWide);
  absl::StatusOr<DatasetInfo> info = Put(store, "x", a);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->shards, 3u);
  EXPECT_EQ(info->place, "host,host,host");
  EXPECT_EQ(store.Usage().front().bytes, a.bytes.size() + DatasetStore::kOverheadBytes);
  EXPECT_EQ(store.Usage().front().datasets, 1u);
  auto d = store.Acquire("x");
  ASSERT_TRUE(d.ok());
  // Nearly equal shards, end to end.
  const std::vector<PlacedPiece> all = (*d)->Pieces(0, a.length);
  ASSERT_EQ(all.size(), 3u);
  std::uint64_t at = 0;
  for (const PlacedPiece& p : all) {
    EXPECT_EQ(p.first, at);
    EXPECT_EQ(std::memcmp(p.extent.bytes.data(), a.bytes.data() + at * 4, p.extent.size()), 0);
    EXPECT_NEAR(static_cast<double>(p.extent.size() / 4), a.length / 3.0, 1.0);
    at += p.extent.size() / 4;
  }
  EXPECT_EQ(at, a.length);
  // A range within one shard, one across two, and an empty one.
  EXPECT_EQ((*d)->Pieces(10, 20).size(), 1u);
  const std::vector<PlacedPiece> two = (*d)->Pieces(3000, 4000);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].first, 0u);
  EXPECT_EQ(two[1].first + two[1].extent.size() / 4, 1000u);
  const std::vector<PlacedPiece> none = (*d)->Pieces(5, 5);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].extent.size(), 0u);
  // The query path's answer is bitwise the unsharded one on the cpu backend.
  const AggregationPlan plan{{DType::kFloat32, 1000, 10}, EveryMergeableOp(DType::kFloat32)};
  const PlacedPiece whole{0, Extent::PageableHost(std::span(a.bytes).subspan(3000 * 4, 1000 * 4))};
  absl::StatusOr<AggregationResult> want = ReducePieces(*cpu_, plan, std::span(&whole, 1), kNever);
  absl::StatusOr<AggregationResult> got = ReducePieces(*cpu_, plan, two, kNever);
  ASSERT_TRUE(want.ok() && got.ok());
  ExpectAgree(plan, *want, *got, /*exact=*/true, "a range across two shards");
  // Small datasets are not cut below --dataset_min_shard_bytes.
  const Array small = RandomArray(DType::kFloat32, 1500, rng, Fill::kWide);  // 6000 bytes: one shard
  info = Put(store, "small", small);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->shards, 1u);
  EXPECT_EQ(info->place, "host");
  const Array empty = RandomArray(DType::kFloat32, 0, rng, Fill::kWide);
  info = Put(store, "empty", empty);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->shards, 1u);
  // Deleted, the shards' bytes all go back (small's and empty's stay, each
  // with its overhead).
  ASSERT_TRUE(store.Delete("x").ok());
  d->reset();
  const std::uint64_t left = small.bytes.size() + 2 * DatasetStore::kOverheadBytes;
  for (int i = 0; i < 200 && store.Usage().front().bytes != left; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(store.Usage().front().bytes, left);
}

TEST_F(ShardedStore, AnUploadThatEndsEarlyOrOverrunsLeavesNoShardBehind) {
  TALLY_SEEDED_RNG(rng);
  DatasetStore store(*cpu_, DatasetOptions{.shards = 4, .min_shard_bytes = 4}, nullptr);
  const Array a = RandomArray(DType::kFloat64, 1000, rng, Fill::kWide);
  {
    auto up = store.BeginUpload("y", DType::kFloat64, 1000, false, std::nullopt);
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE((*up)->Append(Extent::PageableHost(std::span(a.bytes).first(5000))).ok());  // into the third shard
    const absl::StatusOr<DatasetInfo> early = (*up)->Commit();
    EXPECT_EQ(early.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(early.status().message().find("received 5000 of the 8000 bytes"), std::string::npos) << early.status();
  }
  {
    auto up = store.BeginUpload("y", DType::kFloat64, 1000, false, std::nullopt);
    ASSERT_TRUE(up.ok()) << up.status();
    ASSERT_TRUE((*up)->Append(Extent::PageableHost(a.bytes)).ok());
    const absl::Status over = (*up)->Append(Extent::PageableHost(std::span(a.bytes).first(8)));
    EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(over.message().find("more than the 8000 bytes"), std::string::npos) << over;
  }
  EXPECT_EQ(store.Acquire("y").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Usage().front().bytes, 0u);
}

TEST_F(ShardedStore, TheBudgetCountsEveryShardOfAPlace) {
  TALLY_SEEDED_RNG(rng);
  // Three shards of one place: the place takes all of a dataset's bytes.
  constexpr std::uint64_t kBudget = 10000 + DatasetStore::kOverheadBytes;
  DatasetStore store(*cpu_, DatasetOptions{.max_bytes_per_place = kBudget, .shards = 3, .min_shard_bytes = 4}, nullptr);
  const Array a = RandomArray(DType::kFloat32, 2000, rng, Fill::kWide);  // 8000 bytes
  ASSERT_TRUE(Put(store, "a", a).ok());
  const absl::StatusOr<DatasetInfo> b = Put(store, "b", a);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("needs " + std::to_string(8000 + DatasetStore::kOverheadBytes) + " bytes on host"),
            std::string::npos)
      << b.status();
  const Array big = RandomArray(DType::kFloat32, 3000, rng, Fill::kWide);  // 12000 bytes
  const absl::StatusOr<DatasetInfo> c = Put(store, "c", big);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("12000 bytes"), std::string::npos) << c.status();
  // With LRU eviction, the old dataset's shards make room.
  DatasetStore lru(*cpu_, DatasetOptions{.max_bytes_per_place = kBudget, .evict_lru = true, .shards = 3,
                                         .min_shard_bytes = 4},
                   nullptr);
  ASSERT_TRUE(Put(lru, "a", a).ok());
  ASSERT_TRUE(Put(lru, "b", a).ok()) << "eviction";
  EXPECT_EQ(lru.Acquire("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(lru.Acquire("b").ok());
}

}  // namespace
}  // namespace tally::testing
