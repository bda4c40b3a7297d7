// The CUDA backend: every chosen GPU's lanes behind the Backend interface.
// It declares what the GPU runs (Backend::Runs) and runs only that; the
// router (server/engine/routing/router.h) puts it beside the cpu backend
// and chooses between them. Built only when nvcc is present
// (TALLY_HAVE_CUDA_BACKEND).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/engine/backend.h"
#include "server/engine/backend_factory.h"

namespace tally {

// name() is "cuda"; device() is e.g. "NVIDIA H100 80GB HBM3 x2 (0,1)".
// Fails when no chosen GPU is usable or the options do not fit.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(
    const BackendOptions& options);

// CUDA devices this process can see (0 when there is no driver or device).
int VisibleCudaDevices();

}  // namespace tally
