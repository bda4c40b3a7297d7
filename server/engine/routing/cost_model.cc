#include "server/engine/routing/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/engine/cpu/tuning.h"
#include "tally/rules/validity.h"

namespace tally::routing {

const char* Name(Path path) { return path == Path::kCpu ? "cpu" : "gpu"; }

Estimate EstimateOf(const CostModel& model, const AggregationPlan& plan, const Load& load) {
  return Estimate{model.CpuSeconds(plan, load), model.GpuSeconds(plan, load)};
}

Path Choose(const CostModel& model, const AggregationPlan& plan, const Load& load) {
  return EstimateOf(model, plan, load).path();
}

namespace {

// A histogram's added cost per element: its bins' counters leave the L1
// cache above a few thousand bins, so the cost grows with log2(bins).
double HistogramNs(const CostParams& p, std::uint32_t bins) {
  const double lo = std::log2(256.0), hi = std::log2(65536.0);
  const double x = std::clamp(std::log2(std::max<double>(bins, 1.0)), lo, hi);
  return p.cpu_hist_small_ns + (p.cpu_hist_large_ns - p.cpu_hist_small_ns) * (x - lo) / (hi - lo);
}

}  // namespace

double MeasuredCostModel::CpuWork(const AggregationPlan& plan) const {
  double ns = p_.cpu_read_ns;
  for (const OpSpec& op : plan.ops) {
    ns += op.kind == OpKind::kHistogram ? HistogramNs(p_, op.histogram.bins)
                                        : p_.cpu_op_ns[static_cast<std::size_t>(op.kind)];
  }
  if (plan.array.masked()) ns += p_.cpu_mask_ns;
  return static_cast<double>(plan.array.length) * ns * 1e-9;
}

double MeasuredCostModel::CpuSeconds(const AggregationPlan& plan, const Load& load) const {
  // The CPU backend splits an array into chunks (rows into groups of about
  // a chunk) and hands them to the threads that are idle: under load, to
  // those the requests in flight leave over, at least its own.
  const std::uint64_t chunk = cpu::CpuPolicy::kChunkElements;
  const std::uint64_t pieces = std::max<std::uint64_t>(1, (plan.array.length + chunk - 1) / chunk);
  const double threads = static_cast<double>(std::max(p_.cpu_threads, 1));
  const double free = std::max(1.0, threads - static_cast<double>(std::max(load.busy_threads, 0)));
  const double parallel = std::min<double>(free, static_cast<double>(pieces));
  const double read = static_cast<double>(plan.array.bytes()) / (std::max(p_.cpu_gb_per_s, 1e-3) * 1e9);
  return p_.cpu_fixed_us * 1e-6 + load.cpu_queued_seconds / threads + std::max(CpuWork(plan) / parallel, read);
}

double MeasuredCostModel::GpuSeconds(const AggregationPlan& plan, const Load& load) const {
  // This request's bytes at one request's rate, behind the queued bytes,
  // which the lanes drain together.
  const std::uint64_t mask_bytes = plan.array.masked() ? rules::ValidityBytes(plan.array.length) : 0;
  const double own =
      static_cast<double>(plan.array.bytes() + mask_bytes) / (std::max(p_.gpu_gb_per_s, 1e-3) * 1e9);
  const double queued = static_cast<double>(load.gpu_queued_bytes) / (std::max(p_.gpu_all_gb_per_s, 1e-3) * 1e9);
  return p_.gpu_fixed_us * 1e-6 + own + queued;
}

namespace {

// The rates --route_model sets by name; `positive`: a rate something is
// divided by, so 0 is refused.
struct RateKey {
  const char* name;
  double CostParams::*field;
  bool positive;
};
constexpr RateKey kRateKeys[] = {
    {"cpu_fixed_us", &CostParams::cpu_fixed_us, false},
    {"cpu_read_ns", &CostParams::cpu_read_ns, false},
    {"cpu_gb_per_s", &CostParams::cpu_gb_per_s, true},
    {"cpu_hist_small_ns", &CostParams::cpu_hist_small_ns, false},
    {"cpu_hist_large_ns", &CostParams::cpu_hist_large_ns, false},
    {"cpu_mask_ns", &CostParams::cpu_mask_ns, false},
    {"gpu_fixed_us", &CostParams::gpu_fixed_us, false},
    {"gpu_gb_per_s", &CostParams::gpu_gb_per_s, true},
    {"gpu_all_gb_per_s", &CostParams::gpu_all_gb_per_s, true},
};

}  // namespace

absl::Status ApplyOverrides(absl::string_view text, CostParams* params) {
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    double value = 0.0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &value) || !std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--route_model: '", item, "' is not KEY=VALUE with a non-negative number."));
    }
    const absl::string_view key = kv[0];
    const RateKey* rate = std::find_if(std::begin(kRateKeys), std::end(kRateKeys),
                                       [&](const RateKey& r) { return key == r.name; });
    if (rate != std::end(kRateKeys)) {
      if (rate->positive && value == 0) {
        return absl::InvalidArgumentError(absl::StrCat("--route_model: ", key, " must be positive."));
      }
      params->*(rate->field) = value;
    } else if (key == "cpu_threads") {
      if (value < 1 || value != std::floor(value)) {
        return absl::InvalidArgumentError("--route_model: cpu_threads must be a whole number of at least 1.");
      }
      params->cpu_threads = static_cast<int>(value);
    } else if (absl::ConsumePrefix(&kv[0], "cpu_ns.")) {
      int found = -1;
      for (int k = 0; k < rules::kNumOpKinds; ++k) {
        if (kv[0] == rules::Name(static_cast<OpKind>(k))) found = k;
      }
      if (found < 0 || static_cast<OpKind>(found) == OpKind::kHistogram) {
        return absl::InvalidArgumentError(absl::StrCat("--route_model: '", key,
                                                       "' names no op (histograms: cpu_hist_small_ns, "
                                                       "cpu_hist_large_ns)."));
      }
      params->cpu_op_ns[static_cast<std::size_t>(found)] = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--route_model: unknown key '", key, "'."));
    }
  }
  return absl::OkStatus();
}

std::string Describe(const CostParams& p) {
  std::vector<std::string> ops;
  for (int k = 0; k < rules::kNumOpKinds; ++k) {
    const double ns = p.cpu_op_ns[static_cast<std::size_t>(k)];
    if (ns > 0) ops.push_back(absl::StrFormat("cpu_ns.%s=%.3f,", rules::Name(static_cast<OpKind>(k)), ns));
  }
  return absl::StrFormat(
      "cpu_threads=%d,cpu_fixed_us=%.1f,cpu_read_ns=%.3f,cpu_gb_per_s=%.1f,%scpu_hist_small_ns=%.3f,"
      "cpu_hist_large_ns=%.3f,cpu_mask_ns=%.3f,gpu_fixed_us=%.1f,gpu_gb_per_s=%.2f,gpu_all_gb_per_s=%.2f",
      p.cpu_threads, p.cpu_fixed_us, p.cpu_read_ns, p.cpu_gb_per_s, absl::StrJoin(ops, ""), p.cpu_hist_small_ns,
      p.cpu_hist_large_ns, p.cpu_mask_ns, p.gpu_fixed_us, p.gpu_gb_per_s, p.gpu_all_gb_per_s);
}

}  // namespace tally::routing
