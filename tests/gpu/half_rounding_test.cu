// float64 rounded to float16 and bfloat16 on the GPU (tally/rules/half.h:
// sm_90's one-instruction conversion, which the kernels' histogram edges
// use) gives the host's bits: every midpoint between neighbours and the
// doubles on either side of it, both signs, the overflow boundary,
// underflow, infinities and random finite doubles over the whole range.
// The host's rounding is checked against the definition in
// tests/unit/half_rules_test.cc.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tally/kernels/cuda_error.h"
#include "tally/rules/half.h"
#include "tests/gpu/gpu_test_util.h"

namespace tally::rules {
namespace {

template <typename H>
__global__ void RoundOnDevice(const double* in, std::uint16_t* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = H(in[i]).bits;
}

double DoubleOf(std::uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

// The doubles whose rounding decides every result: each neighbouring pair's
// midpoint and the doubles beside it, with both signs, then the limits and
// random finite doubles.
template <typename H>
std::vector<double> Inputs() {
  std::vector<double> in;
  for (std::uint32_t b = 0; b + 1 < 0x10000; ++b) {
    const float a = H::FromBits(static_cast<std::uint16_t>(b));
    const float c = H::FromBits(static_cast<std::uint16_t>(b + 1));
    if (!std::isfinite(a) || !std::isfinite(c) || std::signbit(a) || std::signbit(c)) continue;
    const double mid = static_cast<double>(a) + (static_cast<double>(c) - a) / 2;
    for (double d : {static_cast<double>(a), mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300)}) {
      in.push_back(d);
      in.push_back(-d);
    }
  }
  const double max = static_cast<float>(std::numeric_limits<H>::max());
  for (double d : {max * 1.0000001, max * 2, 1e300, 1e-300, 5e-324, 0.0, -0.0,
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()})
    in.push_back(d);
  auto& rng = testing::Rng();
  for (int i = 0; i < 1 << 20; ++i) {
    const double d = DoubleOf(rng());
    if (std::isfinite(d)) in.push_back(d);
  }
  return in;
}

template <typename H>
void CheckDeviceRoundsAsTheHost() {
  const std::vector<double> in = Inputs<H>();
  const int n = static_cast<int>(in.size());
  double* d_in = nullptr;
  std::uint16_t* d_out = nullptr;
  CUDA_OK(cudaMalloc(&d_in, in.size() * sizeof(double)));
  CUDA_OK(cudaMalloc(&d_out, in.size() * sizeof(std::uint16_t)));
  CUDA_OK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(double), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_out, 0xA5, in.size() * sizeof(std::uint16_t)));  // poisoned
  RoundOnDevice<H><<<264, 256>>>(d_in, d_out, n);
  CUDA_OK(cudaGetLastError());
  std::vector<std::uint16_t> got(in.size());
  CUDA_OK(cudaMemcpy(got.data(), d_out, got.size() * sizeof(std::uint16_t), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d_in));
  CUDA_OK(cudaFree(d_out));
  int wrong = 0;
  for (int i = 0; i < n && wrong < 10; ++i) {
    const std::uint16_t want = H(in[i]).bits;
    if (got[i] != want) {
      ++wrong;
      ADD_FAILURE() << std::hexfloat << in[i] << ": device 0x" << std::hex << got[i] << ", host 0x" << want;
    }
  }
  EXPECT_GT(n, 500000);
}

TEST(HalfRoundingGpu, Float64ToFloat16GivesTheHostsBits) {
  TALLY_REQUIRE_GPU("float16 rounding on the device");
  CheckDeviceRoundsAsTheHost<Float16>();
}

TEST(HalfRoundingGpu, Float64ToBFloat16GivesTheHostsBits) {
  TALLY_REQUIRE_GPU("bfloat16 rounding on the device");
  CheckDeviceRoundsAsTheHost<BFloat16>();
}

}  // namespace
}  // namespace tally::rules
