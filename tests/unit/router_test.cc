// The router between the cpu backend and a GPU backend
// (server/engine/routing/router.h), with a stand-in GPU: a cpu backend that
// declares it does not run prod, can be made busy, and counts its starts.
// Every rule of the router's table is driven here without a GPU.
#include "server/engine/routing/router.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"

namespace tally::routing {
namespace {

// Counts the starts of the backend it wraps, and the waits it was given.
struct Counts {
  std::atomic<int> starts{0};
  std::chrono::milliseconds last_wait{-1};
};

// A GPU in name: runs everything but prod, reads device bytes (it refuses
// with FAILED_PRECONDITION what it does not run there, as the cuda backend
// does), and answers RESOURCE_EXHAUSTED when `busy`.
class StandInGpu final : public Backend {
 public:
  explicit StandInGpu(Counts* counts) : inner_(MakeCpuBackend(CpuBackendOptions{.threads = 1})), counts_(counts) {}

  std::string name() const override { return "gpu"; }
  std::string device() const override { return "a stand-in GPU"; }
  absl::Status Runs(const AggregationPlan& plan, const Placement& from) const override {
    (void)from;
    for (const OpSpec& op : plan.ops) {
      if (op.kind == OpKind::kProduct) return absl::UnimplementedError("the stand-in does not compute prod");
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan, const Placement& from) override {
    return StartWithin(plan, from, std::chrono::milliseconds(2000));
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartWithin(const AggregationPlan& plan, const Placement& from,
                                                         std::chrono::milliseconds wait) override {
    counts_->last_wait = wait;
    if (absl::Status s = Runs(plan, from); !s.ok()) {
      if (from.host()) return s;
      return absl::FailedPreconditionError(std::string(s.message()));
    }
    if (busy) return absl::ResourceExhaustedError("every lane is busy");
    ++counts_->starts;
    return inner_->Start(plan, Placement::PageableHost());
  }
  std::vector<ResidentPlace> ResidentPlaces() const override { return {{0, "gpu:0"}, {1, "gpu:1"}}; }

  bool busy = false;

 private:
  std::unique_ptr<Backend> inner_;
  Counts* counts_;
};

class CountingCpu final : public Backend {
 public:
  explicit CountingCpu(Counts* counts) : inner_(MakeCpuBackend(CpuBackendOptions{.threads = 1})), counts_(counts) {}
  std::string name() const override { return "cpu"; }
  std::string device() const override { return inner_->device(); }
  absl::Status Runs(const AggregationPlan& plan, const Placement& from) const override {
    return inner_->Runs(plan, from);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan, const Placement& from) override {
    ++counts_->starts;
    return inner_->Start(plan, from);
  }
  cpu::ThreadPool* HostWorkers() override { return inner_->HostWorkers(); }

 private:
  std::unique_ptr<Backend> inner_;
  Counts* counts_;
};

AggregationPlan PlanOf(std::uint64_t elements, OpKind kind) {
  AggregationPlan plan;
  plan.array.dtype = DType::kFloat32;
  plan.array.length = elements;
  plan.ops.push_back(OpSpec{.kind = kind});
  return plan;
}

struct Routed {
  std::unique_ptr<Backend> router;
  StandInGpu* gpu = nullptr;
  Counts cpu_counts, gpu_counts;
};

std::unique_ptr<Routed> MakeRouted(RouterOptions options) {
  auto r = std::make_unique<Routed>();
  auto gpu = std::make_unique<StandInGpu>(&r->gpu_counts);
  r->gpu = gpu.get();
  options.route_calibration = false;
  absl::StatusOr<std::unique_ptr<Backend>> made =
      MakeRouter(std::make_unique<CountingCpu>(&r->cpu_counts), std::move(gpu), options);
  EXPECT_TRUE(made.ok()) << made.status();
  if (made.ok()) r->router = std::move(*made);
  return r;
}

// Sums `n` ones through `backend` from `from`: the answer, so that a route
// that starts but cannot finish fails here.
double SumOfOnes(Backend& backend, std::uint64_t n, const Placement& from, OpKind kind = OpKind::kSum) {
  std::vector<float> ones(n, 1.0f);
  absl::StatusOr<std::unique_ptr<Reduction>> r = backend.Start(PlanOf(n, kind), from);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return -1;
  const std::span<const std::byte> bytes = std::as_bytes(std::span(ones));
  EXPECT_TRUE((*r)->Consume(Extent{bytes, Placement::PageableHost()}).ok());
  absl::StatusOr<AggregationResult> result = (*r)->Finish();
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return -1;
  return std::get<std::vector<double>>(result->values[0])[0];
}

TEST(Router, BySizeSmallRequestsGoToTheCpuAndTheRestToTheGpu) {
  auto r = MakeRouted({.routing = "size", .small_request_bytes = 4096, .lane_wait = std::chrono::milliseconds(750)});
  EXPECT_EQ(SumOfOnes(*r->router, 1023, Placement::PageableHost()), 1023.0);  // 4,092 bytes
  EXPECT_EQ(r->cpu_counts.starts, 1);
  EXPECT_EQ(r->gpu_counts.starts, 0);
  EXPECT_EQ(SumOfOnes(*r->router, 1024, Placement::PageableHost()), 1024.0);  // 4,096 bytes
  EXPECT_EQ(r->gpu_counts.starts, 1);
  EXPECT_EQ(r->gpu_counts.last_wait, std::chrono::milliseconds(750)) << "--cuda_lane_wait_ms is the wait";
  // Pinned bytes follow the same rule.
  EXPECT_EQ(SumOfOnes(*r->router, 10, Placement::PinnedHost()), 10.0);
  EXPECT_EQ(r->cpu_counts.starts, 2);
}

TEST(Router, HostBytesTheGpuDoesNotRunGoToTheCpuWhateverTheirSize) {
  auto r = MakeRouted({.routing = "size", .small_request_bytes = 0});
  EXPECT_EQ(SumOfOnes(*r->router, 5000, Placement::PageableHost(), OpKind::kProduct), 1.0);
  EXPECT_EQ(r->cpu_counts.starts, 1);
  EXPECT_EQ(r->gpu_counts.starts, 0);
  EXPECT_TRUE(r->router->Runs(PlanOf(10, OpKind::kProduct), Placement::PageableHost()).ok())
      << "the router runs what either backend runs";
}

TEST(Router, DeviceBytesAreTheGpusOrRefusedWithItsSentence) {
  auto r = MakeRouted({.routing = "cost", .small_request_bytes = 1 << 20});
  const absl::StatusOr<std::unique_ptr<Reduction>> refused =
      r->router->Start(PlanOf(10, OpKind::kProduct), Placement::Device(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("prod"), std::string::npos) << refused.status();
  EXPECT_EQ(r->cpu_counts.starts, 0) << "the cpu backend cannot read GPU memory";
  EXPECT_EQ(r->router->Runs(PlanOf(10, OpKind::kProduct), Placement::Device(1)).code(),
            absl::StatusCode::kUnimplemented);
  // Small device bytes stay on the GPU: never on the CPU, whatever their size.
  EXPECT_TRUE(r->router->Start(PlanOf(10, OpKind::kSum), Placement::Device(1)).ok());
  EXPECT_EQ(r->gpu_counts.starts, 1);
  EXPECT_EQ(r->cpu_counts.starts, 0);
  // Without waiting: a busy GPU answers RESOURCE_EXHAUSTED at once.
  r->gpu->busy = true;
  EXPECT_EQ(r->router->StartIfFree(PlanOf(10, OpKind::kSum), Placement::Device(1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r->gpu_counts.last_wait, std::chrono::milliseconds(0));
}

TEST(Router, ByCostTheModelChoosesAndBusyLanesSendWorkToTheCpu) {
  // A GPU that costs a second a request: every request on the CPU.
  auto slow = MakeRouted({.routing = "cost", .route_model = "gpu_fixed_us=1000000"});
  EXPECT_EQ(SumOfOnes(*slow->router, 1 << 16, Placement::PageableHost()), 65536.0);
  EXPECT_EQ(slow->cpu_counts.starts, 1);
  EXPECT_EQ(slow->gpu_counts.starts, 0);
  // A CPU that costs a second: the GPU, and the CPU when its lanes are busy
  // (a cost-routed request is never refused for busy lanes).
  auto fast = MakeRouted({.routing = "cost", .route_model = "cpu_fixed_us=1000000"});
  EXPECT_EQ(SumOfOnes(*fast->router, 1 << 16, Placement::PageableHost()), 65536.0);
  EXPECT_EQ(fast->gpu_counts.starts, 1);
  fast->gpu->busy = true;
  EXPECT_EQ(SumOfOnes(*fast->router, 1 << 16, Placement::PageableHost()), 65536.0);
  EXPECT_EQ(fast->cpu_counts.starts, 1);
  EXPECT_LE(fast->gpu_counts.last_wait, std::chrono::milliseconds(2000)) << "bounded by the GPU's lead";
}

TEST(Router, ByCostOnlyPlansWithTheSameBitsOnEitherBackendMove) {
  // A CPU that costs a second: cost routing sends a float sum of 256 KiB to
  // the GPU where the GPU's sums are exact, and by size (to the CPU, under
  // --small_request_bytes) where they are not.
  auto exact = MakeRouted({.routing = "cost", .route_model = "cpu_fixed_us=1000000"});
  EXPECT_EQ(SumOfOnes(*exact->router, 1 << 16, Placement::PageableHost()), 65536.0);
  EXPECT_EQ(exact->gpu_counts.starts, 1);
  auto inexact = MakeRouted({.routing = "cost", .route_model = "cpu_fixed_us=1000000", .exact_sums = false});
  EXPECT_EQ(SumOfOnes(*inexact->router, 1 << 16, Placement::PageableHost()), 65536.0);
  EXPECT_EQ(inexact->cpu_counts.starts, 1);
  EXPECT_EQ(inexact->gpu_counts.starts, 0);

  AggregationPlan plan = PlanOf(1024, OpKind::kSum);
  EXPECT_TRUE(SameBitsOnEither(plan, true));
  EXPECT_FALSE(SameBitsOnEither(plan, false));
  plan.ops.push_back({.kind = OpKind::kProduct});
  EXPECT_FALSE(SameBitsOnEither(plan, true)) << "a float prod rounds in each backend's order";
  plan.array.dtype = DType::kInt64;
  EXPECT_TRUE(SameBitsOnEither(plan, false)) << "integer sums and products wrap exactly";
  plan.ops.push_back({.kind = OpKind::kVariance});
  EXPECT_TRUE(SameBitsOnEither(plan, true));
  EXPECT_FALSE(SameBitsOnEither(plan, false)) << "an integer variance is exact only with exact sums";
  plan.array.dtype = DType::kFloat64;
  plan.ops = {{.kind = OpKind::kMax}, {.kind = OpKind::kArgmin}, {.kind = OpKind::kHistogram}};
  EXPECT_TRUE(SameBitsOnEither(plan, false));
}

TEST(Router, OtherQuestionsGoToTheBackendThatOwnsTheAnswer) {
  auto r = MakeRouted({});
  EXPECT_EQ(r->router->name(), "gpu");
  EXPECT_EQ(r->router->ResidentPlaces().size(), 2u) << "resident memory is the GPU's";
  EXPECT_NE(r->router->HostWorkers(), nullptr) << "host workers are the cpu backend's pool";
}

TEST(Router, RefusesOptionsThatDoNotParseNamingTheFlag) {
  for (const auto& [routing, model, flag] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"fastest", "", "--routing"}, {"cost", "gpu_fixed_us=x", "gpu_fixed_us"}}) {
    absl::StatusOr<std::unique_ptr<Backend>> made =
        MakeRouter(MakeCpuBackend({}), MakeCpuBackend({}),
                   RouterOptions{.routing = routing, .route_calibration = false, .route_model = model});
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << routing << " " << model;
    EXPECT_NE(made.status().message().find(flag), std::string::npos) << made.status();
  }
  absl::StatusOr<std::unique_ptr<Backend>> negative =
      MakeRouter(MakeCpuBackend({}), MakeCpuBackend({}), RouterOptions{.lane_wait = std::chrono::milliseconds(-1)});
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tally::routing
