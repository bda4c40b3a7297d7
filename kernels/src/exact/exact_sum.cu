// The exact pass over whole arrays (ResultLayout::exact_sum /
// exact_squares): an array's elements, and where asked their squares,
// each added exactly, so sums, means, sums of squares and variances are the
// same bits whatever the chunking, the GPU or the backend (rules/
// exact_sum.h, exact_moments.h; the pieces in exact_levels.cuh).
// Measured in tally-exact-sum-bench (docs/performance.md, "Exact float sums
// on the GPU"): unmasked float32 and float64 in runs of narrow groups
// (NarrowRun), the rest element by element into three float64 levels per
// thread, the last level's error into the block's fixed-point digits in
// shared memory; the levels join the digits at the end, the block's digits
// the state's, all by integer atomics (exact, so their order does not
// matter).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "exact/exact_dispatch.h"
#include "exact/exact_levels.cuh"
#include "policy.cuh"
#include "tally/kernels/cuda_error.h"
#include "tally/rules/dtype.h"

namespace tally::kernels::detail {
namespace {

using namespace exact;  // NOLINT: the pass's own pieces

constexpr int kThreads = 256;

template <bool kSquares, bool kMasked, typename T>
__global__ void __launch_bounds__(kThreads)
    ExactKernel(const T* x, std::uint64_t n, std::uint64_t offset, const std::uint32_t* validity,
                unsigned long long* sum_state, unsigned long long* squares_state) {
  __shared__ unsigned long long sum_digits[kDigits];
  __shared__ unsigned long long squares_digits[kSquares ? kDigits : 1];
  const Digits block{sum_digits, squares_digits};
  ClearBlockDigits(block, kSquares);
  __syncthreads();
  ThreadSums t;
  static_assert(16 % sizeof(T) == 0);
  constexpr int kPer = 16 / sizeof(T);
  const bool aligned = reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  const std::uint64_t vectors = aligned ? n / kPer : 0;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  auto take = [&](const uint4& a, std::uint64_t first) {
    if constexpr (std::is_same_v<T, float> && !kMasked) {
      AddFloat32Vector<kSquares>(a, t, block);
      return;
    }
    const T* e = reinterpret_cast<const T*>(&a);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (Valid<kMasked>(validity, offset + first + j)) {
        if constexpr (kMasked) ++t.seen;
        AddElement<kSquares>(e[j], t, block);
      }
    }
  };
  // Unmasked float32 and float64 groups go through a run (exact_levels.cuh).
  constexpr bool kRuns = !kMasked && (std::is_same_v<T, float> || std::is_same_v<T, double>);
  NarrowRun<kSquares, std::conditional_t<kRuns, T, float>> run;
  std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    uint4 a[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = __ldcs(xv + i + u * stride);
    if constexpr (kRuns) {
      if (run.Take(a, t, block)) continue;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) take(a[u], (i + u * stride) * kPer);
  }
  if constexpr (kRuns) run.End(t, block);
  for (; i < vectors; i += stride) take(__ldcs(xv + i), i * kPer);
  for (std::uint64_t k = vectors * kPer + static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    if (Valid<kMasked>(validity, offset + k)) {
      if constexpr (kMasked) ++t.seen;
      AddElement<kSquares>(x[k], t, block);
    }
  }
  EndBlock<kSquares, kMasked, T>(t, block, sum_state, squares_state);
}

__global__ void CarryRowKernel(unsigned long long* sum_state, unsigned long long* squares_state, std::uint64_t row) {
  CarryDigits((blockIdx.x == 0 ? sum_state : squares_state) + row * kStateWords);
}

template <bool kSquares, typename T>
cudaError_t Launch(const ExactPass& pass, const void* chunk, std::uint64_t n, std::uint64_t offset,
                   const DeviceInfo& dev, cudaStream_t stream) {
  auto* sum = static_cast<unsigned long long*>(pass.sum_state);
  auto* squares = static_cast<unsigned long long*>(pass.squares_state);
  if (n > 0) {
    const T* x = static_cast<const T*>(chunk);
    const auto launch = [&](auto kernel, const std::uint32_t* validity) -> cudaError_t {
      // 4 blocks per SM measured fastest (8 gave 0.77-0.87x of it), and no
      // more than stay resident at once: the squares' kernels hold 80
      // registers a thread, 3 blocks an SM, and a fourth block an SM ran
      // as a second wave, one block an SM (ncu, H100). None smaller than
      // the fused pass's smallest slice (Policy::kMinBytesPerBlock): a
      // block's start and end cost the same whatever it reads, and 64
      // clients' small arrays each taking the whole GPU's blocks lost 10%
      // of the resident bench's sums to the fused pass.
      int resident = 0;
      TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, 0));
      const std::uint64_t by_size =
          (n * sizeof(T) + Policy::kMinBytesPerBlock - 1) / static_cast<std::uint64_t>(Policy::kMinBytesPerBlock);
      const unsigned blocks = static_cast<unsigned>(
          std::min<std::uint64_t>(static_cast<std::uint64_t>(std::clamp(resident, 1, 4) * dev.sms), by_size));
      kernel<<<blocks, kThreads, 0, stream>>>(x, n, offset, validity, sum, squares);
      TALLY_CUDA_TRY(cudaGetLastError());
      return cudaSuccess;
    };
    if (pass.validity != nullptr) {
      TALLY_CUDA_TRY(launch(ExactKernel<kSquares, true, T>, pass.validity));
    } else {
      TALLY_CUDA_TRY(launch(ExactKernel<kSquares, false, T>, nullptr));
    }
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t LaunchWhole(const ExactPass& pass, const void* chunk, std::uint64_t n, std::uint64_t offset,
                        const DeviceInfo& dev, cudaStream_t stream) {
  const T* x = static_cast<const T*>(chunk);
  for (std::uint64_t at = 0; at < n; at += kMaxExactLaunchElements) {
    const std::uint64_t m = std::min(kMaxExactLaunchElements, n - at);
    if (at != 0) TALLY_CUDA_TRY(LaunchCarryRow(pass, 0, stream));
    const cudaError_t err = pass.squares_state != nullptr ? Launch<true, T>(pass, x + at, m, offset + at, dev, stream)
                                                          : Launch<false, T>(pass, x + at, m, offset + at, dev, stream);
    TALLY_CUDA_TRY(err);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchCarryRow(const ExactPass& pass, std::uint64_t row, cudaStream_t stream) {
  CarryRowKernel<<<pass.squares_state != nullptr ? 2 : 1, 1, 0, stream>>>(
      static_cast<unsigned long long*>(pass.sum_state), static_cast<unsigned long long*>(pass.squares_state), row);
  TALLY_CUDA_TRY(cudaGetLastError());
  return cudaSuccess;
}

cudaError_t StartExact(const AggregatePlan& plan, const ExactPass& pass, std::uint64_t offset, cudaStream_t stream) {
  if (offset == 0) {
    const std::size_t bytes = kExactStateBytes * RowsOf(plan);
    // The squares' state follows the elements' (LayoutOf: 256-byte aligned
    // arrays): one memset for both, a launch fewer per request.
    auto* sum = static_cast<unsigned char*>(pass.sum_state);
    auto* squares = static_cast<unsigned char*>(pass.squares_state);
    const std::size_t aligned = (bytes + 255) / 256 * 256;
    if (squares == sum + aligned) {
      TALLY_CUDA_TRY(cudaMemsetAsync(sum, 0, aligned + bytes, stream));
      return cudaSuccess;
    }
    TALLY_CUDA_TRY(cudaMemsetAsync(sum, 0, bytes, stream));
    if (squares != nullptr) TALLY_CUDA_TRY(cudaMemsetAsync(squares, 0, bytes, stream));
    return cudaSuccess;
  }
  return LaunchCarryRow(pass, plan.row_length == 0 ? 0 : offset / plan.row_length, stream);
}

cudaError_t RunExact(const AggregatePlan& plan, const ExactPass& pass, const void* chunk, std::uint64_t n,
                     std::uint64_t offset, const DeviceInfo& dev, cudaStream_t stream) {
  if (plan.row_length != 0) return LaunchExactRows(plan, pass, chunk, n, offset, dev, stream);
  // Each dtype's elements as they are stored (rules::Traits: bool as uint8).
  return rules::VisitDType(plan.dtype, [&](auto d) {
    return LaunchWhole<typename rules::Traits<decltype(d)::value>::value>(pass, chunk, n, offset, dev, stream);
  });
}

}  // namespace tally::kernels::detail
