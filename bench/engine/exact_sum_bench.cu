// tally-exact-sum-bench: can the GPU sum floats exactly at memory speed?
// The design question behind exact, order-free float sums
// (rules/exact_sum.h, docs/architecture.md "Exact float sums"): a pass
// whose answer is the exact sum, against a plain float64-accumulating sum
// pass with the same loads and a plain read of the same bytes, in one run.
//
// The exact pass: each thread keeps two or three float64 levels and adds
// each element to the first with TwoSum (s + x = t + e exactly); e is 0
// whenever x's last bit is not below s's, which is almost every float32
// element. A non-zero e goes to the next level by TwoSum as well, and only
// the last level's error (rarely non-zero) goes straight into the block's
// fixed-point digits in shared memory. The levels plus the digits are the
// exact sum at every step. At the end each thread adds its levels to the
// block's digits, and each block its digits to the global ones, all with
// integer atomics: the digits are exact, so the order of the atomics does
// not matter. The host reads the digits into a rules::ExactSum and rounds
// once; the check is a host ExactSum over the same elements, bit for bit,
// for both level counts.
//
// usage: tally-exact-sum-bench [log2 elements, default 28] [repetitions, default 10]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "exact/exact_levels.cuh"
#include "tally/rules/exact_sum.h"

namespace {

using tally::rules::ExactSum;

#define CHECK(call)                                                                      \
  do {                                                                                   \
    const cudaError_t err_ = (call);                                                     \
    if (err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

constexpr int kThreads = 256;
constexpr int kDigits = ExactSum::kDigits;

// The exact pass's own pieces (kernels/src/exact/exact_levels.cuh): a
// value's three parts into the digits by integer atomics, and TwoSum.
__device__ __forceinline__ void AtomicAddDigits(unsigned long long* digits, double x) {
  tally::kernels::detail::exact::AtomicAddValue(digits, x);
}
using tally::kernels::detail::exact::TwoSum;

// kLevels float64s per thread (2 or 3): each level takes the error of the
// one above by TwoSum, and the last level's error goes into the digits.
template <int kLevels, typename T>
__device__ __forceinline__ void AddExact(T v, double (&level)[3], unsigned long long* block_digits) {
  double e = static_cast<double>(v);
#pragma unroll
  for (int k = 0; k < kLevels; ++k) {
    double t;
    e = TwoSum(level[k], e, t);
    level[k] = t;
    if (e == 0.0) return;
  }
  AtomicAddDigits(block_digits, e);
}

// Finite elements only (the bench's data): an infinity or NaN would need
// counting apart, as ExactSum::Add does.
template <int kLevels, typename T>
__global__ void __launch_bounds__(kThreads) ExactSumKernel(const T* x, std::size_t n, unsigned long long* digits) {
  __shared__ unsigned long long block_digits[kDigits];
  for (int k = threadIdx.x; k < kDigits; k += blockDim.x) block_digits[k] = 0;
  __syncthreads();
  double level[3] = {0.0, 0.0, 0.0};
  using V = typename std::conditional<sizeof(T) == 4, float4, double2>::type;
  constexpr int kPer = sizeof(V) / sizeof(T);
  const std::size_t vectors = n / kPer;
  const V* xv = reinterpret_cast<const V*>(x);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    V a[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = __ldcs(xv + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const T* e = reinterpret_cast<const T*>(&a[u]);
#pragma unroll
      for (int j = 0; j < kPer; ++j) AddExact<kLevels>(e[j], level, block_digits);
    }
  }
  for (; i < vectors; i += stride) {
    const V a = __ldcs(xv + i);
    const T* e = reinterpret_cast<const T*>(&a);
#pragma unroll
    for (int j = 0; j < kPer; ++j) AddExact<kLevels>(e[j], level, block_digits);
  }
  for (std::size_t t = vectors * kPer + blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
    AddExact<kLevels>(x[t], level, block_digits);
  }
  for (int k = 0; k < kLevels; ++k) AtomicAddDigits(block_digits, level[k]);
  __syncthreads();
  for (int k = threadIdx.x; k < kDigits; k += blockDim.x) {
    if (block_digits[k] != 0) atomicAdd(&digits[k], block_digits[k]);
  }
}

// The same loads, a float64 sum per thread, a block sum, one atomic per
// block: what an inexact sum costs on the same pass.
template <typename T>
__global__ void __launch_bounds__(kThreads) PlainSumKernel(const T* x, std::size_t n, double* out) {
  __shared__ double partial[kThreads / 32];
  double s = 0.0;
  using V = typename std::conditional<sizeof(T) == 4, float4, double2>::type;
  constexpr int kPer = sizeof(V) / sizeof(T);
  const std::size_t vectors = n / kPer;
  const V* xv = reinterpret_cast<const V*>(x);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    V a[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = __ldcs(xv + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const T* e = reinterpret_cast<const T*>(&a[u]);
#pragma unroll
      for (int j = 0; j < kPer; ++j) s += static_cast<double>(e[j]);
    }
  }
  for (; i < vectors; i += stride) {
    const V a = __ldcs(xv + i);
    const T* e = reinterpret_cast<const T*>(&a);
#pragma unroll
    for (int j = 0; j < kPer; ++j) s += static_cast<double>(e[j]);
  }
  for (std::size_t t = vectors * kPer + blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) s += x[t];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double b = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) b += partial[w];
    atomicAdd(out, b);
  }
}

// A read of every byte and nothing else: the ceiling.
__global__ void __launch_bounds__(kThreads) ReadKernel(const float4* x, std::size_t vectors, float* sink) {
  float acc = 0.0f;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    const float4 a = __ldcs(x + i);
    acc += a.x + a.y + a.z + a.w;
  }
  if (acc == 12345.678f) *sink = acc;  // keeps the loads
}

template <typename F>
double BestMs(int reps, F&& launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  launch();  // warm-up
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return best;
}

template <typename T>
void Run(const char* name, const char* data, int log2n, int reps, int blocks, float* sink) {
  const std::size_t n = std::size_t{1} << log2n;
  std::vector<T> host(n);
  std::mt19937_64 rng(42 + log2n);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::lognormal_distribution<double> wide(0.0, 8.0);
  const bool lognormal = std::strcmp(data, "lognormal") == 0;
  for (T& v : host) v = static_cast<T>(lognormal ? ((rng() & 1) ? 1 : -1) * wide(rng) : normal(rng));
  for (T& v : host) {
    if (!std::isfinite(static_cast<double>(v))) v = T(1);
  }
  ExactSum reference;
  for (const T& v : host) reference.Add(static_cast<double>(v));
  T* dev = nullptr;
  unsigned long long* digits = nullptr;
  double* plain = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(T)));
  CHECK(cudaMalloc(&digits, kDigits * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&plain, sizeof(double)));
  CHECK(cudaMemcpy(dev, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  const double bytes = static_cast<double>(n * sizeof(T));
  const double read_ms = BestMs(reps, [&] {
    ReadKernel<<<blocks, kThreads>>>(reinterpret_cast<const float4*>(dev), n * sizeof(T) / 16, sink);
  });
  const double plain_ms = BestMs(reps, [&] {
    CHECK(cudaMemsetAsync(plain, 0, sizeof(double)));
    PlainSumKernel<T><<<blocks, kThreads>>>(dev, n, plain);
  });
  // Two float64 levels per thread, then three; the check reads the last.
  const double exact2_ms = BestMs(reps, [&] {
    CHECK(cudaMemsetAsync(digits, 0, kDigits * sizeof(unsigned long long)));
    ExactSumKernel<2, T><<<blocks, kThreads>>>(dev, n, digits);
  });
  std::vector<unsigned long long> got2(kDigits);
  CHECK(cudaMemcpy(got2.data(), digits, kDigits * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  const double exact_ms = BestMs(reps, [&] {
    CHECK(cudaMemsetAsync(digits, 0, kDigits * sizeof(unsigned long long)));
    ExactSumKernel<3, T><<<blocks, kThreads>>>(dev, n, digits);
  });
  // The last repetition's digits: every run must give the host's bits.
  std::vector<unsigned long long> got(kDigits);
  CHECK(cudaMemcpy(got.data(), digits, kDigits * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::vector<std::int64_t> as_signed(kDigits);
  for (int k = 0; k < kDigits; ++k) as_signed[k] = static_cast<std::int64_t>(got[k]);
  ExactSum from_gpu;
  from_gpu.AddDigits(as_signed.data(), n, true);
  for (int k = 0; k < kDigits; ++k) as_signed[k] = static_cast<std::int64_t>(got2[k]);
  ExactSum from_gpu2;
  from_gpu2.AddDigits(as_signed.data(), n, true);
  const double want = reference.ToDouble();
  const double have = from_gpu.ToDouble();
  double plain_value = 0;
  CHECK(cudaMemcpy(&plain_value, plain, sizeof(double), cudaMemcpyDeviceToHost));
  const double have2 = from_gpu2.ToDouble();
  const bool same = std::memcmp(&want, &have, sizeof want) == 0 && std::memcmp(&want, &have2, sizeof want) == 0;
  std::printf("%-8s %-9s 2^%d: read %7.1f GB/s | plain float64 sum %7.1f GB/s (%.3f ms) | exact, 2 levels %7.1f GB/s "
              "(%.3fx plain) | 3 levels %7.1f GB/s (%.3fx plain) | exact %s host's bits (%.17g; plain pass %.17g)\n",
              name, data, log2n, bytes / read_ms / 1e6, bytes / plain_ms / 1e6, plain_ms, bytes / exact2_ms / 1e6,
              plain_ms / exact2_ms, bytes / exact_ms / 1e6, plain_ms / exact_ms, same ? "==" : "!=", have,
              plain_value);
  CHECK(cudaFree(dev));
  CHECK(cudaFree(digits));
  CHECK(cudaFree(plain));
  if (!same) std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const int log2n = argc > 1 ? std::atoi(argv[1]) : 28;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("%s, %d SMs\n", prop.name, sms);
  float* sink = nullptr;
  CHECK(cudaMalloc(&sink, sizeof(float)));
  for (const int per_sm : {4, 8}) {
    std::printf("grid: %d blocks of %d threads\n", per_sm * sms, kThreads);
    for (const char* data : {"normal", "lognormal"}) {
      Run<float>("float32", data, log2n, reps, per_sm * sms, sink);
      Run<double>("float64", data, log2n - 1, reps, per_sm * sms, sink);
    }
  }
  CHECK(cudaFree(sink));
  return 0;
}
