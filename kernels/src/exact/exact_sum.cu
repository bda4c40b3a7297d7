// The exact float sum pass (ResultLayout::exact_sum / nan_exact_sum): float32
// and float64 whole arrays, each element added exactly, so the answer is the
// same whatever the chunking, the GPU or the backend (rules/exact_sum.h).
// Measured in tally-exact-sum-bench (docs/performance.md, "Exact float sums
// on the GPU"): three float64 levels per thread, each taking the error of
// the one above by TwoSum, the last level's error into the block's
// fixed-point digits in shared memory; the levels join the digits at the
// end, the block's digits the state's, all by integer atomics (exact, so
// their order does not matter). Infinities and NaNs are counted apart.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "exact/exact_dispatch.h"
#include "tally/kernels/cuda_error.h"
#include "tally/rules/exact_sum.h"

namespace tally::kernels::detail {
namespace {

using rules::ExactSum;

constexpr int kThreads = 256;
constexpr int kLevels = 3;
constexpr int kDigits = ExactSum::kDigits;

__device__ __forceinline__ void AtomicAddValue(unsigned long long* digits, double x) {
  ExactSum::Placed p;
  if (!ExactSum::Place(x, p)) return;
  // Two's complement: adding a negative part modulo 2^64 is signed addition.
  atomicAdd(&digits[p.first], static_cast<unsigned long long>(p.part[0]));
  atomicAdd(&digits[p.first + 1], static_cast<unsigned long long>(p.part[1]));
  atomicAdd(&digits[p.first + 2], static_cast<unsigned long long>(p.part[2]));
}

// s + x = t + e exactly (Knuth's TwoSum; the _rn intrinsics keep any FMA out).
__device__ __forceinline__ double TwoSum(double s, double x, double& t) {
  t = __dadd_rn(s, x);
  const double bv = __dsub_rn(t, s);
  const double av = __dsub_rn(t, bv);
  return __dadd_rn(__dsub_rn(s, av), __dsub_rn(x, bv));
}

struct ThreadSum {
  double level[kLevels] = {0.0, 0.0, 0.0};
  unsigned long long nan = 0, positive_inf = 0, negative_inf = 0;
  bool other = false;  // an element other than -0.0
};

template <bool kSkipNan, typename T>
__device__ __forceinline__ void Add(T v, ThreadSum& t, unsigned long long* block_digits) {
  const double x = static_cast<double>(v);
  const std::uint64_t bits = static_cast<std::uint64_t>(__double_as_longlong(x));
  if (((bits >> 52) & 0x7ff) == 0x7ff) {  // an infinity or a NaN: counted, not added
    if ((bits & ((std::uint64_t{1} << 52) - 1)) != 0) {
      ++t.nan;  // nansum skips it, but its count is nansum's count's complement
      if constexpr (kSkipNan) return;
    } else if ((bits >> 63) != 0) {
      ++t.negative_inf;
    } else {
      ++t.positive_inf;
    }
    t.other = true;
    return;
  }
  t.other = t.other || bits != 0x8000000000000000u;
  double e = x;
#pragma unroll
  for (int k = 0; k < kLevels; ++k) {
    double s;
    e = TwoSum(t.level[k], e, s);
    t.level[k] = s;
    if (e == 0.0) return;
  }
  AtomicAddValue(block_digits, e);
}

// state: kDigits digits, then NaN, +inf and -inf counts and the "other than
// -0.0" flag, all unsigned long long.
template <bool kSkipNan, typename T>
__global__ void __launch_bounds__(kThreads) ExactSumKernel(const T* x, std::uint64_t n, unsigned long long* state) {
  __shared__ unsigned long long block_digits[kDigits];
  for (int k = threadIdx.x; k < kDigits; k += blockDim.x) block_digits[k] = 0;
  __syncthreads();
  ThreadSum t;
  using V = std::conditional_t<sizeof(T) == 4, float4, double2>;
  constexpr int kPer = sizeof(V) / sizeof(T);
  const bool aligned = reinterpret_cast<std::uintptr_t>(x) % sizeof(V) == 0;
  const std::uint64_t vectors = aligned ? n / kPer : 0;
  const V* xv = reinterpret_cast<const V*>(x);
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    V a[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = __ldcs(xv + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const T* e = reinterpret_cast<const T*>(&a[u]);
#pragma unroll
      for (int j = 0; j < kPer; ++j) Add<kSkipNan>(e[j], t, block_digits);
    }
  }
  for (; i < vectors; i += stride) {
    const V a = __ldcs(xv + i);
    const T* e = reinterpret_cast<const T*>(&a);
#pragma unroll
    for (int j = 0; j < kPer; ++j) Add<kSkipNan>(e[j], t, block_digits);
  }
  for (std::uint64_t k = vectors * kPer + static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    Add<kSkipNan>(x[k], t, block_digits);
  }
#pragma unroll
  for (int k = 0; k < kLevels; ++k) AtomicAddValue(block_digits, t.level[k]);
  if (t.nan != 0) atomicAdd(&state[kDigits], t.nan);
  if (t.positive_inf != 0) atomicAdd(&state[kDigits + 1], t.positive_inf);
  if (t.negative_inf != 0) atomicAdd(&state[kDigits + 2], t.negative_inf);
  const int other = __syncthreads_or(t.other ? 1 : 0);  // also orders the shared atomics before the reads
  if (threadIdx.x == 0 && other != 0) atomicOr(&state[kDigits + 3], 1ull);
  for (int k = threadIdx.x; k < kDigits; k += blockDim.x) {
    if (block_digits[k] != 0) atomicAdd(&state[k], block_digits[k]);
  }
}

// Moves each digit's excess over 32 bits into the next (rules::ExactSum's
// Carry), so the digits can take further launches without overflowing:
// each launch adds below 2^52 to a digit, a carried digit holds below 2^32.
__global__ void CarryKernel(unsigned long long* state) {
  auto* digit = reinterpret_cast<long long*>(state);
  for (int k = 0; k + 1 < kDigits; ++k) {
    const long long up = digit[k] >> 32;
    digit[k] = static_cast<long long>(static_cast<unsigned long long>(digit[k]) & 0xffffffffu);
    digit[k + 1] += up;
  }
}

template <typename T>
cudaError_t Launch(const void* chunk, std::uint64_t n, bool skip_nan, void* state, const DeviceInfo& dev,
                   cudaStream_t stream) {
  auto* s = static_cast<unsigned long long*>(state);
  if (n > 0) {
    // 4 blocks per SM measured fastest (8 gave 0.77-0.87x of it).
    const unsigned blocks = static_cast<unsigned>(4 * dev.sms);
    if (skip_nan) {
      ExactSumKernel<true, T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(chunk), n, s);
    } else {
      ExactSumKernel<false, T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(chunk), n, s);
    }
    TALLY_CUDA_TRY(cudaGetLastError());
  }
  CarryKernel<<<1, 1, 0, stream>>>(s);
  TALLY_CUDA_TRY(cudaGetLastError());
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchExactSum(const AggregatePlan& plan, const void* chunk, std::uint64_t n, std::uint64_t offset,
                           bool skip_nan, void* state, const DeviceInfo& dev, cudaStream_t stream) {
  if (offset == 0) TALLY_CUDA_TRY(cudaMemsetAsync(state, 0, kExactSumStateBytes, stream));
  if (plan.dtype == rules::DType::kFloat32) return Launch<float>(chunk, n, skip_nan, state, dev, stream);
  return Launch<double>(chunk, n, skip_nan, state, dev, stream);
}

}  // namespace tally::kernels::detail
