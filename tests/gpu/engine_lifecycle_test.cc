// The CUDA backend's lifecycle: cancelled requests give their lane back,
// busy lanes turn requests away with RESOURCE_EXHAUSTED, and a long stream
// runs in bounded memory.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "tests/gpu/engine_test_util.h"

namespace tally::engine_test {
namespace {

// The process' resident set, from /proc/self/status.
std::uint64_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

BackendOptions OneLane() {
  BackendOptions o = TestOptions();
  o.streams_per_device = 1;
  o.lane_wait = std::chrono::milliseconds(50);
  return o;
}

TEST(EngineLifecycle, CancelledRequestsGiveTheLaneBack) {
  TALLY_REQUIRE_GPU();
  std::unique_ptr<Backend> cuda = MakeCuda(OneLane());
  ASSERT_NE(cuda, nullptr);
  std::unique_ptr<Backend> cpu = MakeCpu();
  const DType t = DType::kFloat32;
  const std::uint64_t chunk = (64 << 10) / 4;
  const std::uint64_t n = 10 * chunk + 3;
  const std::vector<std::byte> data = RandomArray(t, n, 11);
  const AggregationPlan plan = Plan(t, n, 0, AllOps(t));
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<std::unique_ptr<Reduction>> r = cuda->Start(plan);
    ASSERT_TRUE(r.ok()) << "iteration " << i << ": " << r.status();
    // Stop anywhere: before any data, mid-chunk, after several chunks.
    const std::uint64_t stop = (static_cast<std::uint64_t>(i) * 7919) % n;
    ASSERT_TRUE((*r)->Consume(std::span(data).first(stop * 4)).ok());
    r->reset();  // cancelled: destroyed without Finish()
  }
  absl::StatusOr<AggregationResult> want = RunRequest(*cpu, plan, data);
  absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data, {1000});
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " / " << got.status();
  ExpectSame(plan, *want, *got, /*exact=*/false, "after cancellations");
  EXPECT_TRUE(cuda->Health().ok());
}

TEST(EngineLifecycle, BusyLanesGiveResourceExhaustedAfterTheWait) {
  TALLY_REQUIRE_GPU();
  std::unique_ptr<Backend> cuda = MakeCuda(OneLane());
  ASSERT_NE(cuda, nullptr);
  const DType t = DType::kUInt8;
  const std::uint64_t n = 1 << 20;
  const AggregationPlan plan = Plan(t, n, 0, {Op(OpKind::kSum)});
  absl::StatusOr<std::unique_ptr<Reduction>> holder = cuda->Start(plan);
  ASSERT_TRUE(holder.ok()) << holder.status();

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Reduction>> turned_away = cuda->Start(plan);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(turned_away.status().code(), absl::StatusCode::kResourceExhausted)
      << turned_away.status();
  EXPECT_NE(turned_away.status().message().find("--cuda_streams_per_device"), std::string::npos)
      << turned_away.status();
  EXPECT_GE(waited, 0.045);
  EXPECT_LT(waited, 2.0);

  // A lane freed during the wait is taken.
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    holder->reset();
  });
  absl::StatusOr<std::unique_ptr<Reduction>> next = cuda->Start(plan);
  release.join();
  ASSERT_TRUE(next.ok()) << next.status();
  const std::vector<std::byte> data = RandomArray(t, n, 2);
  ASSERT_TRUE((*next)->Consume(data).ok());
  absl::StatusOr<AggregationResult> result = (*next)->Finish();
  ASSERT_TRUE(result.ok()) << result.status();
  std::uint64_t sum = 0;
  for (std::byte b : data) sum += static_cast<std::uint8_t>(b);
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(result->values[0]), std::vector<std::uint64_t>{sum});
}

TEST(EngineLifecycle, ConcurrentRequestsOnEveryLane) {
  TALLY_REQUIRE_GPU();
  BackendOptions o = TestOptions();
  o.cuda_devices = {};  // every GPU
  o.streams_per_device = 3;
  o.lane_wait = std::chrono::milliseconds(5000);
  std::unique_ptr<Backend> cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);
  std::unique_ptr<Backend> cpu = MakeCpu();
  const DType t = DType::kFloat64;
  const std::uint64_t n = 20 * (64 << 10) / 8 + 9;
  const std::vector<std::byte> data = RandomArray(t, n, 21);
  const AggregationPlan plan = Plan(t, n, 0, AllOps(t));
  absl::StatusOr<AggregationResult> want = RunRequest(*cuda, plan, data);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 10; ++k) {
        absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data, {static_cast<std::uint64_t>(1000 + 37 * i)});
        if (!got.ok() || !(got->values == want->values)) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// 4 GiB of uint32 in 4 MiB pieces with the default chunk: the answer is known
// in closed form, and the resident set grows by no more than a small constant
// (the pinned pool was allocated, and counted, before).
TEST(EngineLifecycle, StreamsFourGiBInBoundedMemory) {
  TALLY_REQUIRE_GPU();
  BackendOptions o;
  o.kind = "cuda";
  o.routing = "size";  // on the GPU, whatever it would cost there
  o.cuda_devices = {0};
  o.pinned_pool_bytes = 256 << 20;
  std::unique_ptr<Backend> cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);

  constexpr std::uint64_t kPiece = 4 << 20;
  constexpr std::uint64_t kPieces = 1024;  // 4 GiB
  constexpr std::uint64_t kPieceElems = kPiece / 4;
  std::vector<std::uint32_t> piece(kPieceElems);
  std::uint64_t piece_sum = 0;
  for (std::uint64_t i = 0; i < kPieceElems; ++i) {
    piece[i] = static_cast<std::uint32_t>((i * 2654435761u) % 1000003u);
    piece_sum += piece[i];
  }
  const std::uint64_t n = kPieceElems * kPieces;
  const AggregationPlan plan =
      Plan(DType::kUInt32, n, 0, {Op(OpKind::kSum), Op(OpKind::kMax), Op(OpKind::kArgmax),
                                  Op(OpKind::kCount)});
  // Warm up (lazy CUDA state, first kernel loads) before measuring.
  ASSERT_TRUE(RunRequest(*cuda, Plan(DType::kUInt32, kPieceElems, 0, plan.ops),
                  std::as_bytes(std::span(piece))).ok());

  const std::uint64_t rss_before = RssBytes();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Reduction>> r = cuda->Start(plan);
  ASSERT_TRUE(r.ok()) << r.status();
  constexpr std::uint64_t kSpecialPiece = 700, kSpecialAt = 12345;
  for (std::uint64_t p = 0; p < kPieces; ++p) {
    if (p == kSpecialPiece) piece[kSpecialAt] = 0xffffffffu;  // the unique maximum
    ASSERT_TRUE((*r)->Consume(std::as_bytes(std::span(piece))).ok()) << "piece " << p;
    if (p == kSpecialPiece) piece[kSpecialAt] = static_cast<std::uint32_t>((kSpecialAt * 2654435761u) % 1000003u);
  }
  absl::StatusOr<AggregationResult> result = (*r)->Finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::uint64_t rss_after = RssBytes();
  ASSERT_TRUE(result.ok()) << result.status();
  const std::uint64_t special_old = (kSpecialAt * 2654435761u) % 1000003u;
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(result->values[0])[0],
            piece_sum * kPieces - special_old + 0xffffffffu);
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(result->values[1])[0], 0xffffffffu);
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(result->values[2])[0],
            static_cast<std::int64_t>(kSpecialPiece * kPieceElems + kSpecialAt));
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(result->values[3])[0], n);
  const double growth_mib = (static_cast<double>(rss_after) - static_cast<double>(rss_before)) / (1 << 20);
  std::printf("streamed 4 GiB in %.2f s (%.2f GB/s); RSS %.0f -> %.0f MiB (%+.1f MiB)\n", seconds,
              4.294967296 / seconds, rss_before / 1048576.0, rss_after / 1048576.0, growth_mib);
  EXPECT_LT(growth_mib, 64.0) << "RSS grew while streaming";
}

}  // namespace
}  // namespace tally::engine_test
