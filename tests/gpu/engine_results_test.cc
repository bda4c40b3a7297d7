// The CUDA backend's answers: equal to the CPU backend's for every op and
// dtype, bitwise the same however the array is split, several histograms
// and ddofs in one request, small requests on the CPU.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <gtest/gtest.h>

#include "tests/gpu/engine_test_util.h"

namespace tally::engine_test {
namespace {

constexpr std::uint64_t kChunkBytes = 64 << 10;  // TestOptions().chunk_bytes

class EngineResults : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_REQUIRE_GPU();
    cuda_ = MakeCuda(TestOptions());
    ASSERT_NE(cuda_, nullptr);
    cpu_ = MakeCpu();
  }

  void Compare(const AggregationPlan& plan, const std::vector<std::byte>& data,
               const std::string& what) {
    absl::StatusOr<AggregationResult> want = RunRequest(*cpu_, plan, data);
    absl::StatusOr<AggregationResult> got = RunRequest(*cuda_, plan, data);
    ASSERT_TRUE(want.ok()) << what << ": " << want.status();
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    EXPECT_EQ(got->backend, "cuda") << what;
    ExpectSame(plan, *want, *got, Match::kExactSums, what);
  }

  std::unique_ptr<Backend> cuda_;
  std::unique_ptr<Backend> cpu_;
};

TEST_F(EngineResults, EveryOpAndDtypeMatchesCpuOnWholeArrays) {
  for (const DType t : rules::kAllDTypes) {
    const std::uint64_t chunk = kChunkBytes / rules::SizeOf(t);
    for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000},
                                  (std::uint64_t{1} << 20) + 3, 3 * chunk + 5}) {
      const std::string what = std::string(rules::Name(t)) + " n=" + std::to_string(n);
      const std::vector<std::byte> data = RandomArray(t, n, 1000 + n);
      Compare(Plan(t, n, 0, AllOps(t, n > 0)), data, what);
    }
  }
}

TEST_F(EngineResults, EveryOpAndDtypeMatchesCpuOnRows) {
  for (const DType t : rules::kAllDTypes) {
    const std::uint64_t chunk = kChunkBytes / rules::SizeOf(t);
    struct Shape { std::uint64_t row, rows; };
    for (const Shape s : {Shape{32, 777}, Shape{1000, 301}, Shape{chunk + 7, 3},
                          Shape{3 * chunk + 5, 2}, Shape{1, 5000}}) {
      const std::uint64_t n = s.row * s.rows;
      const std::string what = std::string(rules::Name(t)) + " row=" + std::to_string(s.row) +
                               " rows=" + std::to_string(s.rows);
      Compare(Plan(t, n, s.row, AllOps(t)), RandomArray(t, n, 7 * n + s.row), what);
    }
  }
}

TEST_F(EngineResults, NaNsFollowNumpyLikeTheCpu) {
  for (const DType t : {DType::kFloat32, DType::kFloat64}) {
    const std::uint64_t n = 5 * (kChunkBytes / rules::SizeOf(t)) + 11;
    Compare(Plan(t, n, 0, AllOps(t)), RandomArray(t, n, 99, /*nans=*/true), "nan whole");
    const std::uint64_t row = kChunkBytes / rules::SizeOf(t) / 3 + 1;  // rows span chunks
    Compare(Plan(t, 11 * row, row, AllOps(t)), RandomArray(t, 11 * row, 98, /*nans=*/true), "nan rows");
  }
}

TEST_F(EngineResults, SameBitsWhateverTheSplit) {
  for (const DType t : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kUInt8}) {
    const std::uint64_t chunk = kChunkBytes / rules::SizeOf(t);
    const std::uint64_t n = 5 * (3 * chunk / 5 + 7);  // over three chunks, five whole rows
    const std::vector<std::byte> data = RandomArray(t, n, 4242);
    for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{n / 5}}) {
      const AggregationPlan plan = Plan(t, n, row, AllOps(t));
      absl::StatusOr<AggregationResult> whole = RunRequest(*cuda_, plan, data);
      ASSERT_TRUE(whole.ok()) << whole.status();
      const std::vector<std::vector<std::uint64_t>> splits = {
          {1}, {7}, {chunk - 1, 3, chunk + 2, 1, 5000}, {n - 1, 1}, {chunk}, {2 * chunk + 1}};
      for (std::size_t s = 0; s < splits.size(); ++s) {
        absl::StatusOr<AggregationResult> got = RunRequest(*cuda_, plan, data, splits[s]);
        ASSERT_TRUE(got.ok()) << got.status();
        ExpectSame(plan, *whole, *got, Match::kBits,
                   std::string(rules::Name(t)) + " split #" + std::to_string(s) +
                       " row=" + std::to_string(row));
      }
    }
  }
}

TEST_F(EngineResults, RepeatedRequestsGiveTheSameBits) {
  const DType t = DType::kFloat32;
  const std::uint64_t n = (std::uint64_t{1} << 20) + 3;
  const std::vector<std::byte> data = RandomArray(t, n, 5);
  const AggregationPlan plan = Plan(t, n, 0, AllOps(t));
  absl::StatusOr<AggregationResult> first = RunRequest(*cuda_, plan, data);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<AggregationResult> again = RunRequest(*cuda_, plan, data, {12345});
    ASSERT_TRUE(again.ok()) << again.status();
    ExpectSame(plan, *first, *again, Match::kBits, "repeat " + std::to_string(i));
  }
}

TEST_F(EngineResults, SeveralHistogramsAndDdofsInOneRequest) {
  for (const DType t : rules::kAllDTypes) {
    const std::uint64_t n = 4 * (kChunkBytes / rules::SizeOf(t)) + 4;
    std::vector<OpSpec> ops = {
        OpSpec{.kind = OpKind::kHistogram, .histogram = HistogramFor(t, 10)},
        Op(OpKind::kVariance, 0.0),
        Op(OpKind::kVariance, 1.0),
        OpSpec{.kind = OpKind::kHistogram, .histogram = HistogramFor(t, 1000)},
        Op(OpKind::kStddev, 2.0),
        Op(OpKind::kStddev, 0.5),
        OpSpec{.kind = OpKind::kHistogram, .histogram = HistogramFor(t, 65536)},
        Op(OpKind::kSum),
        Op(OpKind::kArgmax)};
    const std::vector<std::byte> data = RandomArray(t, n, 77);
    Compare(Plan(t, n, 0, ops), data, std::string(rules::Name(t)) + " whole");
    Compare(Plan(t, n, n / 4, ops), data,  // rows spanning chunks
            std::string(rules::Name(t)) + " rows");
    // Histograms only: no fused pass at all.
    std::vector<OpSpec> hists = {ops[0], ops[3], ops[6]};
    Compare(Plan(t, n, 0, hists), data, std::string(rules::Name(t)) + " histograms only");
  }
}

TEST_F(EngineResults, CountOnlyNeedsNoKernel) {
  const DType t = DType::kInt32;
  const std::uint64_t n = 3 * (kChunkBytes / 4) + 5;
  Compare(Plan(t, n, 0, {Op(OpKind::kCount)}), RandomArray(t, n, 3), "count only");
}

TEST_F(EngineResults, WrongLengthIsInvalidArgument) {
  const DType t = DType::kFloat64;
  const std::vector<std::byte> data = RandomArray(t, 100, 1);
  absl::StatusOr<AggregationResult> short_by_one = RunRequest(*cuda_, Plan(t, 101, 0, AllOps(t)), data);
  EXPECT_EQ(short_by_one.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<AggregationResult> too_long = RunRequest(*cuda_, Plan(t, 99, 0, AllOps(t)), data);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<AggregationResult> empty_min = RunRequest(*cuda_, Plan(t, 0, 0, {Op(OpKind::kMin)}), {});
  EXPECT_EQ(empty_min.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EngineRouting, SmallRequestsRunOnTheCpuWithTheCpuAnswer) {
  TALLY_REQUIRE_GPU();
  BackendOptions o = TestOptions();
  o.small_request_bytes = 1 << 20;
  std::unique_ptr<Backend> cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);
  std::unique_ptr<Backend> cpu = MakeCpu();
  for (const DType t : rules::kAllDTypes) {
    for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000}}) {
      const AggregationPlan plan = Plan(t, n, 0, AllOps(t, n > 0));
      const std::vector<std::byte> data = RandomArray(t, n, n + 17);
      absl::StatusOr<AggregationResult> want = RunRequest(*cpu, plan, data);
      absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data);
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " / " << got.status();
      EXPECT_EQ(got->backend, "cpu");
      ExpectSame(plan, *want, *got, Match::kBits, "small " + std::to_string(n));
    }
  }
  // At the threshold the GPU takes over.
  const std::uint64_t n = (1 << 20) / 4;
  absl::StatusOr<AggregationResult> big =
      RunRequest(*cuda, Plan(DType::kFloat32, n, 0, AllOps(DType::kFloat32)),
          RandomArray(DType::kFloat32, n, 8));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->backend, "cuda");
}

TEST(EngineRouting, DefaultOptionsServeALargeArray) {
  TALLY_REQUIRE_GPU();
  BackendOptions o;
  o.kind = "cuda";
  o.routing = "size";  // the default chunking and staging, on the GPU
  std::unique_ptr<Backend> cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);
  EXPECT_TRUE(cuda->Health().ok());
  EXPECT_NE(cuda->device().find(" x"), std::string::npos) << cuda->device();
  std::unique_ptr<Backend> cpu = MakeCpu();
  const DType t = DType::kFloat32;
  const std::uint64_t n = 5 * (std::uint64_t{8} << 20) / 4 + 3;  // 5 default chunks and a bit
  const AggregationPlan plan = Plan(t, n, 0, AllOps(t));
  const std::vector<std::byte> data = RandomArray(t, n, 31);
  absl::StatusOr<AggregationResult> want = RunRequest(*cpu, plan, data);
  absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data, {(4u << 20) / 4});
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " / " << got.status();
  EXPECT_EQ(got->backend, "cuda");
  ExpectSame(plan, *want, *got, Match::kExactSums, "default options");
}

// A message's receive slices, all at once: staging filled by several
// threads, and runs in pinned memory (the receive arena's) copied where
// they lie, all or some of them, give the bits of the same bytes fed one
// piece at a time.
TEST(EngineRouting, RunsGiveTheBitsOfPieces) {
  TALLY_REQUIRE_GPU();
  BackendOptions o = TestOptions();
  o.chunk_bytes = 4 << 20;  // several parallel copy pieces per staging block
  o.staging_copy_threads = 4;
  std::unique_ptr<Backend> cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);
  for (const DType t : {DType::kFloat32, DType::kFloat64, DType::kUInt8}) {
    const std::uint64_t n = 5 * ((std::uint64_t{19} << 20) / rules::SizeOf(t) / 5 + 1);  // over four chunks, five rows
    const std::vector<std::byte> data = RandomArray(t, n, 77);
    void* pinned_copy = nullptr;
    ASSERT_EQ(cudaHostAlloc(&pinned_copy, data.size(), cudaHostAllocPortable), cudaSuccess);
    const std::unique_ptr<void, cudaError_t (*)(void*)> pinned_owner(pinned_copy, cudaFreeHost);
    std::memcpy(pinned_copy, data.data(), data.size());
    const std::span<const std::byte> pinned(static_cast<const std::byte*>(pinned_copy), data.size());
    for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{n / 5}}) {
      const AggregationPlan plan = Plan(t, n, row, AllOps(t));
      absl::StatusOr<AggregationResult> want = RunRequest(*cuda, plan, data, {12345});
      ASSERT_TRUE(want.ok()) << want.status();
      for (const std::uint64_t run : {std::uint64_t{8192}, std::uint64_t{65536}, std::uint64_t{65537}}) {
        for (const std::uint64_t lead : {std::uint64_t{0}, std::uint64_t{1001}}) {
          // Runs pageable, pinned, or every fifth pageable and the rest
          // pinned; in one call (a unary message) or in calls of 45 runs
          // (a stream's chunks, cutting the device's chunks anywhere).
          for (const int kind : {0, 1, 2}) {
            for (const bool streamed : {false, true}) {
              if (streamed && run % 8 != 0) continue;  // each call whole elements
              absl::StatusOr<std::unique_ptr<Reduction>> r = cuda->Start(plan);
              ASSERT_TRUE(r.ok()) << r.status();
              const std::size_t es = rules::SizeOf(t);
              if (lead > 0) {
                ASSERT_TRUE((*r)->Consume(std::span(data).first(lead * es)).ok());
              }
              std::vector<Extent> runs;
              for (std::size_t at = lead * es; at < data.size(); at += run) {
                const std::size_t len = std::min<std::size_t>(run, data.size() - at);
                const bool pin = kind == 1 || (kind == 2 && runs.size() % 5 != 4);
                runs.push_back(pin ? Extent{pinned.subspan(at, len), Placement::PinnedHost()}
                                   : Extent::PageableHost(std::span(data).subspan(at, len)));
              }
              const std::size_t per_call = streamed ? 45 : runs.size();
              for (std::size_t first = 0; first < runs.size(); first += per_call) {
                const std::span<const Extent> call =
                    std::span(runs).subspan(first, std::min(per_call, runs.size() - first));
                ASSERT_TRUE((*r)->ConsumeRuns(HostRuns(call)).ok());
                // The runs are gone once ConsumeRuns returns (a stream's
                // chunk is released then): garbage in their place must not
                // matter. The tail first: the last copy is the one likeliest
                // still in flight.
                if (kind == 0) continue;
                for (std::size_t i = call.size(); i-- > 0;) {
                  if (call[i].placement.memory != Memory::kPinnedHost) continue;
                  std::memset(const_cast<std::byte*>(call[i].bytes.data()), 0xff, call[i].bytes.size());
                }
              }
              absl::StatusOr<AggregationResult> got = (*r)->Finish();
              if (kind != 0) std::memcpy(pinned_copy, data.data(), data.size());
              ASSERT_TRUE(got.ok()) << got.status();
              EXPECT_EQ(got->backend, "cuda");
              ExpectSame(plan, *want, *got, Match::kBits,
                         std::string(rules::Name(t)) + " runs of " + std::to_string(run) + " lead " +
                             std::to_string(lead) + " row " + std::to_string(row) + " runs " +
                             (kind == 0 ? "pageable" : kind == 1 ? "pinned" : "mixed") +
                             (streamed ? ", streamed" : ", at once"));
            }
          }
        }
      }
    }
  }
}

// --routing=cost: the model's rates decide, and the answer is the same
// bits on either path; a plan the paths answer differently (a float prod)
// is routed by size.
TEST(EngineRouting, CostRoutingFollowsTheModel) {
  TALLY_REQUIRE_GPU();
  std::unique_ptr<Backend> cpu = MakeCpu();
  const DType t = DType::kFloat32;
  const std::uint64_t n = (std::uint64_t{4} << 20) / 4;
  const std::vector<std::byte> data = RandomArray(t, n, 12);
  std::vector<OpSpec> ops = AllOps(t);
  std::erase_if(ops, [](const OpSpec& op) { return op.kind == OpKind::kProduct; });
  const AggregationPlan plan = Plan(t, n, 0, ops);
  for (const auto& [model, want_backend] :
       {std::pair<std::string, std::string>{"gpu_fixed_us=1000000", "cpu"}, {"cpu_fixed_us=1000000", "cuda"}}) {
    BackendOptions o = TestOptions();
    o.routing = "cost";
    o.route_model = model;
    std::unique_ptr<Backend> cuda = MakeCuda(o);
    ASSERT_NE(cuda, nullptr);
    absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->backend, want_backend) << model;
    absl::StatusOr<AggregationResult> ref = RunRequest(*cpu, plan, data);
    ASSERT_TRUE(ref.ok());
    ExpectSame(plan, *ref, *got, Match::kBits, model);
    // With prod, by size (--small_request_bytes=0 here: the GPU), whatever the model.
    const AggregationPlan with_prod = Plan(t, n, 0, AllOps(t));
    absl::StatusOr<AggregationResult> by_size = RunRequest(*cuda, with_prod, data);
    ASSERT_TRUE(by_size.ok()) << by_size.status();
    EXPECT_EQ(by_size->backend, "cuda") << model;
  }
  // Every lane busy: a request the model sends to the GPU waits for a lane
  // only as long as the GPU's estimated lead (here the model's 1 s), then
  // runs on the CPU instead of being refused after --cuda_lane_wait_ms.
  {
    BackendOptions o = TestOptions();
    o.routing = "cost";
    o.route_model = "cpu_fixed_us=1000000";
    o.streams_per_device = 1;
    o.lane_wait = std::chrono::seconds(5);  // far longer than the lead
    std::unique_ptr<Backend> cuda = MakeCuda(o);
    ASSERT_NE(cuda, nullptr);
    absl::StatusOr<std::unique_ptr<Reduction>> holder = cuda->Start(plan);  // takes the one lane
    ASSERT_TRUE(holder.ok()) << holder.status();
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->backend, "cpu");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, o.lane_wait) << "it waited for the lane";
    absl::StatusOr<AggregationResult> ref = RunRequest(*cpu, plan, data);
    ASSERT_TRUE(ref.ok());
    ExpectSame(plan, *ref, *got, Match::kBits, "lanes busy");
    holder->reset();  // the lane back: the GPU again
    got = RunRequest(*cuda, plan, data);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->backend, "cuda");
  }
  // The calibrated default serves both a tiny request and a large one.
  BackendOptions o = TestOptions();
  o.routing = "cost";
  o.route_calibration = true;
  std::unique_ptr<Backend> cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);
  for (const std::uint64_t len : {std::uint64_t{100}, n}) {
    const AggregationPlan p = Plan(t, len, 0, AllOps(t));
    absl::StatusOr<AggregationResult> got = RunRequest(*cuda, p, std::span(data).first(len * 4));
    absl::StatusOr<AggregationResult> ref = RunRequest(*cpu, p, std::span(data).first(len * 4));
    ASSERT_TRUE(got.ok() && ref.ok()) << got.status() << " / " << ref.status();
    ExpectSame(p, *ref, *got, Match::kExactSums, "calibrated, " + std::to_string(len));
  }
  // Refused options.
  for (const auto& [routing, model] : {std::pair<std::string, std::string>{"fastest", ""}, {"cost", "gpu_fixed_us=x"}}) {
    BackendOptions bad = TestOptions();
    bad.routing = routing;
    bad.route_model = model;
    EXPECT_EQ(MakeBackend(bad).status().code(), absl::StatusCode::kInvalidArgument) << routing << " " << model;
  }
}

}  // namespace
}  // namespace tally::engine_test
