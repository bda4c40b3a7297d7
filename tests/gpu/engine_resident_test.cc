// The cuda backend reading each kind of memory (server/engine/source.h):
// resident datasets in device memory, reduced in place, and pinned host
// bytes copied without staging, each against the same request streamed from
// pageable memory and against the cpu backend.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "server/engine/datasets/dataset_store.h"
#include "server/engine/reduce_pieces.h"
#include "tests/gpu/engine_test_util.h"

namespace tally::engine_test {
namespace {

// Uploads `data` into the backend's resident memory on GPU 0, in pieces of
// `piece` bytes.
std::unique_ptr<ResidentMemory> Upload(Backend& b, std::span<const std::byte> data, std::size_t piece) {
  absl::StatusOr<std::unique_ptr<ResidentMemory>> m = b.AllocateResident(data.size(), 0);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  for (std::size_t at = 0; at < data.size(); at += piece) {
    const absl::Status s = (*m)->Append(Extent::PageableHost(data.subspan(at, std::min(piece, data.size() - at))));
    EXPECT_TRUE(s.ok()) << s;
  }
  const absl::Status s = (*m)->Seal();
  EXPECT_TRUE(s.ok()) << s;
  return std::move(*m);
}

absl::StatusOr<AggregationResult> RunOn(Backend& b, const AggregationPlan& plan, const Extent& e) {
  absl::StatusOr<std::unique_ptr<Reduction>> r = b.Start(plan, e.placement);
  if (!r.ok()) return r.status();
  if (absl::Status s = (*r)->Consume(e); !s.ok()) return s;
  return (*r)->Finish();
}

TEST(EngineResident, DeviceBytesGiveTheStreamedAnswerEveryDtypeAndShape) {
  TALLY_REQUIRE_GPU();
  BackendOptions o = TestOptions();
  auto cuda = MakeCuda(o);
  auto cpu = MakeCpu();
  ASSERT_NE(cuda, nullptr);
  std::mt19937_64 seeds(std::random_device{}());
  for (const DType dt : rules::kAllDTypes) {
    // Several chunks of the lanes' 64 KiB, a ragged end, rows that span chunks.
    const std::uint64_t n = 3 * (64 << 10) / rules::SizeOf(dt) + 12345;
    const std::vector<std::byte> data = RandomArray(dt, n, seeds(), true);
    std::unique_ptr<ResidentMemory> m = Upload(*cuda, data, 10007);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->extent().placement, Placement::Device(0));
    // The bytes landed where they belong.
    std::vector<std::byte> back(data.size(), std::byte{0x5a});
    ASSERT_EQ(cudaMemcpy(back.data(), m->extent().bytes.data(), back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(back, data) << rules::Name(dt);
    for (const std::uint64_t rows : {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{1} << 16 >> 3}) {
      // A range that starts off any alignment, cut into rows.
      const std::uint64_t begin = 3, len = rows == 0 ? n - 10 : (n - 10) / rows * rows;
      const AggregationPlan plan = Plan(dt, len, rows == 0 ? 0 : len / rows, AllOps(dt));
      const std::size_t es = rules::SizeOf(dt);
      const Extent range = m->extent().Sub(begin * es, len * es);
      absl::StatusOr<AggregationResult> dev = RunOn(*cuda, plan, range);
      ASSERT_TRUE(dev.ok()) << dev.status();
      absl::StatusOr<AggregationResult> again = RunOn(*cuda, plan, range);
      ASSERT_TRUE(again.ok()) << again.status();
      const std::span<const std::byte> host = std::span(data).subspan(begin * es, len * es);
      absl::StatusOr<AggregationResult> streamed = RunRequest(*cuda, plan, host, {777, 10000, 1});
      ASSERT_TRUE(streamed.ok()) << streamed.status();
      absl::StatusOr<AggregationResult> ref = RunRequest(*cpu, plan, host);
      ASSERT_TRUE(ref.ok()) << ref.status();
      const std::string what = std::string(rules::Name(dt)) + " rows " + std::to_string(rows);
      EXPECT_EQ(dev->backend, "cuda");
      ExpectSame(plan, *dev, *again, Match::kBits, what + " (twice)");
      ExpectSame(plan, *streamed, *dev, Match::kExactSums, what + " (streamed)");
      ExpectSame(plan, *ref, *dev, Match::kExactSums, what + " (cpu)");
    }
  }
}

TEST(EngineResident, PinnedHostBytesGiveBitwiseTheStagedAnswer) {
  TALLY_REQUIRE_GPU();
  auto cuda = MakeCuda(TestOptions());
  ASSERT_NE(cuda, nullptr);
  const std::uint64_t n = 5 * (64 << 10) / 4 + 999;
  const std::vector<std::byte> data = RandomArray(DType::kFloat32, n, std::random_device{}());
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, data.size(), cudaHostAllocPortable), cudaSuccess);
  std::memcpy(pinned, data.data(), data.size());
  const AggregationPlan plan = Plan(DType::kFloat32, n, 0, AllOps(DType::kFloat32));
  absl::StatusOr<AggregationResult> staged = RunRequest(*cuda, plan, data, {4099, 70000});
  ASSERT_TRUE(staged.ok()) << staged.status();
  // Pieces that start mid-chunk, so both the direct and the staged copy run.
  auto r = cuda->Start(plan, Placement::PinnedHost());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::span<const std::byte> all(static_cast<const std::byte*>(pinned), data.size());
  // Chunks are 64 KiB: a staged head, then a whole chunk copied directly.
  const std::size_t cuts[] = {0, 4000, 140000, 300000, data.size()};
  for (int i = 0; i + 1 < 5; ++i) {
    ASSERT_TRUE((*r)->Consume(Extent{all.subspan(cuts[i], cuts[i + 1] - cuts[i]), Placement::PinnedHost()}).ok());
  }
  absl::StatusOr<AggregationResult> direct = (*r)->Finish();
  ASSERT_TRUE(direct.ok()) << direct.status();
  ExpectSame(plan, *staged, *direct, Match::kBits, "pinned vs staged");
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST(EngineResident, AQueryDroppedMidwayGivesItsLaneBack) {
  TALLY_REQUIRE_GPU();
  BackendOptions o = TestOptions();
  o.streams_per_device = 1;
  auto cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);
  const std::uint64_t n = 1 << 20;
  const std::vector<std::byte> data = RandomArray(DType::kFloat32, n, 7);
  std::unique_ptr<ResidentMemory> m = Upload(*cuda, data, 1 << 20);
  ASSERT_NE(m, nullptr);
  const AggregationPlan plan = Plan(DType::kFloat32, n, 0, AllOps(DType::kFloat32));
  for (int i = 0; i < 3; ++i) {
    auto r = cuda->Start(plan, m->extent().placement);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE((*r)->Consume(m->extent().Sub(0, n * 2)).ok());
    // Dropped before Finish (a cancelled or timed-out call): with one lane,
    // the next Start only succeeds if the lane came back.
  }
  absl::StatusOr<AggregationResult> done = RunOn(*cuda, plan, m->extent());
  ASSERT_TRUE(done.ok()) << done.status();
}

TEST(EngineResident, WrongPlacesAreRefusedClearly) {
  TALLY_REQUIRE_GPU();
  auto cuda = MakeCuda(TestOptions());
  ASSERT_NE(cuda, nullptr);
  const AggregationPlan plan = Plan(DType::kFloat32, 4, 0, {Op(OpKind::kSum)});
  EXPECT_EQ(cuda->Start(plan, Placement::Device(GpuCount())).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(cuda->AllocateResident(16, GpuCount()).ok());
  // More than the GPU has: RESOURCE_EXHAUSTED, and the backend still serves.
  auto huge = cuda->AllocateResident(std::uint64_t{1} << 50, 0);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  const std::vector<std::byte> data = RandomArray(DType::kFloat32, 4, 3);
  EXPECT_TRUE(RunRequest(*cuda, plan, data).ok());
}

TEST(EngineResident, TheStoreKeepsDatasetsInGpuMemory) {
  TALLY_REQUIRE_GPU();
  auto cuda = MakeCuda(TestOptions());
  ASSERT_NE(cuda, nullptr);
  DatasetStore store(*cuda, DatasetOptions{}, nullptr);
  const std::vector<std::byte> data = RandomArray(DType::kInt32, 100000, 11);
  auto up = store.BeginUpload("ints", DType::kInt32, 100000, false, std::nullopt);
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_TRUE((*up)->Append(Extent::PageableHost(data)).ok());
  absl::StatusOr<DatasetInfo> info = (*up)->Commit();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->place, "cuda:0");
  auto d = store.Acquire("ints");
  ASSERT_TRUE(d.ok());
  const AggregationPlan plan = Plan(DType::kInt32, 100000, 1000, AllOps(DType::kInt32));
  const std::vector<PlacedPiece> pieces = (*d)->Pieces(0, 100000);
  ASSERT_EQ(pieces.size(), 1u);
  absl::StatusOr<AggregationResult> got = RunOn(*cuda, plan, pieces.front().extent);
  ASSERT_TRUE(got.ok()) << got.status();
  auto cpu = MakeCpu();
  absl::StatusOr<AggregationResult> want = RunRequest(*cpu, plan, data);
  ASSERT_TRUE(want.ok());
  ExpectSame(plan, *want, *got, Match::kExactSums, "int32 rows of 1000 from the store");
}


// A dataset in four shards on one GPU: each query's pieces are reduced to
// partial states on lanes of that GPU, one after another, and merged.
// Against the same dataset in one shard: exact where the proto says exact,
// floats to rounding, and bitwise the same from one query to the next.
TEST(EngineResident, ShardedDatasetsGiveTheUnshardedAnswer) {
  TALLY_REQUIRE_GPU();
  auto cuda = MakeCuda(TestOptions());  // two lanes: a query holds one at a time
  ASSERT_NE(cuda, nullptr);
  auto cpu = MakeCpu();
  DatasetStore whole(*cuda, DatasetOptions{.shards = 1}, nullptr);
  DatasetStore sharded(*cuda, DatasetOptions{.shards = 4, .min_shard_bytes = 1}, nullptr);
  std::mt19937_64 seeds(std::random_device{}());
  for (const DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kUInt8}) {
    const std::uint64_t n = 100003;
    const std::vector<std::byte> data = RandomArray(dt, n, seeds(), true);
    for (DatasetStore* store : {&whole, &sharded}) {
      auto up = store->BeginUpload("x", dt, n, /*replace=*/true, std::nullopt);
      ASSERT_TRUE(up.ok()) << up.status();
      for (std::size_t at = 0; at < data.size(); at += 7919) {
        ASSERT_TRUE((*up)->Append(Extent::PageableHost(std::span(data).subspan(at, std::min<std::size_t>(7919, data.size() - at)))).ok());
      }
      absl::StatusOr<DatasetInfo> info = (*up)->Commit();
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->shards, store == &sharded ? 4u : 1u);
      if (store == &sharded) {
        EXPECT_EQ(info->place, "cuda:0,cuda:0,cuda:0,cuda:0");
      }
    }
    auto a = whole.Acquire("x");
    auto b = sharded.Acquire("x");
    ASSERT_TRUE(a.ok() && b.ok());
    const std::size_t es = rules::SizeOf(dt);
    // Ranges and rows that cross the shard boundaries (every 25000 elements).
    struct Query { std::uint64_t begin, end, row; };
    for (const Query q : {Query{0, n, 0}, Query{7, n - 11, 0}, Query{24990, 25010, 0}, Query{3, 100003 - 3 - 1, 1},
                          Query{1, 1 + 7 * 14285, 7}, Query{0, 100000, 1000}, Query{4, 4 + 3 * 33333, 33333},
                          Query{100, 100 + 99000, 99000}, Query{30000, 40000, 0}}) {
      const AggregationPlan plan = Plan(dt, q.end - q.begin, q.row, AllOps(dt));
      const std::string what = std::string(rules::Name(dt)) + " [" + std::to_string(q.begin) + ", " +
                               std::to_string(q.end) + ") rows of " + std::to_string(q.row);
      const std::vector<PlacedPiece> one = (*a)->Pieces(q.begin, q.end), four = (*b)->Pieces(q.begin, q.end);
      ASSERT_EQ(one.size(), 1u);
      absl::StatusOr<AggregationResult> want = ReducePieces(*cuda, plan, one, [] { return false; });
      absl::StatusOr<AggregationResult> got = ReducePieces(*cuda, plan, four, [] { return false; });
      absl::StatusOr<AggregationResult> again = ReducePieces(*cuda, plan, four, [] { return false; });
      ASSERT_TRUE(want.ok() && got.ok() && again.ok()) << want.status() << " / " << got.status() << " / " << again.status();
      EXPECT_EQ(got->backend, "cuda");
      ExpectSame(plan, *want, *got, Match::kExactSums, what + ", sharded against whole");
      ExpectSame(plan, *got, *again, Match::kBits, what + ", sharded twice");
      absl::StatusOr<AggregationResult> ref =
          RunRequest(*cpu, plan, std::span(data).subspan(q.begin * es, (q.end - q.begin) * es));
      ASSERT_TRUE(ref.ok()) << ref.status();
      ExpectSame(plan, *ref, *got, Match::kExactSums, what + ", sharded against the cpu backend");
    }
    // A cancel between rounds stops the query and gives its lanes back.
    const AggregationPlan plan = Plan(dt, n, 0, AllOps(dt));
    int polls = 0;
    absl::StatusOr<AggregationResult> cut = ReducePieces(*cuda, plan, (*b)->Pieces(0, n), [&] { return ++polls > 2; });
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kCancelled) << cut.status();
    EXPECT_TRUE(ReducePieces(*cuda, plan, (*b)->Pieces(0, n), [] { return false; }).ok());
  }
  // Ops the kernels do not compute (a holistic median) are refused for
  // device bytes, sharded or not, by the GPU backend alone; the stack the
  // server makes answers them (the functions' router reads the bytes
  // through the host), the same value for the pieces as for one piece.
  auto a = whole.Acquire("x");
  auto b = sharded.Acquire("x");
  ASSERT_TRUE(a.ok() && b.ok());
  const auto never = [] { return false; };
  const AggregationPlan median = Plan(DType::kUInt8, 100, 0, {Op(OpKind::kMedian)});
  absl::StatusOr<std::unique_ptr<Backend>> gpu_only = MakeCudaBackend(TestOptions());
  ASSERT_TRUE(gpu_only.ok()) << gpu_only.status();
  EXPECT_EQ(ReducePieces(**gpu_only, median, (*b)->Pieces(24950, 25050), never).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<AggregationResult> pieces = ReducePieces(*cuda, median, (*b)->Pieces(24950, 25050), never);
  absl::StatusOr<AggregationResult> piece = ReducePieces(*cuda, median, (*a)->Pieces(24950, 25050), never);
  ASSERT_TRUE(pieces.ok() && piece.ok()) << pieces.status() << " / " << piece.status();
  const auto& from_pieces = std::get<std::vector<rules::agg::RowAnswer>>(pieces->values[0]);
  const auto& from_piece = std::get<std::vector<rules::agg::RowAnswer>>(piece->values[0]);
  ASSERT_EQ(from_pieces.size(), 1u);
  EXPECT_EQ(from_pieces, from_piece);
  EXPECT_EQ(from_pieces[0].doubles.size(), 1u);
  // On integers a NaN-skipping op is its plain op, whose partial states
  // merge across the shards: nanmin of uint8 is min.
  const AggregationPlan nan = Plan(DType::kUInt8, 100, 0, {Op(OpKind::kNanMin), Op(OpKind::kNanArgmax)});
  const AggregationPlan plain = Plan(DType::kUInt8, 100, 0, {Op(OpKind::kMin), Op(OpKind::kArgmax)});
  absl::StatusOr<AggregationResult> as_nan = ReducePieces(*cuda, nan, (*b)->Pieces(24950, 25050), never);
  absl::StatusOr<AggregationResult> as_plain = ReducePieces(*cuda, plain, (*b)->Pieces(24950, 25050), never);
  ASSERT_TRUE(as_nan.ok() && as_plain.ok()) << as_nan.status() << " / " << as_plain.status();
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(as_nan->values[0]),
            std::get<std::vector<std::uint64_t>>(as_plain->values[0]));
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(as_nan->values[1]),
            std::get<std::vector<std::int64_t>>(as_plain->values[1]));
}

// Variable-length segments over device bytes: the segmented kernels' sum,
// min, max, mean and count against the cpu backend on the same bytes (exact
// for integers, extremes and counts), whole and sharded (segments cut by
// the shards, merged from partial states), empty segments included; other
// ops are refused for device bytes, and host bytes run on the cpu.
TEST(EngineResident, SegmentsOnDeviceBytesGiveTheCpuAnswer) {
  TALLY_REQUIRE_GPU();
  auto cuda = MakeCuda(TestOptions());
  ASSERT_NE(cuda, nullptr);
  auto cpu = MakeCpu();
  DatasetStore whole(*cuda, DatasetOptions{.shards = 1}, nullptr);
  DatasetStore sharded(*cuda, DatasetOptions{.shards = 3, .min_shard_bytes = 1}, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  for (const DType dt : rules::kAllDTypes) {
    for (const bool empties : {false, true}) {
      // Lengths: single elements, short ones, runs of empty ones, a long one.
      std::vector<std::uint64_t> off{0};
      std::uniform_int_distribution<std::uint64_t> len(1, 64);
      for (int i = 0; i < 3000; ++i) {
        off.push_back(off.back() + (i == 1500 ? 70000 : len(rng)));
        if (empties && i % 97 == 0) off.insert(off.end(), 3, off.back());
      }
      const std::uint64_t n = off.back();
      const std::vector<std::byte> data = RandomArray(dt, n, rng(), true);
      for (DatasetStore* store : {&whole, &sharded}) {
        auto up = store->BeginUpload("s", dt, n, /*replace=*/true, std::nullopt);
        ASSERT_TRUE(up.ok()) << up.status();
        ASSERT_TRUE((*up)->Append(Extent::PageableHost(data)).ok());
        ASSERT_TRUE((*up)->Commit().ok());
      }
      std::vector<OpSpec> ops = {Op(OpKind::kSum), Op(OpKind::kMean), Op(OpKind::kCount)};
      if (!empties) ops.insert(ops.end(), {Op(OpKind::kMin), Op(OpKind::kMax)});
      AggregationPlan plan = Plan(dt, n, 0, ops);
      plan.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(off);
      absl::StatusOr<AggregationResult> ref = RunRequest(*cpu, plan, data);
      ASSERT_TRUE(ref.ok()) << ref.status();
      for (DatasetStore* store : {&whole, &sharded}) {
        auto d = store->Acquire("s");
        ASSERT_TRUE(d.ok());
        const std::string what = std::string(rules::Name(dt)) + (empties ? " with empty segments" : "") +
                                 (store == &sharded ? ", sharded" : ", whole");
        absl::StatusOr<AggregationResult> got = ReducePieces(*cuda, plan, (*d)->Pieces(0, n), [] { return false; });
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        EXPECT_EQ(got->backend, "cuda") << what;
        // Integer sums, counts and extremes exactly; means to rounding (a
        // segment cut by the shards merges its parts' moments).
        ExpectSame(plan, *ref, *got, Match::kRounded, what);
      }
      // The host bytes of the same plan run on the cpu backend.
      absl::StatusOr<AggregationResult> host = RunRequest(*cuda, plan, data);
      ASSERT_TRUE(host.ok()) << host.status();
      EXPECT_EQ(host->backend, "cpu");
      if (HasFailure()) return;
    }
  }
  auto d = whole.Acquire("s");
  ASSERT_TRUE(d.ok());
  const std::uint64_t n = (*d)->info().length;
  AggregationPlan other = Plan((*d)->info().dtype, n, 0, {Op(OpKind::kVariance)});
  other.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0, n});
  EXPECT_EQ(ReducePieces(*cuda, other, (*d)->Pieces(0, n), [] { return false; }).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Validity masks and the NaN-skipping ops on the fused kernels: GPU
// datasets (whole and in shards) and host bytes on a lane give the cpu
// backend's answers; rows with no valid element are refused as there.
TEST(EngineResident, MasksAndNanOpsOnTheGpuGiveTheCpuAnswer) {
  TALLY_REQUIRE_GPU();
  auto cuda = MakeCuda(TestOptions());
  ASSERT_NE(cuda, nullptr);
  auto cpu = MakeCpu();
  DatasetStore whole(*cuda, DatasetOptions{.shards = 1}, nullptr);
  DatasetStore sharded(*cuda, DatasetOptions{.shards = 3, .min_shard_bytes = 1}, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t n = 3 * 1024 * 1024 + 77;
  for (const DType dt : rules::kAllDTypes) {
    std::vector<std::byte> data = RandomArray(dt, n, rng(), true);
    if (rules::IsFloat(dt)) {  // a few NaNs for the nan-ops to skip
      const std::size_t es = rules::SizeOf(dt);
      for (std::uint64_t i = 5; i < n; i += 100003) {
        for (std::size_t b = 0; b < es; ++b) data[i * es + b] = std::byte{0xff};
      }
    }
    std::vector<std::uint32_t> words((n + 31) / 32);
    for (std::uint32_t& w : words) w = static_cast<std::uint32_t>(rng()) | static_cast<std::uint32_t>(rng());
    words.back() &= (std::uint32_t{1} << (n % 32)) - 1;
    for (DatasetStore* store : {&whole, &sharded}) {
      auto up = store->BeginUpload("m", dt, n, /*replace=*/true, std::nullopt);
      ASSERT_TRUE(up.ok()) << up.status();
      ASSERT_TRUE((*up)->Append(Extent::PageableHost(data)).ok());
      ASSERT_TRUE((*up)->Commit().ok());
    }
    for (const std::uint64_t row_length : {std::uint64_t{0}, n}) {
      std::vector<OpSpec> ops = {Op(OpKind::kSum), Op(OpKind::kMean), Op(OpKind::kCount), Op(OpKind::kMin),
                                 Op(OpKind::kArgmax), Op(OpKind::kVariance, 1.0)};
      // The nan-ops too, whole and across the shards (merged from their
      // partial states, PartialState::elements included).
      for (const OpKind k : {OpKind::kNanSum, OpKind::kNanMean, OpKind::kNanMin, OpKind::kNanArgmax,
                             OpKind::kNanCount, OpKind::kNanStddev}) {
        ops.push_back(Op(k));
      }
      AggregationPlan plan = Plan(dt, n, row_length, ops);
      plan.array.validity = std::make_shared<const std::vector<std::uint32_t>>(words);
      absl::StatusOr<AggregationResult> ref = RunRequest(*cpu, plan, data);
      ASSERT_TRUE(ref.ok()) << ref.status();
      for (DatasetStore* store : {&whole, &sharded}) {
        auto d = store->Acquire("m");
        ASSERT_TRUE(d.ok());
        const std::string what = std::string(rules::Name(dt)) + (store == &sharded ? ", sharded" : ", whole");
        absl::StatusOr<AggregationResult> got = ReducePieces(*cuda, plan, (*d)->Pieces(0, n), [] { return false; });
        ASSERT_TRUE(got.ok()) << what << ": " << got.status();
        EXPECT_EQ(got->backend, "cuda") << what;
        ExpectSame(plan, *ref, *got, Match::kExactSums, what);
      }
      if (HasFailure()) return;
    }
  }
  // A row with no valid element: min is refused naming it, on the GPU too.
  auto d = whole.Acquire("m");
  ASSERT_TRUE(d.ok());
  const DType dt = (*d)->info().dtype;
  AggregationPlan empty_row = Plan(dt, n, 0, {Op(OpKind::kSum), Op(OpKind::kMin)});
  empty_row.array.validity = std::make_shared<const std::vector<std::uint32_t>>((n + 31) / 32, 0u);
  const absl::Status refused = ReducePieces(*cuda, empty_row, (*d)->Pieces(0, n), [] { return false; }).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("the array has no valid elements"), std::string::npos) << refused;
}

}  // namespace
}  // namespace tally::engine_test
