// The exact pass over rows (plan.row_length > 0): each row's elements, and
// where asked their squares, added exactly into the row's own state
// (ResultLayout::exact_sum / exact_squares, kExactStateWords a row), so
// every row's sum and moments are the bits of that row sent alone, on any
// backend and for any chunking (the pieces in exact_levels.cuh).
//
// A warp takes a tile of up to kTileElements of one row (16-byte loads
// where the tile is aligned, float32 vectors through AddFloat32Vector as in
// exact_sum.cu): its lanes' levels
// spill into the warp's digits in shared memory, which join the row's
// digits by integer atomics at the tile's end (a row of many tiles takes
// them from many warps, in any order: the digits are exact). Short rows
// cost a tile's overhead each (zeroing and flushing 68 digits); the fused
// pass's float64 sums were the fast path they replace.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "exact/exact_dispatch.h"
#include "exact/exact_levels.cuh"
#include "tally/kernels/cuda_error.h"
#include "tally/rules/dtype.h"

namespace tally::kernels::detail {
namespace {

using namespace exact;  // NOLINT: the pass's own pieces

constexpr int kWarps = 8;
constexpr int kTileElements = 2048;
// Elements one launch adds to a row at most, so that no digit passes 2^62
// (LaunchCarryRow): a tile adds below 2^44.1 to a digit (at most 2 x 2048
// spilled values and 96 flushed levels, each part below 2^32), and a row
// takes at most 2^28 / 2048 = 2^17 tiles a launch: below 2^61.1.
constexpr std::uint64_t kMaxLaunchElements = std::uint64_t{1} << 28;

template <bool kSquares, bool kMasked, typename T>
__global__ void __launch_bounds__(kWarps * 32)
    ExactRowsKernel(const T* x, std::uint64_t n, std::uint64_t offset, std::uint64_t row_length,
                    const std::uint32_t* validity, unsigned long long* sum_state, unsigned long long* squares_state) {
  __shared__ unsigned long long sum_digits[kWarps][kDigits];
  __shared__ unsigned long long squares_digits[kWarps][kSquares ? kDigits : 1];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const Digits mine{sum_digits[warp], squares_digits[warp]};
  const std::uint64_t tiles_per_row = (row_length + kTileElements - 1) / kTileElements;
  const std::uint64_t first_row = offset / row_length, last_row = (offset + n - 1) / row_length;
  const std::uint64_t tiles = (last_row - first_row + 1) * tiles_per_row;
  const std::uint64_t end_of_chunk = offset + n;
  for (std::uint64_t tile = static_cast<std::uint64_t>(blockIdx.x) * kWarps + warp; tile < tiles;
       tile += static_cast<std::uint64_t>(gridDim.x) * kWarps) {
    // The tile's elements, as indices from the array's start (warp-uniform).
    const std::uint64_t row = first_row + tile / tiles_per_row;
    const std::uint64_t in_row = (tile % tiles_per_row) * kTileElements;
    const std::uint64_t begin = std::max(row * row_length + in_row, offset);
    const std::uint64_t end = std::min(row * row_length + std::min(in_row + kTileElements, row_length), end_of_chunk);
    if (begin >= end) continue;
    for (int k = lane; k < kDigits; k += 32) {
      mine.sum[k] = 0;
      if constexpr (kSquares) mine.squares[k] = 0;
    }
    __syncwarp();
    ThreadSums t;
    const T* tile_x = x + (begin - offset);
    const std::uint64_t count = end - begin;
    std::uint64_t scalar_from = 0;  // the elements before it went by vectors
    if constexpr (!kMasked) {
      // 16-byte loads, four in flight a lane (a tile is at most 32 x 4
      // vectors of float32): the scalar loads alone left the pass bound by
      // latency (0.17-0.20x of the fused rows, H100).
      constexpr int kPer = 16 / sizeof(T);
      if (reinterpret_cast<std::uintptr_t>(tile_x) % 16 == 0) {
        const uint4* v = reinterpret_cast<const uint4*>(tile_x);
        const std::uint64_t vectors = count / kPer;
        for (std::uint64_t i = lane; i < vectors; i += 32 * 4) {
          uint4 a[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (i + u * 32 < vectors) a[u] = __ldcs(v + i + u * 32);
          }
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (i + u * 32 >= vectors) break;
            if constexpr (std::is_same_v<T, float>) {
              AddFloat32Vector<kSquares>(a[u], t, mine);
            } else {
              const T* e = reinterpret_cast<const T*>(&a[u]);
#pragma unroll
              for (int j = 0; j < kPer; ++j) AddElement<kSquares>(e[j], t, mine);
            }
          }
        }
        scalar_from = vectors * kPer;
      }
    }
    for (std::uint64_t k = scalar_from + lane; k < count; k += 32) {
      if (Valid<kMasked>(validity, begin + k)) {
        if constexpr (kMasked) ++t.seen;
        AddElement<kSquares>(tile_x[k], t, mine);
      }
    }
    t.Flush<kSquares, T>(mine);
    // A lane counts at most kTileElements / 32 elements: unsigned sums.
    const unsigned nan = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(t.nan));
    const unsigned pinf = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(t.positive_inf));
    const unsigned ninf = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(t.negative_inf));
    const unsigned seen = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(t.seen));
    const unsigned squares_inf = __reduce_add_sync(0xffffffffu, static_cast<unsigned>(t.squares_inf));
    const bool other = __any_sync(0xffffffffu, t.other) != 0;
    __syncwarp();  // the lanes' shared atomics before the reads
    unsigned long long* row_sum = sum_state + row * kStateWords;
    unsigned long long* row_squares = kSquares ? squares_state + row * kStateWords : nullptr;
    if (lane == 0) {
      if (nan != 0) atomicAdd(&row_sum[kNan], nan);
      if (pinf != 0) atomicAdd(&row_sum[kPositiveInf], pinf);
      if (ninf != 0) atomicAdd(&row_sum[kNegativeInf], ninf);
      if (kMasked && seen != 0) atomicAdd(&row_sum[kSeen], seen);
      if (other) atomicOr(&row_sum[kOther], 1ull);
      if (kSquares && squares_inf != 0) atomicAdd(&row_squares[kPositiveInf], squares_inf);
    }
    for (int k = lane; k < kDigits; k += 32) {
      if (mine.sum[k] != 0) atomicAdd(&row_sum[k], mine.sum[k]);
      if constexpr (kSquares) {
        if (mine.squares[k] != 0) atomicAdd(&row_squares[k], mine.squares[k]);
      }
    }
    __syncwarp();  // the reads before the next tile zeroes the digits
  }
}

template <bool kSquares, typename T>
cudaError_t Launch(const AggregatePlan& plan, const ExactPass& pass, const T* x, std::uint64_t n,
                   std::uint64_t offset, const DeviceInfo& dev, cudaStream_t stream) {
  auto* sum = static_cast<unsigned long long*>(pass.sum_state);
  auto* squares = static_cast<unsigned long long*>(pass.squares_state);
  const std::uint64_t L = plan.row_length;
  const std::uint64_t rows = (offset + n - 1) / L - offset / L + 1;
  const std::uint64_t tiles = rows * ((L + kTileElements - 1) / kTileElements);
  const unsigned blocks = static_cast<unsigned>(
      std::min<std::uint64_t>((tiles + kWarps - 1) / kWarps, static_cast<std::uint64_t>(8 * dev.sms)));
  if (pass.validity != nullptr) {
    ExactRowsKernel<kSquares, true, T><<<blocks, kWarps * 32, 0, stream>>>(x, n, offset, L, pass.validity, sum, squares);
  } else {
    ExactRowsKernel<kSquares, false, T><<<blocks, kWarps * 32, 0, stream>>>(x, n, offset, L, nullptr, sum, squares);
  }
  TALLY_CUDA_TRY(cudaGetLastError());
  return cudaSuccess;
}

template <typename T>
cudaError_t LaunchRows(const AggregatePlan& plan, const ExactPass& pass, const void* chunk, std::uint64_t n,
                       std::uint64_t offset, const DeviceInfo& dev, cudaStream_t stream) {
  const T* x = static_cast<const T*>(chunk);
  for (std::uint64_t at = 0; at < n; at += kMaxLaunchElements) {
    const std::uint64_t m = std::min(kMaxLaunchElements, n - at);
    if (at != 0) TALLY_CUDA_TRY(LaunchCarryRow(pass, (offset + at) / plan.row_length, stream));
    const bool squares = pass.squares_state != nullptr;
    const cudaError_t err = squares ? Launch<true, T>(plan, pass, x + at, m, offset + at, dev, stream)
                                    : Launch<false, T>(plan, pass, x + at, m, offset + at, dev, stream);
    TALLY_CUDA_TRY(err);
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchExactRows(const AggregatePlan& plan, const ExactPass& pass, const void* chunk, std::uint64_t n,
                            std::uint64_t offset, const DeviceInfo& dev, cudaStream_t stream) {
  // Each dtype's elements as they are stored (rules::Traits: bool as uint8).
  return rules::VisitDType(plan.dtype, [&](auto d) {
    return LaunchRows<typename rules::Traits<decltype(d)::value>::value>(plan, pass, chunk, n, offset, dev, stream);
  });
}

}  // namespace tally::kernels::detail
