// Where a request of host bytes runs on a server with a GPU: on the CPU
// backend, which reads the received bytes where they lie, or on a GPU lane,
// which first copies them into pinned staging and then to the device. Each
// path's time is estimated from measured rates (calibration.h measures them
// at start-up; --route_model gives or overrides them) and the work already
// queued on it, and the request goes where it is estimated to finish first.
//
// A path's results are deterministic; the two paths agree to the documented
// tolerance (the response's Execution.backend says which ran). A server that
// must give the same bits for a request under any load routes by size alone
// (--routing=size).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "server/core/request.h"
#include "tally/rules/op.h"

namespace tally::routing {

enum class Path { kCpu, kGpu };
const char* Name(Path path);

// What the paths hold now, as the backend counts it.
struct Load {
  double cpu_queued_seconds = 0.0;     // one-thread work of the CPU path's requests in flight
  std::uint64_t gpu_queued_bytes = 0;  // bytes of the GPU path's requests in flight
  // Requests in flight on either path: each keeps a thread busy (the CPU
  // path's reduces on it, the GPU path's fills pinned staging from it), so
  // a new CPU request is helped only by the threads left over
  // (cpu/thread_pool.h).
  int busy_threads = 0;
};

// The rates a model is built from. Per-element CPU costs are one thread's,
// on float32; other dtypes are costed per element the same way.
struct CostParams {
  int cpu_threads = 1;
  double cpu_fixed_us = 5.0;  // a CPU request with no bytes: plan, results
  double cpu_read_ns = 0.5;   // reading and summing one element
  // The most the CPU path reads, all threads together (a plain sum of a
  // large array): memory bandwidth, not threads, bounds it.
  double cpu_gb_per_s = 30.0;
  // What each op adds per element to the read (0 for ops that share it).
  // Histograms: cpu_hist_small_ns at 256 bins or fewer, cpu_hist_large_ns at
  // 65536 or more, interpolated in log2(bins) between.
  std::array<double, rules::kNumOpKinds> cpu_op_ns{};
  double cpu_hist_small_ns = 1.0;
  double cpu_hist_large_ns = 4.0;
  // What a validity mask adds per element: the gather of each block's valid
  // elements (cpu/masked_block.h), measured with a random half-valid mask.
  double cpu_mask_ns = 1.0;
  double gpu_fixed_us = 60.0;         // a GPU request with no bytes: lane, launch, copy back, sync
  double gpu_gb_per_s = 20.0;         // one request's pageable bytes (and its mask) through staging and the H2D copy
  // All lanes together: the rate at which the bytes already queued on the
  // GPU path drain, several requests copying and reducing at once.
  double gpu_all_gb_per_s = 40.0;
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  // One thread's CPU time for the plan's work, the unit of Load::cpu_queued_seconds.
  virtual double CpuWork(const AggregationPlan& plan) const = 0;
  // Estimated seconds until the plan's answer on each path, under `load`.
  virtual double CpuSeconds(const AggregationPlan& plan, const Load& load) const = 0;
  virtual double GpuSeconds(const AggregationPlan& plan, const Load& load) const = 0;
};

// Both paths' estimates for a plan under a load, and the path where it is
// estimated to finish first: a tie goes to the CPU, which copies nothing.
struct Estimate {
  double cpu_seconds = 0.0;
  double gpu_seconds = 0.0;
  Path path() const { return gpu_seconds < cpu_seconds ? Path::kGpu : Path::kCpu; }
  // How much sooner the GPU is estimated to finish (negative: later).
  double gpu_lead_seconds() const { return cpu_seconds - gpu_seconds; }
};
Estimate EstimateOf(const CostModel& model, const AggregationPlan& plan, const Load& load);
// EstimateOf(...).path(): the choice alone.
Path Choose(const CostModel& model, const AggregationPlan& plan, const Load& load);

// The model of the formulas in cost_model.cc over CostParams.
class MeasuredCostModel final : public CostModel {
 public:
  explicit MeasuredCostModel(const CostParams& params) : p_(params) {}
  const CostParams& params() const { return p_; }
  double CpuWork(const AggregationPlan& plan) const override;
  double CpuSeconds(const AggregationPlan& plan, const Load& load) const override;
  double GpuSeconds(const AggregationPlan& plan, const Load& load) const override;

 private:
  CostParams p_;
};

// Applies "key=value,..." (--route_model) to `params`. Keys: cpu_threads,
// cpu_fixed_us, cpu_read_ns, cpu_gb_per_s, cpu_hist_small_ns, cpu_hist_large_ns, cpu_mask_ns,
// gpu_fixed_us, gpu_gb_per_s, gpu_all_gb_per_s, and cpu_ns.OP for an op's added cost (OP as
// the wire names it: sum, argmax, nanvar, ...). An unknown key or a bad or
// negative value is INVALID_ARGUMENT naming it.
absl::Status ApplyOverrides(absl::string_view text, CostParams* params);

// The parameters in --route_model's form, for the start-up log.
std::string Describe(const CostParams& params);

}  // namespace tally::routing
