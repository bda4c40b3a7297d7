// Routing between the CPU and a GPU (server/engine/routing): the choice
// against a fake model, the measured model's formulas on given rates, the
// --route_model parser, and the calibration run against the CPU backend
// standing in for both paths.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/routing/calibration.h"
#include "server/engine/routing/cost_model.h"

namespace tally::routing {
namespace {

AggregationPlan PlanOf(std::uint64_t bytes, std::vector<OpKind> kinds, std::uint32_t bins = 0) {
  AggregationPlan plan;
  plan.array.dtype = DType::kFloat32;
  plan.array.length = bytes / 4;
  for (OpKind k : kinds) {
    OpSpec op;
    op.kind = k;
    if (k == OpKind::kHistogram) op.histogram = {bins, -1.0, 1.0};
    plan.ops.push_back(op);
  }
  return plan;
}

// Fixed answers, to test the choice alone.
class FakeModel final : public CostModel {
 public:
  FakeModel(double cpu, double gpu) : cpu_(cpu), gpu_(gpu) {}
  double CpuWork(const AggregationPlan&) const override { return cpu_; }
  double CpuSeconds(const AggregationPlan&, const Load& load) const override { return cpu_ + load.cpu_queued_seconds; }
  double GpuSeconds(const AggregationPlan&, const Load& load) const override {
    return gpu_ + static_cast<double>(load.gpu_queued_bytes) * 1e-9;
  }

 private:
  double cpu_, gpu_;
};

TEST(Routing, ChoosesThePathThatFinishesFirstAndTiesGoToTheCpu) {
  const AggregationPlan plan = PlanOf(4096, {OpKind::kSum});
  EXPECT_EQ(Choose(FakeModel(1e-3, 2e-3), plan, {}), Path::kCpu);
  EXPECT_EQ(Choose(FakeModel(2e-3, 1e-3), plan, {}), Path::kGpu);
  EXPECT_EQ(Choose(FakeModel(1e-3, 1e-3), plan, {}), Path::kCpu);
  // The load moves it: a busy CPU sends work to the GPU, a busy GPU back.
  EXPECT_EQ(Choose(FakeModel(1e-3, 2e-3), plan, {.cpu_queued_seconds = 5e-3}), Path::kGpu);
  EXPECT_EQ(Choose(FakeModel(2e-3, 1e-3), plan, {.gpu_queued_bytes = 5'000'000}), Path::kCpu);
}

// Rates of the order measured on a 16-core host with an H100.
CostParams HostLike() {
  CostParams p;
  p.cpu_threads = 16;
  p.cpu_fixed_us = 5;
  p.cpu_read_ns = 0.5;
  p.cpu_gb_per_s = 40;
  p.cpu_op_ns[static_cast<std::size_t>(OpKind::kArgmax)] = 0.5;
  p.cpu_op_ns[static_cast<std::size_t>(OpKind::kMin)] = 0.1;
  p.cpu_op_ns[static_cast<std::size_t>(OpKind::kMax)] = 0.1;
  p.cpu_hist_small_ns = 2;
  p.cpu_hist_large_ns = 6;
  p.gpu_fixed_us = 60;
  p.gpu_gb_per_s = 25;
  p.gpu_all_gb_per_s = 50;
  return p;
}

TEST(Routing, MeasuredModelFollowsItsRates) {
  const MeasuredCostModel m(HostLike());
  const auto fused = std::vector<OpKind>{OpKind::kSum, OpKind::kMin, OpKind::kMax, OpKind::kArgmax, OpKind::kHistogram};
  // A small sum: 5.5 us on the CPU against 60 us of GPU overhead.
  EXPECT_NEAR(m.CpuSeconds(PlanOf(4096, {OpKind::kSum}), {}), 5e-6 + 1024 * 0.5e-9, 1e-12);
  EXPECT_EQ(Choose(m, PlanOf(4096, {OpKind::kSum}), {}), Path::kCpu);
  EXPECT_EQ(Choose(m, PlanOf(4096, fused, 4096), {}), Path::kCpu);
  // A large plain sum is bound by memory on the CPU (40 GB/s) and by the
  // copies on the GPU (25 GB/s): the CPU.
  const AggregationPlan big_sum = PlanOf(64 << 20, {OpKind::kSum});
  EXPECT_NEAR(m.CpuSeconds(big_sum, {}), 5e-6 + (64 << 20) / 40e9, 1e-9);
  EXPECT_NEAR(m.GpuSeconds(big_sum, {}), 60e-6 + (64 << 20) / 25e9, 1e-9);
  EXPECT_EQ(Choose(m, big_sum, {}), Path::kCpu);
  // Fused ops with a 4096-bin histogram cost the CPU 0.5 + 0.1 + 0.1 + 0.5
  // + 4 ns an element (the histogram halfway between 256 and 65536 bins in
  // log2): the GPU.
  const AggregationPlan big_fused = PlanOf(64 << 20, fused, 4096);
  EXPECT_NEAR(m.CpuWork(big_fused), (16 << 20) * 5.2e-9, 1e-9);
  EXPECT_EQ(Choose(m, big_fused, {}), Path::kGpu);
  // Queued bytes drain at all lanes' rate (50 GB/s), this request's at one
  // request's (25 GB/s).
  EXPECT_NEAR(m.GpuSeconds(big_fused, {.gpu_queued_bytes = 500'000'000}), 60e-6 + (64 << 20) / 25e9 + 0.01, 1e-9);
  // ...so 1 GiB already on the GPU path sends the fused request to the CPU.
  EXPECT_EQ(Choose(m, big_fused, {.gpu_queued_bytes = std::uint64_t{1} << 30}), Path::kCpu);
  // A large sum goes to the GPU once the CPU has a second of work queued.
  EXPECT_EQ(Choose(m, big_sum, {.cpu_queued_seconds = 1.0}), Path::kGpu);
  // Under load a CPU request is helped only by the threads the others leave
  // over: with 12 requests in flight, 4 threads; with 16 or more, its own.
  EXPECT_NEAR(m.CpuSeconds(big_fused, {.busy_threads = 12}), 5e-6 + m.CpuWork(big_fused) / 4, 1e-9);
  EXPECT_NEAR(m.CpuSeconds(big_fused, {.busy_threads = 40}), 5e-6 + m.CpuWork(big_fused), 1e-9);
  EXPECT_EQ(Choose(m, big_sum, {.busy_threads = 40}), Path::kGpu);
  // Fewer pieces than threads: a 256 KiB array is one chunk, one thread.
  EXPECT_NEAR(m.CpuSeconds(PlanOf(256 << 10, fused, 256), {}), 5e-6 + (64 << 10) * (1.2 + 2) * 1e-9, 1e-9);
}

// A validity mask costs the CPU its gather (cpu_mask_ns an element) and the
// GPU path its bytes (one bit an element, copied with the data).
TEST(Routing, MasksCostTheCpuTheGatherAndTheGpuTheirBytes) {
  CostParams p = HostLike();
  p.cpu_mask_ns = 3;
  const MeasuredCostModel m(p);
  const AggregationPlan sum = PlanOf(16 << 20, {OpKind::kSum});
  AggregationPlan masked = sum;
  masked.array.validity = std::make_shared<const std::vector<std::uint32_t>>((4 << 20) / 32, 0x55555555u);
  EXPECT_NEAR(m.CpuWork(masked), m.CpuWork(sum) + (4 << 20) * 3e-9, 1e-12);
  EXPECT_NEAR(m.GpuSeconds(masked, {}), m.GpuSeconds(sum, {}) + (512 << 10) / 25e9, 1e-12);
  // 16 MiB: a plain sum is the CPU's (memory-bound, 40 GB/s), a masked one
  // is the GPU's (3.5 ns an element over 16 threads).
  EXPECT_EQ(Choose(m, sum, {}), Path::kCpu);
  EXPECT_EQ(Choose(m, masked, {}), Path::kGpu);
}

TEST(Routing, RouteModelFlagOverridesAndRefusesWhatItDoesNotKnow) {
  CostParams p;
  ASSERT_TRUE(ApplyOverrides("gpu_fixed_us=80,cpu_ns.argmax=0.75,cpu_threads=4,cpu_gb_per_s=12.5", &p).ok());
  EXPECT_EQ(p.gpu_fixed_us, 80);
  EXPECT_EQ(p.cpu_op_ns[static_cast<std::size_t>(OpKind::kArgmax)], 0.75);
  EXPECT_EQ(p.cpu_threads, 4);
  EXPECT_EQ(p.cpu_gb_per_s, 12.5);
  for (const char* bad : {"gpu_fixed_us", "gpu_fixed_us=-1", "gpu_fixed_us=x", "speed=3", "cpu_ns.frobnicate=1",
                          "cpu_ns.histogram=1", "cpu_mask_ns=-2", "cpu_threads=0", "cpu_threads=2.5", "gpu_gb_per_s=0",
                          "gpu_all_gb_per_s=0"}) {
    CostParams q;
    const absl::Status s = ApplyOverrides(bad, &q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--route_model"), std::string::npos) << s;
  }
  // What the log prints is what the flag takes back.
  const CostParams host = HostLike();
  CostParams again;
  ASSERT_TRUE(ApplyOverrides(Describe(host), &again).ok()) << Describe(host);
  EXPECT_EQ(Describe(again), Describe(host));
}

TEST(Routing, CalibrationMeasuresEveryRate) {
  auto cpu = MakeCpuBackend({.threads = 2});
  const StartFn start = [&](const AggregationPlan& plan) { return cpu->Start(plan); };
  absl::StatusOr<CostParams> p = Calibrate(start, 2, start, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->cpu_threads, 2);
  for (double v : {p->cpu_fixed_us, p->cpu_read_ns, p->cpu_gb_per_s, p->gpu_fixed_us, p->gpu_gb_per_s,
                   p->gpu_all_gb_per_s}) {
    EXPECT_TRUE(std::isfinite(v) && v > 0) << Describe(*p);
  }
  // Requests together drain at least as fast as one alone.
  EXPECT_GE(p->gpu_all_gb_per_s, p->gpu_gb_per_s) << Describe(*p);
  // Histograms and variance's second look at each block cost the CPU
  // something over the plain sum.
  EXPECT_GT(p->cpu_hist_small_ns, 0.0) << Describe(*p);
  EXPECT_GT(p->cpu_hist_large_ns, 0.0) << Describe(*p);
  EXPECT_GT(p->cpu_op_ns[static_cast<std::size_t>(OpKind::kVariance)], 0.0) << Describe(*p);
  EXPECT_GT(p->cpu_mask_ns, 0.0) << Describe(*p);
  // A failing path fails the calibration.
  const StartFn broken = [](const AggregationPlan&) -> absl::StatusOr<std::unique_ptr<Reduction>> {
    return absl::UnavailableError("no lane");
  };
  EXPECT_EQ(Calibrate(start, 2, broken, 4).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tally::routing
