#include "server/engine/backend_factory.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/functions/function_router.h"
#include "server/engine/null/null_backend.h"
#include "server/engine/routing/router.h"
#include "spdlog/spdlog.h"

#ifdef TALLY_HAVE_CUDA_BACKEND
#include "server/engine/cuda/cuda_backend.h"
#endif

namespace tally {
namespace {

bool CudaBuilt() {
#ifdef TALLY_HAVE_CUDA_BACKEND
  return true;
#else
  return false;
#endif
}

// The GPUs beside the cpu backend, the router choosing between them.
absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(const BackendOptions& options) {
#ifdef TALLY_HAVE_CUDA_BACKEND
  absl::StatusOr<std::unique_ptr<Backend>> gpu = MakeCudaBackend(options);
  if (!gpu.ok()) return gpu.status();
  const int cpu_threads = options.cpu_threads > 0 ? options.cpu_threads
                                                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int gpu_lanes = std::max(1, options.streams_per_device) * static_cast<int>((*gpu)->ResidentPlaces().size());
  return routing::MakeRouter(MakeCpuBackend(CpuBackendOptions{.threads = cpu_threads}), std::move(*gpu),
                             routing::RouterOptions{.routing = options.routing,
                                                    .small_request_bytes = options.small_request_bytes,
                                                    .lane_wait = options.lane_wait,
                                                    .route_calibration = options.route_calibration,
                                                    .route_model = options.route_model,
                                                    .cpu_threads = cpu_threads,
                                                    .gpu_lanes = gpu_lanes,
                                                    .exact_sums = options.cuda_exact_sums});
#else
  (void)options;
  return absl::FailedPreconditionError(
      "--backend=cuda: this build of tally has no CUDA backend (it was built without nvcc).");
#endif
}

}  // namespace

std::vector<std::string> AvailableBackendKinds() {
  std::vector<std::string> kinds = {"auto", "cpu"};
  if (CudaBuilt()) kinds.push_back("cuda");
  kinds.push_back("null");
  return kinds;
}

namespace {

// The backend --backend names, before the functions' router wraps it.
absl::StatusOr<std::unique_ptr<Backend>> MakeChosenBackend(const BackendOptions& options) {
  if (options.kind == "cpu") return MakeCpuBackend(CpuBackendOptions{.threads = options.cpu_threads});
  if (options.kind == "null") return MakeNullBackend();
  if (options.kind == "cuda") return MakeCuda(options);
  if (options.kind == "auto") {
#ifdef TALLY_HAVE_CUDA_BACKEND
    const int gpus = VisibleCudaDevices();
    if (gpus > 0) {
      spdlog::info("backend auto: {} CUDA device(s) visible, using the cuda backend", gpus);
      return MakeCuda(options);
    }
    spdlog::info("backend auto: no CUDA device visible, using the cpu backend");
#else
    spdlog::info("backend auto: built without CUDA, using the cpu backend");
#endif
    return MakeCpuBackend(CpuBackendOptions{.threads = options.cpu_threads});
  }
  return absl::InvalidArgumentError(absl::StrCat("--backend: unknown backend '", options.kind,
                                                 "'; expected one of ",
                                                 absl::StrJoin(AvailableBackendKinds(), ", "), "."));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& options) {
  absl::StatusOr<std::unique_ptr<Backend>> chosen = MakeChosenBackend(options);
  if (!chosen.ok()) return chosen.status();
  // The functions whose state the registry keeps run above the backend,
  // on the host, for every backend alike.
  return MakeFunctionRouter(std::move(*chosen), options.max_holistic_bytes);
}

}  // namespace tally
