// The CPU backend: every op for every dtype, fused into one pass over the
// data, multi-threaded and bitwise deterministic. It is the default without a
// GPU and the reference the CUDA kernels are tested against.
#pragma once

#include <memory>
#include <string>

#include "server/engine/backend.h"

namespace tally {

struct CpuBackendOptions {
  int threads = 0;  // worker threads per request; 0: one per hardware thread
};

// The host's CPU model, from /proc/cpuinfo ("unknown CPU" without it).
std::string HostCpuModel();

// name() is "cpu"; device() is the CPU model and the thread count.
std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

}  // namespace tally
