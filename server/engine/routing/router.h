// The router: one layer above the cpu backend and a GPU backend that decides
// which of them runs each request. The backends only declare what they run
// (Backend::Runs); every choice between them is made here:
//
//   bytes on a GPU          -> the GPU backend, or its refusal (the cpu
//                              backend cannot read them)
//   host bytes the GPU does
//   not run (Runs refuses)  -> the cpu backend
//   pinned host bytes, or
//   --routing=size          -> the cpu backend under --small_request_bytes,
//                              else a GPU lane (waiting --cuda_lane_wait_ms)
//   received bytes,
//   --routing=cost          -> where the cost model estimates the request
//                              finishes first under the present load; the
//                              GPU if a lane frees up while it still leads,
//                              else the cpu backend at once; by size where
//                              the two would not give the same bits
//                              (SameBitsOnEither)
//
// Everything else a server asks of its backend (resident memory, regions,
// the device passes, health) is the GPU backend's; the host workers are the
// cpu backend's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/engine/backend.h"

namespace tally::routing {

struct RouterOptions {
  std::string routing = "cost";  // "cost" or "size"
  std::uint64_t small_request_bytes = std::uint64_t{1} << 20;
  std::chrono::milliseconds lane_wait{2000};
  bool route_calibration = true;  // measure the cost model's rates at start
  std::string route_model;        // "key=value,..." (ApplyOverrides)
  int cpu_threads = 1;            // the cpu backend's threads
  int gpu_lanes = 1;              // lanes over every GPU in use
  // The GPU backend's --cuda_exact_sums: its float sums and every dtype's
  // means and variances are the cpu backend's bits.
  bool exact_sums = true;
};

// Whether the cpu backend and the GPU backend give `plan` the same bits, so
// that cost routing may send it to either: every op but a float prod
// (whose float64 products round in each backend's order) when the GPU's
// sums are exact; only plans without float sums, moments or products when
// they are not.
bool SameBitsOnEither(const AggregationPlan& plan, bool exact_sums);

// Fails (INVALID_ARGUMENT naming the flag) when the options do not parse;
// with --routing=cost, measures the model's rates on both backends first.
[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> MakeRouter(std::unique_ptr<Backend> cpu,
                                                                  std::unique_ptr<Backend> gpu,
                                                                  const RouterOptions& options);

}  // namespace tally::routing
