// Builds the backend the server was asked for: cpu, cuda, null, or auto
// (cuda when a GPU is present, else cpu).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/backend.h"

namespace tally {

struct BackendOptions {
  std::string kind = "auto";  // auto | cpu | cuda | null
  int cpu_threads = 0;        // 0: one per hardware thread

  // The CUDA backend's (server/engine/cuda); the others ignore them. Why
  // each default is what it is: server/engine/cuda/tuning.h.
  std::vector<int> cuda_devices;                         // empty: every visible GPU
  std::uint64_t pinned_pool_bytes = std::uint64_t{1} << 30;  // staging, all GPUs together
  std::uint64_t chunk_bytes = std::uint64_t{8} << 20;        // one H2D copy / one Accumulate
  int streams_per_device = 16;                           // lanes: concurrent requests per GPU
  std::uint64_t small_request_bytes = std::uint64_t{1} << 20;  // below: the CPU backend
  std::uint64_t max_state_bytes = std::uint64_t{16} << 20;     // per lane; above: CPU backend
  // Float sums and moments exact on the GPU too (kernels::ExactOps: a read
  // of their own beside the fused pass; off: the fused float64 sums).
  bool cuda_exact_sums = true;
  // What each GPU's stream-ordered pool keeps between requests of the
  // scratch it lends per request (group-by's order, quantile passes).
  std::uint64_t pool_keep_bytes = std::uint64_t{512} << 20;
  std::chrono::milliseconds lane_wait{2000};            // then RESOURCE_EXHAUSTED
  int staging_copy_threads = 8;                          // fill pinned staging from a message in parallel
  // Received bytes go to the CPU or a GPU: "cost" (estimated time, from a
  // start-up calibration and --route_model; server/engine/routing) or
  // "size" (under small_request_bytes to the CPU).
  std::string routing = "cost";
  bool route_calibration = true;  // measure the model's rates at start-up
  std::string route_model;        // "key=value,..." given rates (routing::ApplyOverrides)
  // Host memory to register with CUDA once, at start: the receive arena
  // (server/receive_arena.h) that gRPC's receive slices are allocated from.
  // Slices in it are copied to a GPU where they lie. Empty: none.
  std::span<std::byte> receive_arena;
  // What the functions that keep elements (quantiles, exact distinct
  // counts) may hold on the host, every request together
  // (server/engine/functions/holistic_budget.h).
  std::uint64_t max_holistic_bytes = std::uint64_t{4} << 30;
  // Testing only: "ORDINAL@SECONDS" marks that GPU lost that long after
  // start, as a sticky CUDA error would (server/engine/cuda/device_fault.h).
  std::string fault_lose_gpu;
};

// The backend kinds this build can run, for --help and error messages.
std::vector<std::string> AvailableBackendKinds();

[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& options);

}  // namespace tally
