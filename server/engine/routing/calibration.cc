#include "server/engine/routing/calibration.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "server/engine/cpu/tuning.h"
#include "server/engine/host_runs.h"

namespace tally::routing {
namespace {

constexpr std::uint64_t kRunBytes = 64 << 10;  // gRPC's larger receive slices

AggregationPlan PlanOf(std::uint64_t elements, std::vector<OpSpec> ops) {
  AggregationPlan plan;
  plan.array.dtype = DType::kFloat32;
  plan.array.length = elements;
  plan.ops = std::move(ops);
  return plan;
}

OpSpec Op(OpKind kind) {
  OpSpec op;
  op.kind = kind;
  return op;
}

OpSpec Histogram(std::uint32_t bins) {
  OpSpec op = Op(OpKind::kHistogram);
  op.histogram.bins = bins;
  op.histogram.lo = -1.0;
  op.histogram.hi = 1.0;
  return op;
}

class Timer {
 public:
  explicit Timer(const std::vector<float>& data) : data_(data) {}

  // The median time of `reps` runs of `plan` through `start`, over the
  // first plan.array.length elements of the data.
  // The wall time of `threads` requests of `plan` run at once, the best
  // of `reps` rounds.
  absl::StatusOr<double> Together(const StartFn& start, const AggregationPlan& plan, int threads, int reps) {
    double best = 0.0;
    for (int r = 0; r < reps; ++r) {
      std::vector<absl::Status> errors(static_cast<std::size_t>(threads));
      std::vector<std::thread> workers;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < threads; ++i) {
        workers.emplace_back([&, i] {
          absl::StatusOr<double> t = Median(start, plan, 1);
          errors[static_cast<std::size_t>(i)] = t.status();
        });
      }
      for (std::thread& w : workers) w.join();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (const absl::Status& e : errors) {
        if (!e.ok()) return e;
      }
      best = r == 0 ? seconds : std::min(best, seconds);
    }
    return best;
  }

  absl::StatusOr<double> Median(const StartFn& start, const AggregationPlan& plan, int reps) {
    const auto* bytes = reinterpret_cast<const std::byte*>(data_.data());
    const std::uint64_t total = plan.array.bytes();
    std::vector<Extent> runs;
    for (std::uint64_t at = 0; at < total; at += kRunBytes) {
      runs.push_back(Extent::PageableHost({bytes + at, static_cast<std::size_t>(std::min(kRunBytes, total - at))}));
    }
    const HostRuns view(runs);
    std::vector<double> seconds;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<std::unique_ptr<Reduction>> reduction = start(plan);
      if (!reduction.ok()) return reduction.status();
      if (absl::Status s = (*reduction)->ConsumeRuns(view); !s.ok()) return s;
      if (absl::StatusOr<AggregationResult> result = (*reduction)->Finish(); !result.ok()) return result.status();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(seconds.begin(), seconds.begin() + reps / 2, seconds.end());
    return seconds[static_cast<std::size_t>(reps / 2)];
  }

 private:
  const std::vector<float>& data_;
};

}  // namespace

absl::StatusOr<CostParams> Calibrate(const StartFn& cpu, int cpu_threads, const StartFn& gpu, int gpu_lanes) {
  constexpr std::uint64_t kGpuElements = std::uint64_t{4} << 20;  // 16 MiB
  // One CPU chunk: reduced by one thread, so the per-element costs are a
  // thread's.
  constexpr std::uint64_t kCpuElements = cpu::CpuPolicy::kChunkElements;
  std::vector<float> data(kGpuElements);
  std::uint32_t x = 12345;
  for (float& v : data) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 2.2f - 1.1f;  // some outside [-1, 1]
  }
  Timer timer(data);
  CostParams p;
  p.cpu_threads = std::max(cpu_threads, 1);

  absl::StatusOr<double> fixed = timer.Median(cpu, PlanOf(1, {Op(OpKind::kSum)}), 51);
  if (!fixed.ok()) return fixed.status();
  p.cpu_fixed_us = *fixed * 1e6;
  auto per_element_ns = [&](std::vector<OpSpec> ops) -> absl::StatusOr<double> {
    absl::StatusOr<double> t = timer.Median(cpu, PlanOf(kCpuElements, std::move(ops)), 9);
    if (!t.ok()) return t.status();
    return std::max(0.0, *t - *fixed) * 1e9 / static_cast<double>(kCpuElements);
  };
  absl::StatusOr<double> read = per_element_ns({Op(OpKind::kSum)});
  if (!read.ok()) return read.status();
  p.cpu_read_ns = *read;
  // The ops the GPU kernels compute: the only ones that have a choice.
  for (int k = 0; k < rules::kNumKernelOpKinds; ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    if (kind == OpKind::kSum || kind == OpKind::kHistogram) continue;
    absl::StatusOr<double> with = per_element_ns({Op(OpKind::kSum), Op(kind)});
    if (!with.ok()) return with.status();
    p.cpu_op_ns[static_cast<std::size_t>(k)] = std::max(0.0, *with - *read);
  }
  for (auto [bins, out] : {std::pair{256u, &p.cpu_hist_small_ns}, std::pair{65536u, &p.cpu_hist_large_ns}}) {
    absl::StatusOr<double> with = per_element_ns({Op(OpKind::kSum), Histogram(bins)});
    if (!with.ok()) return with.status();
    *out = std::max(0.0, *with - *read);
  }

  {
    // A random mask with about half the elements valid: the gather's cost.
    AggregationPlan masked = PlanOf(kCpuElements, {Op(OpKind::kSum)});
    std::vector<std::uint32_t> words((kCpuElements + 31) / 32);
    for (std::uint32_t& w : words) {
      x = x * 1664525u + 1013904223u;
      w = x;
    }
    masked.array.validity = std::make_shared<const std::vector<std::uint32_t>>(std::move(words));
    absl::StatusOr<double> t = timer.Median(cpu, masked, 9);
    if (!t.ok()) return t.status();
    p.cpu_mask_ns = std::max(0.0, (*t - *fixed) * 1e9 / static_cast<double>(kCpuElements) - *read);
  }

  // All threads over an array larger than most caches: the CPU path's
  // ceiling.
  absl::StatusOr<double> wide = timer.Median(cpu, PlanOf(kGpuElements, {Op(OpKind::kSum)}), 5);
  if (!wide.ok()) return wide.status();
  p.cpu_gb_per_s = static_cast<double>(kGpuElements * sizeof(float)) / std::max(*wide - *fixed, 1e-6) / 1e9;

  absl::StatusOr<double> gpu_fixed = timer.Median(gpu, PlanOf(1024, {Op(OpKind::kSum)}), 21);
  if (!gpu_fixed.ok()) return gpu_fixed.status();
  absl::StatusOr<double> gpu_big = timer.Median(gpu, PlanOf(kGpuElements, {Op(OpKind::kSum)}), 5);
  if (!gpu_big.ok()) return gpu_big.status();
  p.gpu_fixed_us = *gpu_fixed * 1e6;
  p.gpu_gb_per_s = static_cast<double>(kGpuElements * sizeof(float)) / std::max(*gpu_big - *gpu_fixed, 1e-6) / 1e9;
  // Several requests at once: how fast the GPU path drains what is queued
  // on it (its lanes copy and reduce side by side, sharing the host's
  // memory bandwidth and the copy threads).
  const int together_requests = std::clamp(gpu_lanes, 1, 8);
  absl::StatusOr<double> together =
      timer.Together(gpu, PlanOf(kGpuElements, {Op(OpKind::kSum)}), together_requests, 3);
  if (!together.ok()) return together.status();
  p.gpu_all_gb_per_s =
      std::max(p.gpu_gb_per_s, static_cast<double>(together_requests) * (kGpuElements * sizeof(float)) /
                                   std::max(*together, 1e-6) / 1e9);
  return p;
}

}  // namespace tally::routing
