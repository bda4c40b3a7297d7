// tally-region-bench [GiB, default 4]
// A host shared-memory region through the cuda backend, in-process (no
// network), against the floor it cannot beat, both measured in this run:
// 1. pinned host-to-device bandwidth: cudaMemcpy from cudaMallocHost memory
//    (median of 5 copies of 1 GiB), and from the region's own registered
//    pages;
// 2. the region's registration (map + cudaHostRegister), once;
// 3. sum+max+hist:256 over the whole region (median of 5), GB/s and its
//    ratio to (1);
// 4. the same bytes as pageable memory (what a gRPC request's bytes are):
//    GB/s, and the answers compared: bitwise equal (same chunk cuts).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/engine/run_query.h"
#include "server/engine/backend_factory.h"
#include "server/engine/regions/region_registry.h"
#include "tally/client/shared_memory.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tally-region-bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorName(e));
}

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median GB/s of copies of `bytes` from `src` to `dst`.
double CopyRate(void* dst, const void* src, std::size_t bytes) {
  std::vector<double> s;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    Check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    s.push_back(Seconds(t0));
  }
  return bytes / Median(s) / 1e9;
}

tally::AggregationResult Query(tally::Backend& b, const tally::AggregationPlan& plan, const tally::Extent& e) {
  absl::StatusOr<tally::AggregationResult> res = tally::bench::RunQuery(b, plan, e);
  if (!res.ok()) Die("query: " + res.status().ToString());
  return std::move(*res);
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 4.0;
  const std::uint64_t n = static_cast<std::uint64_t>(gib * (1ull << 30)) / 4;
  const std::size_t bytes = n * 4;
  tally::BackendOptions o;
  o.kind = "cuda";
  auto made = tally::MakeBackend(o);
  if (!made.ok()) Die(made.status().ToString());
  tally::Backend& cuda = **made;
  std::printf("%s | %.2f GiB float32 in a host region\n", cuda.device().c_str(), gib);

  auto object = tally::client::SharedMemoryObject::Create(tally::client::SharedMemoryObject::UniqueName("bench"), bytes);
  if (!object.ok()) Die(object.status().ToString());
  auto* x = reinterpret_cast<float*>((*object)->bytes().data());
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.2f, 1.2f);
  for (std::uint64_t i = 0; i < n; ++i) x[i] = dist(rng);

  // 1. The floor: pinned H2D.
  constexpr std::size_t kCopy = std::size_t{1} << 30;
  void *pinned = nullptr, *device = nullptr;
  Check(cudaMallocHost(&pinned, kCopy), "cudaMallocHost");
  Check(cudaMalloc(&device, kCopy), "cudaMalloc");
  std::memset(pinned, 1, kCopy);
  const double h2d = CopyRate(device, pinned, kCopy);

  // 2. Registration.
  tally::RegionRegistry regions(cuda, 0, nullptr);
  const auto t0 = Clock::now();
  auto info = regions.RegisterHost("bench", (*object)->name(), 0, bytes);
  if (!info.ok()) Die("register: " + info.status().ToString());
  const double register_s = Seconds(t0);
  auto region = regions.Acquire("bench");
  if (!region.ok()) Die(region.status().ToString());
  const tally::Extent whole = (*region)->extent();
  const double h2d_region = CopyRate(device, whole.bytes.data(), std::min(kCopy, bytes));
  std::printf("pinned H2D (cudaMallocHost, 1 GiB): %.2f GB/s; from the registered region: %.2f GB/s\n", h2d, h2d_region);
  std::printf("registration (map + cudaHostRegister of %.2f GiB, once): %.3f s; place %s\n", gib, register_s,
              info->place.c_str());

  // 3. The region through the engine.
  const tally::AggregationPlan plan{
      .array = {.dtype = tally::rules::DType::kFloat32, .length = n},
      .ops = {{.kind = tally::rules::OpKind::kSum}, {.kind = tally::rules::OpKind::kMax},
              {.kind = tally::rules::OpKind::kHistogram, .histogram = {256, -1.0, 1.0}}}};
  tally::AggregationResult from_region = Query(cuda, plan, whole);
  std::vector<double> s;
  for (int i = 0; i < 5; ++i) {
    const auto q0 = Clock::now();
    tally::AggregationResult again = Query(cuda, plan, whole);
    s.push_back(Seconds(q0));
    if (again.values != from_region.values) Die("two queries of the region differ");
  }
  const double region_gbs = bytes / Median(s) / 1e9;
  std::printf("region sum+max+hist:256: median %.1f ms, %.2f GB/s = %.3fx pinned H2D\n", Median(s) * 1e3, region_gbs,
              region_gbs / h2d);

  // 4. The same bytes as pageable memory.
  const tally::Extent pageable = tally::Extent::PageableHost(whole.bytes);
  std::vector<double> p;
  tally::AggregationResult from_pageable;
  for (int i = 0; i < 3; ++i) {
    const auto q0 = Clock::now();
    from_pageable = Query(cuda, plan, pageable);
    p.push_back(Seconds(q0));
  }
  std::printf("same bytes as pageable memory (staged): %.2f GB/s; answers %s\n", bytes / Median(p) / 1e9,
              from_pageable.values == from_region.values ? "bitwise equal" : "DIFFER");
  cudaFreeHost(pinned);
  cudaFree(device);
  return from_pageable.values == from_region.values ? 0 : 1;
}
