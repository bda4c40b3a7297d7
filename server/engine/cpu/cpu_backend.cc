// The CPU backend: a thread pool shared by all requests, and Reductions
// (reduction.cc) that use it.
#include "server/engine/cpu/cpu_backend.h"

#include <fstream>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/core/validate.h"
#include "server/engine/cpu/host_resident.h"
#include "server/engine/cpu/reduction.h"
#include "server/engine/cpu/thread_pool.h"

namespace tally {

std::string HostCpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "unknown CPU";
}

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads)
      : pool_(threads),
        device_(absl::StrCat(HostCpuModel(), " (", threads, threads == 1 ? " thread)" : " threads)")) {}

  std::string name() const override { return "cpu"; }
  std::string device() const override { return device_; }

  // Every op, layout and size, over host bytes.
  absl::Status Runs(const AggregationPlan& plan, const Placement& from) const override {
    (void)plan;
    if (!from.host()) return absl::UnimplementedError(absl::StrCat("the cpu backend cannot read ", from.Describe()));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan,
                                                    const Placement& from) override {
    // The front end has validated the plan, but a backend driven directly
    // (tests, benchmarks) must not trust its caller.
    if (absl::Status s = ValidatePlan(plan, RequestLimits{}); !s.ok()) return s;
    if (!from.host()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the cpu backend cannot read ", from.Describe(), "."));
    }
    return cpu::MakeReduction(plan, &pool_, device_);
  }

  std::vector<ResidentPlace> ResidentPlaces() const override { return {{0, "host"}}; }

  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(std::uint64_t bytes,
                                                                   int place) override {
    if (place != 0) return absl::InvalidArgumentError("the cpu backend has one resident place, 0.");
    return cpu::AllocateHostResident(bytes);
  }

  cpu::ThreadPool* HostWorkers() override { return &pool_; }

 private:
  cpu::ThreadPool pool_;
  const std::string device_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  int threads = options.threads;
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace tally
