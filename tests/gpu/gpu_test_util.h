// What the kernel-level GPU tests share: skipping without a device, the
// reduced sizes for compute-sanitizer, one seeded generator whose seed is
// printed (a failure can be replayed), random inputs over each dtype's
// range, and the tolerance check.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "tally/kernels/cuda_error.h"
#include "tally/rules/dtype.h"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << ::tally::cuda::LastErrorWhere()

// Skips the test, naming what was skipped, on a machine with no CUDA device.
#define TALLY_REQUIRE_GPU(what) \
  if (!::tally::testing::HaveGpu()) GTEST_SKIP() << "no CUDA device: " << what << " skipped"

namespace tally::testing {

inline bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// TALLY_GPU_TEST_SMALL=1 drops the largest sizes (for compute-sanitizer).
inline bool Small() {
  const char* s = std::getenv("TALLY_GPU_TEST_SMALL");
  return s != nullptr && s[0] == '1';
}

inline std::mt19937_64& Rng() {
  static std::mt19937_64 rng([] {
    const std::uint64_t seed = std::random_device{}();
    std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
    return seed;
  }());
  return rng;
}

template <rules::DType D>
using V = typename rules::Traits<D>::value;

// Random values spread over the dtype's range (floats: [-1000, 1000]; bool:
// bytes of 0 and 1).
template <rules::DType D>
std::vector<V<D>> Random(std::uint64_t n) {
  using T = V<D>;
  std::vector<T> x(n);
  auto& rng = Rng();
  if constexpr (D == rules::DType::kBool) {
    for (auto& v : x) v = static_cast<T>(rng() & 1);
  } else if constexpr (rules::IsFloat(D)) {
    std::uniform_real_distribution<double> u(-1000.0, 1000.0);
    for (auto& v : x) v = static_cast<T>(u(rng));
  } else {
    using W = std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>;
    std::uniform_int_distribution<W> u(std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max());
    for (auto& v : x) v = static_cast<T>(u(rng));
  }
  return x;
}

// Within `tol` of the reference; a NaN or infinite reference is matched exactly.
inline bool Close(long double got, long double want, long double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol;
}

template <typename F>
void ForEachDType(F&& f) {
  for (rules::DType d : rules::kAllDTypes) rules::VisitDType(d, [&](auto c) { f(c); });
}

}  // namespace tally::testing
