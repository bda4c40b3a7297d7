// The CPU backend: every op for every dtype, fused into one pass over the
// data, multi-threaded and bitwise deterministic. It is the default without a
// GPU and the reference the CUDA kernels are tested against.
#pragma once

#include <memory>

#include "server/engine/backend.h"

namespace tally {

struct CpuBackendOptions {
  int threads = 0;  // worker threads per request; 0: one per hardware thread
};

// name() is "cpu"; device() is the CPU model and the thread count.
std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

}  // namespace tally
