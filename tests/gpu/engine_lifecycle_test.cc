// The CUDA backend's lifecycle: cancelled requests give their lane back,
// busy lanes turn requests away with RESOURCE_EXHAUSTED, a long stream runs
// in bounded memory, and a GPU lost under load takes no new requests while
// the others serve.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "server/engine/cuda/device_fault.h"
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
  ExpectSame(plan, *want, *got, Match::kExactSums, "after cancellations");
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

// --fault_lose_gpu's value; needs no GPU.
TEST(DeviceFault, TakesOrdinalAtSecondsAndRefusesTheRest) {
  absl::StatusOr<std::optional<cuda::LoseGpuFault>> none = cuda::ParseLoseGpuFault("");
  ASSERT_TRUE(none.ok() && !none->has_value());
  absl::StatusOr<std::optional<cuda::LoseGpuFault>> f = cuda::ParseLoseGpuFault("1@2.5");
  ASSERT_TRUE(f.ok() && f->has_value()) << f.status();
  EXPECT_EQ((*f)->device, 1);
  EXPECT_EQ((*f)->after, std::chrono::milliseconds(2500));
  for (const char* bad : {"1", "@3", "x@1", "-1@1", "1@-2", "1@nan", "1@inf", "1@2@3", "1@"}) {
    absl::StatusOr<std::optional<cuda::LoseGpuFault>> b = cuda::ParseLoseGpuFault(bad);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(b.status().message().find("--fault_lose_gpu"), std::string::npos) << b.status();
  }
}

// --fault_lose_gpu marks GPU 0 lost mid-load, as a sticky CUDA error would.
// Every request either answers what the cpu backend answers or, once no
// usable GPU is left, fails UNAVAILABLE at once; none hangs. Afterwards GPU
// 0 takes no new request: with other GPUs they serve (and health stays OK),
// with none the backend is UNAVAILABLE naming the lost one.
TEST(EngineLifecycle, LosingAGpuUnderLoad) {
  TALLY_REQUIRE_GPU();
  const int gpus = GpuCount();
  BackendOptions o = TestOptions();
  o.cuda_devices.clear();
  for (int d = 0; d < gpus; ++d) o.cuda_devices.push_back(d);
  o.fault_lose_gpu = "0@0.3";
  std::unique_ptr<Backend> cuda = MakeCuda(o);
  ASSERT_NE(cuda, nullptr);
  std::unique_ptr<Backend> cpu = MakeCpu();
  const DType t = DType::kFloat32;
  const std::uint64_t n = (std::uint64_t{3} << 20) + 77;
  const AggregationPlan plan = Plan(t, n, 0, {Op(OpKind::kSum), Op(OpKind::kMax), Op(OpKind::kArgmax)});
  const std::vector<std::byte> data = RandomArray(t, n, 61);
  absl::StatusOr<AggregationResult> want = RunRequest(*cpu, plan, data);
  ASSERT_TRUE(want.ok()) << want.status();

  constexpr int kThreads = 6;
  std::atomic<int> ok{0}, unavailable{0}, other{0}, on_lost_after{0};
  std::atomic<bool> lost_seen{false};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500)) {
        // Whether GPU 0 was already lost before this request started.
        const bool lost_before = !cuda->DevicesHealth().front().status.ok();
        absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data, {100000});
        if (got.ok()) {
          ++ok;
          ExpectSame(plan, *want, *got, Match::kExactSums, "under a GPU loss");
          if (lost_before && got->device.find("(0)") != std::string::npos) ++on_lost_after;
        } else if (absl::IsUnavailable(got.status())) {
          ++unavailable;
          lost_seen = true;
          EXPECT_NE(got.status().message().find("--fault_lose_gpu"), std::string::npos) << got.status();
        } else {
          ++other;
          ADD_FAILURE() << got.status();
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 1.5 + 2.0) << "a request outlived the load by more than a lane wait";
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(on_lost_after.load(), 0) << "requests started on GPU 0 after it was lost";

  const std::vector<Backend::DeviceHealth> health = cuda->DevicesHealth();
  ASSERT_EQ(health.size(), static_cast<std::size_t>(gpus));
  EXPECT_EQ(health[0].place, "cuda:0");
  EXPECT_TRUE(absl::IsUnavailable(health[0].status)) << health[0].status;
  for (int d = 1; d < gpus; ++d) EXPECT_TRUE(health[static_cast<std::size_t>(d)].status.ok()) << d;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<AggregationResult> after = RunRequest(*cuda, plan, data);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (gpus == 1) {
    EXPECT_TRUE(lost_seen.load());
    EXPECT_TRUE(absl::IsUnavailable(cuda->Health())) << cuda->Health();
    EXPECT_TRUE(absl::IsUnavailable(after.status())) << after.status();
    EXPECT_LT(waited, 0.1) << "an UNAVAILABLE answer must not wait for a lane";
  } else {
    EXPECT_TRUE(cuda->Health().ok()) << cuda->Health();
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->device.find("(0)"), std::string::npos) << after->device;
    EXPECT_EQ(unavailable.load(), 0);
  }
}

}  // namespace
}  // namespace tally::engine_test
