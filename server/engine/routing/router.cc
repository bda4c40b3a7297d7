// The router between the cpu backend and a GPU backend (router.h): the one
// place that chooses which of them runs a request.
#include "server/engine/routing/router.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/engine/forwarding_backend.h"
#include "server/engine/routing/accounted_reduction.h"
#include "tally/rules/agg/registry.h"
#include "server/engine/routing/calibration.h"
#include "server/engine/routing/cost_model.h"
#include "server/metrics/metrics.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/dtype.h"
#include "spdlog/spdlog.h"

namespace tally::routing {
namespace {

// Device questions (resident memory, regions, device passes, health) go to
// the GPU backend, as ForwardingBackend passes them; the choice of backend
// for each reduction is made here.
class Router final : public ForwardingBackend {
 public:
  Router(std::unique_ptr<Backend> cpu, std::unique_ptr<Backend> gpu, const RouterOptions& options)
      : ForwardingBackend(std::move(gpu)),
        cpu_(std::move(cpu)),
        gpu_(&to()),
        small_request_bytes_(options.small_request_bytes),
        lane_wait_(options.lane_wait),
        by_cost_(options.routing == "cost"),
        exact_sums_(options.exact_sums),
        cpu_threads_(options.cpu_threads) {}

  // Measures the cost model's rates on both backends, then applies
  // --route_model.
  absl::Status Calibrate(const RouterOptions& options) {
    if (!by_cost_) return absl::OkStatus();
    CostParams params;
    const auto t0 = std::chrono::steady_clock::now();
    if (options.route_calibration) {
      absl::StatusOr<CostParams> measured = routing::Calibrate(
          [this](const AggregationPlan& plan) { return cpu_->Start(plan); }, cpu_threads_,
          [this](const AggregationPlan& plan) { return gpu_->Start(plan); }, options.gpu_lanes);
      if (!measured.ok()) {
        return absl::Status(measured.status().code(),
                            absl::StrCat("calibrating the routing: ", measured.status().message()));
      }
      params = *measured;
    }
    params.cpu_threads = cpu_threads_;
    if (absl::Status s = ApplyOverrides(options.route_model, &params); !s.ok()) return s;
    model_ = MeasuredCostModel(params);
    spdlog::info("routing: requests of received bytes go where they are estimated to finish first ({} in "
                 "{:.0f} ms{}): {}",
                 options.route_calibration ? "calibrated" : "not calibrated",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                 options.route_model.empty() ? "" : ", with --route_model", Describe(params));
    return absl::OkStatus();
  }

  absl::Status Runs(const AggregationPlan& plan, const Placement& from) const override {
    if (absl::Status gpu = gpu_->Runs(plan, from); gpu.ok() || !from.host()) return gpu;
    return cpu_->Runs(plan, from);
  }

  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan, const Placement& from) override {
    return StartWithin(plan, from, lane_wait_);
  }
  // Host bytes are routed as Start routes them; device bytes go to their
  // GPU without waiting (Backend's rule).
  absl::StatusOr<std::unique_ptr<Reduction>> StartIfFree(const AggregationPlan& plan,
                                                         const Placement& from) override {
    return Backend::StartIfFree(plan, from);
  }

  absl::StatusOr<std::unique_ptr<Reduction>> StartWithin(const AggregationPlan& plan, const Placement& from,
                                                         std::chrono::milliseconds wait) override {
    // Bytes on a GPU are read there or nowhere: the GPU backend's own
    // refusal names what it does not run.
    if (!from.host()) return gpu_->StartWithin(plan, from, wait);
    if (absl::Status gpu = gpu_->Runs(plan, from); !gpu.ok()) {
      if (!absl::IsUnimplemented(gpu)) return gpu;
      spdlog::debug("routing: {}; on the cpu", std::string(gpu.message()));
      return cpu_->Start(plan, from);
    }
    // Pinned bytes (a registered region) are routed by size: the GPU reads
    // them with no staging copy. So is everything under --routing=size, and
    // a plan the backends answer in different bits: the same request always
    // runs on the same hardware.
    if (from.memory != Memory::kPageableHost || !by_cost_ || !SameBitsOnEither(plan, exact_sums_)) {
      if (plan.array.bytes() < small_request_bytes_) return cpu_->Start(plan, from);
      return gpu_->StartWithin(plan, from, wait);
    }
    const Load load{.cpu_queued_seconds = static_cast<double>(cpu_queued_ns_.load(std::memory_order_relaxed)) * 1e-9,
                    .gpu_queued_bytes = static_cast<std::uint64_t>(gpu_queued_bytes_.load(std::memory_order_relaxed)),
                    .busy_threads = static_cast<int>(requests_.load(std::memory_order_relaxed))};
    const Estimate estimate = EstimateOf(model_, plan, load);
    if (estimate.path() == Path::kCpu) {
      CountRoute(Metrics::Route::kCpuByCost);
      return StartOnCpu(plan, from);
    }
    // The GPU, if a lane frees up while it would still finish first: the
    // estimate has no term for waiting on a lane, so the wait is bounded by
    // the GPU's estimated lead. Past it the CPU starts the request at once:
    // a cost-routed request is never refused for busy lanes.
    const auto lead = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(estimate.gpu_lead_seconds()));
    absl::StatusOr<std::unique_ptr<Reduction>> on_gpu = gpu_->StartWithin(plan, from, std::min(lead, wait));
    if (absl::IsResourceExhausted(on_gpu.status())) {
      CountRoute(Metrics::Route::kCpuLanesBusy);
      return StartOnCpu(plan, from);
    }
    if (!on_gpu.ok()) return on_gpu;
    CountRoute(Metrics::Route::kGpu);
    return std::unique_ptr<Reduction>(std::make_unique<AccountedReduction>(
        std::move(*on_gpu), &gpu_queued_bytes_, static_cast<std::int64_t>(plan.array.bytes()), &requests_));
  }

  // Host-side steps share the cpu backend's pool, as the requests it serves do.
  cpu::ThreadPool* HostWorkers() override { return cpu_->HostWorkers(); }
  void SetMetrics(Metrics* metrics) override {
    metrics_.store(metrics, std::memory_order_release);
    cpu_->SetMetrics(metrics);
    gpu_->SetMetrics(metrics);
  }

 private:
  // The plan on the cpu backend, holding its estimated work in the CPU
  // path's load while it runs.
  absl::StatusOr<std::unique_ptr<Reduction>> StartOnCpu(const AggregationPlan& plan, const Placement& from) {
    absl::StatusOr<std::unique_ptr<Reduction>> r = cpu_->Start(plan, from);
    if (!r.ok()) return r;
    return std::unique_ptr<Reduction>(std::make_unique<AccountedReduction>(
        std::move(*r), &cpu_queued_ns_, static_cast<std::int64_t>(model_.CpuWork(plan) * 1e9), &requests_));
  }

  void CountRoute(Metrics::Route route) {
    if (Metrics* m = metrics_.load(std::memory_order_acquire)) m->Routed(route);
  }

  std::unique_ptr<Backend> cpu_;
  Backend* const gpu_;  // owned by ForwardingBackend
  const std::uint64_t small_request_bytes_;
  const std::chrono::milliseconds lane_wait_;
  const bool by_cost_;
  const bool exact_sums_;
  const int cpu_threads_;
  MeasuredCostModel model_{CostParams{}};
  std::atomic<Metrics*> metrics_{nullptr};
  // The paths' load (Load): the CPU path's estimated one-thread work in ns,
  // the GPU path's bytes, of the requests in flight.
  std::atomic<std::int64_t> cpu_queued_ns_{0};
  std::atomic<std::int64_t> requests_{0};  // cost-routed requests in flight, either path
  std::atomic<std::int64_t> gpu_queued_bytes_{0};
};

}  // namespace

bool SameBitsOnEither(const AggregationPlan& plan, bool exact_sums) {
  const DType dtype = plan.array.dtype;
  return std::none_of(plan.ops.begin(), plan.ops.end(), [&](const OpSpec& op) {
    const rules::agg::Function& f = rules::agg::Of(op.kind);
    if (f.rounds_in_order) return rules::IsFloat(dtype);  // integer products wrap exactly
    return rules::agg::ExactFor(f, dtype) && !exact_sums;
  });
}

absl::StatusOr<std::unique_ptr<Backend>> MakeRouter(std::unique_ptr<Backend> cpu, std::unique_ptr<Backend> gpu,
                                                    const RouterOptions& options) {
  if (options.routing != "cost" && options.routing != "size") {
    return absl::InvalidArgumentError(absl::StrCat("--routing=", options.routing, ": expected cost or size."));
  }
  if (CostParams check; !ApplyOverrides(options.route_model, &check).ok()) {
    return ApplyOverrides(options.route_model, &check);
  }
  if (options.lane_wait.count() < 0) {
    return absl::InvalidArgumentError("--cuda_lane_wait_ms: must not be negative.");
  }
  auto router = std::make_unique<Router>(std::move(cpu), std::move(gpu), options);
  spdlog::info("routing: {}", options.routing == "cost"
                                  ? absl::StrCat("received bytes by cost, registered host memory under ",
                                                 options.small_request_bytes, " bytes to the cpu backend")
                                  : absl::StrCat("host bytes under ", options.small_request_bytes,
                                                 " bytes to the cpu backend"));
  if (absl::Status s = router->Calibrate(options); !s.ok()) return s;
  return router;
}

}  // namespace tally::routing
