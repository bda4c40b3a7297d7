// tally/kernels/group.h's direct path: sum, count, min and max of float
// values per key, in one read of keys and values after a pass for the
// range (SpreadOfKeys). Keys in a range of up to kMaxLaneCopiesRange here:
// each block accumulates into its own slots in shared memory, a copy per
// thread (ranges up to kMaxOwnCopiesRange) or per lane of a warp, then
// adds them to the global slots. Wider ranges: partitioned_groups.cu;
// the groups of either written out: written_groups.cu. The slots and
// their arithmetic: dense_slots.cuh.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "group/dense_slots.cuh"
#include "group/partitioned_groups.cuh"
#include "shared_memory.cuh"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/group.h"
#include "tally/rules/keyed_sums.h"

namespace tally::kernels {
namespace {

constexpr int kThreads = 256;

using dense::KeyKind;
using dense::KeyReader;
using dense::Slot;
using dense::Slots;

// Elements a thread loads before it folds them, so that several loads are
// in flight (one at a time, behind a switch on the key dtype per element,
// read 8 bytes a row at 1 TB/s on an H100), or 16-byte vectors of each
// column where both are 4 bytes wide.
constexpr int kSpreadLoads = 4;
constexpr int kSpreadVectors = 2;

// Calls f(raw key, value) for rows thread, thread + stride, ... of the n
// rows (a grid-stride walk), several loads in flight before any is used:
// kVectors 16-byte vectors of each column (four rows each) where `vectors`
// (keys and values both 4 bytes wide and 16-byte aligned), then the rows
// those leave, kLoads at a time. The range pass and the lane copies walk
// the rows this way (OwnCopiesKernel the same way, written out: see there).
template <int kVectors, int kLoads, typename T, int kBytes, typename F>
__device__ __forceinline__ void ForEachRow(const KeyReader<kBytes>& keys, const T* __restrict__ values,
                                           std::uint64_t n, bool vectors, F&& f) {
  const std::uint64_t thread = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  std::uint64_t scalar_from = 0;  // the rows the vectors leave
  if constexpr (kBytes == 4 && sizeof(T) == 4) {
    if (vectors) {
      const auto* k4 = static_cast<const uint4*>(keys.keys);
      const auto* v4 = reinterpret_cast<const float4*>(values);
      const std::uint64_t n4 = n / 4;
      for (std::uint64_t i = thread; i < n4; i += kVectors * stride) {
        uint4 kv[kVectors];
        float4 vv[kVectors];
#pragma unroll
        for (int u = 0; u < kVectors; ++u) {
          if (i + u * stride < n4) {
            kv[u] = k4[i + u * stride];
            vv[u] = v4[i + u * stride];
          }
        }
#pragma unroll
        for (int u = 0; u < kVectors; ++u) {
          if (i + u * stride >= n4) continue;
          f(std::uint64_t{kv[u].x}, vv[u].x);
          f(std::uint64_t{kv[u].y}, vv[u].y);
          f(std::uint64_t{kv[u].z}, vv[u].z);
          f(std::uint64_t{kv[u].w}, vv[u].w);
        }
      }
      scalar_from = n4 * 4;
    }
  }
  for (std::uint64_t i = scalar_from + thread; i < n; i += kLoads * stride) {
    std::uint64_t k[kLoads];
    T v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const std::uint64_t at = i + u * stride;
      if (at < n) {
        k[u] = keys.Raw(at);
        v[u] = values[at];
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (i + u * stride < n) f(k[u], v[u]);
    }
  }
}

// Folds one row into the range and the magnitude.
template <typename T>
__device__ __forceinline__ void FoldSpread(std::uint64_t ordered, T value, std::uint64_t& lo, std::uint64_t& hi,
                                           std::uint64_t& mag) {
  lo = ordered < lo ? ordered : lo;
  hi = ordered > hi ? ordered : hi;
  const double v = fabs(static_cast<double>(value));
  if (isfinite(v)) {
    std::uint64_t b;
    std::memcpy(&b, &v, 8);
    mag = b > mag ? b : mag;
  }
}

// `vectors`: keys and values both 4 bytes wide and 16-byte aligned, read
// four rows a vector (ForEachRow).
template <typename T, int kBytes>
__global__ void RangeAndMagnitudeKernel(KeyReader<kBytes> keys, const T* __restrict__ values, std::uint64_t n,
                                        bool vectors,
                                        unsigned long long* extremes /* lo, hi, largest |value| as ordered */) {
  std::uint64_t lo = ~0ull, hi = 0, mag = 0;
  ForEachRow<kSpreadVectors, kSpreadLoads>(keys, values, n, vectors, [&](std::uint64_t raw, T value) {
    FoldSpread(keys.Ordered(raw), value, lo, hi, mag);
  });
  for (int d = 16; d > 0; d /= 2) {
    const std::uint64_t a = __shfl_down_sync(0xffffffffu, lo, d), c = __shfl_down_sync(0xffffffffu, hi, d),
                        m = __shfl_down_sync(0xffffffffu, mag, d);
    lo = a < lo ? a : lo;
    hi = c > hi ? c : hi;
    mag = m > mag ? m : mag;
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMin(&extremes[0], lo);
    atomicMax(&extremes[1], hi);
    atomicMax(&extremes[2], mag);
  }
}

// One copy of every slot per lane of a warp (slot j of lane l at j x 32 +
// l): the lanes of a warp never update one address, so a few hot keys (16
// groups) cost no serialised atomics. 32 keys x 32 copies x 28 bytes (36
// for float64 values: Packed) is 28 KiB a block. Each copy counts in its
// low word's top bits (Packed), so a copy's rows, those of its lane in the
// block's warps, must stay under 2^16: LaneCopiesBlocks gives each thread
// at most kMaxLaneRows rows.
static_assert(kMaxLaneCopiesRange == 32, "a copy per lane of a warp");
constexpr std::uint64_t kMaxLaneRows = dense::PackedRows::kMaxRows / (kThreads / 32) - 8;
// Elements a thread loads before it adds them, so that several loads are
// in flight while the atomics of the last ones run: four scalar loads of
// each column, or two 16-byte vectors of each (four rows each) where keys
// and values are both 4 bytes wide and 16-byte aligned (measured on an
// H200 at 16 keys, 2^28 rows: the vectors and FixedWordsOf took the pass
// from 1.51 to 1.21 ms, packing the count into the low word to about 1.05).
constexpr int kLoadsPerThread = 4;
constexpr int kVectorsPerThread = 2;

template <typename T, int kBytes>
__global__ void LaneCopiesKernel(KeyReader<kBytes> keys, const T* __restrict__ values, std::uint64_t n,
                                 std::uint64_t base, std::uint64_t range, dense::FixedStep step, bool vectors,
                                 Slots global) {
  extern __shared__ unsigned long long shared[];
  constexpr std::uint64_t kCopies = 32;
  const std::uint64_t slots = range * kCopies;
  const dense::Packed<T> s = dense::Packed<T>::At(shared, slots);
  for (std::uint64_t j = threadIdx.x; j < slots; j += blockDim.x) s.Clear(j);
  __syncthreads();
  const std::uint64_t lane = threadIdx.x & 31u;
  ForEachRow<kVectorsPerThread, kLoadsPerThread>(keys, values, n, vectors, [&](std::uint64_t raw, T value) {
    s.Add((keys.Ordered(raw) - base) * kCopies + lane, value, step);
  });
  __syncthreads();
  for (std::uint64_t j = threadIdx.x; j < range; j += blockDim.x) {
    // Key j's copies folded into one.
    Slot folded;
    for (std::uint64_t c = j * kCopies; c < (j + 1) * kCopies; ++c) folded.Fold(s.Load(c));
    if (folded.count != 0) folded.AtomicAdd(global, j);
  }
}

// A copy of every slot per thread (slot j of thread t at j x kOwnThreads +
// t) for key ranges of up to kMaxOwnCopiesRange: a thread owns its copies,
// so it adds with plain reads and writes where the lane copies take shared
// atomics, and a warp's lanes read consecutive words (no bank conflict)
// whatever their keys. The copies take 3.5 KiB a block per key (4.5 for
// float64 values; 4.5 for both when these figures were measured), so the
// range sets how many blocks share an SM, and with them how much of the
// reads' latency is hidden: measured on an H200 (2^28 rows, int32 keys,
// float32 values, `tally-groupby-kernel-bench`), 2 keys 0.86 ms, 4 0.87, 8
// 0.95 (six blocks an SM), 10 1.18, 12 1.19, 16 1.46, 32 3.78, against the
// lane copies' 1.23-1.25 at every range up to 32. Each copy's rows stay
// under 2^16 (Packed), as the lane copies' do (OwnCopiesBlocks).
constexpr std::uint64_t kMaxOwnCopiesRange = 8;
constexpr int kOwnThreads = 128;
constexpr int kOwnVectors = 4;
constexpr std::uint64_t kMaxOwnRows = dense::PackedRows::kMaxRows - 8;

template <typename T, int kBytes>
__global__ void __launch_bounds__(kOwnThreads) OwnCopiesKernel(KeyReader<kBytes> keys, const T* __restrict__ values,
                                                             std::uint64_t n, std::uint64_t base, std::uint64_t range,
                                                             dense::FixedStep step, bool vectors, Slots global) {
  extern __shared__ unsigned long long shared[];
  const std::uint64_t slots = range * kOwnThreads;
  const dense::Packed<T> s = dense::Packed<T>::At(shared, slots);
  for (std::uint64_t j = threadIdx.x; j < slots; j += blockDim.x) s.Clear(j);
  __syncthreads();
  // Its own walk rather than ForEachRow's: the same loads and adds through
  // the walker measured 5% slower here (H200, 4 keys over 2^28 rows: 0.91-0.94
  // against 0.87-0.88 ms in one call), where the other passes did not move.
  const std::uint64_t me = threadIdx.x;
  const std::uint64_t thread = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  std::uint64_t scalar_from = 0;  // the rows the vectors leave
  if constexpr (kBytes == 4 && sizeof(T) == 4) {
    if (vectors) {
      const auto* k4 = static_cast<const uint4*>(keys.keys);
      const auto* v4 = reinterpret_cast<const float4*>(values);
      const std::uint64_t n4 = n / 4;
      for (std::uint64_t i = thread; i < n4; i += kOwnVectors * stride) {
        uint4 kv[kOwnVectors];
        float4 vv[kOwnVectors];
#pragma unroll
        for (int u = 0; u < kOwnVectors; ++u) {
          if (i + u * stride < n4) {
            kv[u] = k4[i + u * stride];
            vv[u] = v4[i + u * stride];
          }
        }
#pragma unroll
        for (int u = 0; u < kOwnVectors; ++u) {
          if (i + u * stride >= n4) continue;
          const std::uint32_t kk[4] = {kv[u].x, kv[u].y, kv[u].z, kv[u].w};
          const float v[4] = {vv[u].x, vv[u].y, vv[u].z, vv[u].w};
#pragma unroll
          for (int e = 0; e < 4; ++e) s.AddOwned((keys.Ordered(kk[e]) - base) * kOwnThreads + me, v[e], step);
        }
      }
      scalar_from = n4 * 4;
    }
  }
  for (std::uint64_t i = scalar_from + thread; i < n; i += kLoadsPerThread * stride) {
    std::uint64_t k[kLoadsPerThread];
    T v[kLoadsPerThread];
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) {
      const std::uint64_t at = i + u * stride;
      if (at < n) {
        k[u] = keys.Raw(at);
        v[u] = values[at];
      }
    }
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) {
      if (i + u * stride < n) s.AddOwned((keys.Ordered(k[u]) - base) * kOwnThreads + me, v[u], step);
    }
  }
  __syncthreads();
  for (std::uint64_t j = threadIdx.x; j < range; j += blockDim.x) {
    // Key j's copies folded into one.
    Slot folded;
    for (std::uint64_t c = j * kOwnThreads; c < (j + 1) * kOwnThreads; ++c) folded.Fold(s.Load(c));
    if (folded.count != 0) folded.AtomicAdd(global, j);
  }
}

// Blocks of a copies pass: `per_sm` an SM, or more where the rows would
// give a thread of `threads` more than `rows_per_thread` (a copy's count
// rides in 16 bits, Packed).
int CopiesBlocks(int per_sm, int threads, std::uint64_t rows_per_thread, std::uint64_t rows) {
  const std::uint64_t per_block = rows_per_thread * static_cast<std::uint64_t>(threads);
  const std::uint64_t least = (rows + per_block - 1) / per_block;
  return static_cast<int>(std::max<std::uint64_t>(std::uint64_t(dense::SmCount()) * std::max(per_sm, 1), least));
}

// Blocks of the owned-copies pass: as many as fit the SMs at once (by
// their shared memory).
template <typename Kernel>
cudaError_t OwnCopiesBlocks(Kernel kernel, std::size_t shared, std::uint64_t rows, int* blocks) {
  int per_sm = 0;
  TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kOwnThreads, shared));
  *blocks = CopiesBlocks(per_sm, kOwnThreads, kMaxOwnRows, rows);
  return cudaSuccess;
}

// Blocks of the lane-copies pass: four an SM (more past about 2^29 rows on
// 132 SMs).
int LaneCopiesBlocks(std::uint64_t rows) { return CopiesBlocks(4, kThreads, kMaxLaneRows, rows); }

// Whether keys and values are both 16-byte aligned (ForEachRow's vectors,
// where both are 4 bytes wide).
bool VectorsAligned(const void* keys, const void* values) {
  return reinterpret_cast<std::uintptr_t>(keys) % 16 == 0 && reinterpret_cast<std::uintptr_t>(values) % 16 == 0;
}

int Blocks() { return dense::SmCount() * 4; }

bool Taken(const GroupKeys& keys, rules::DType value_dtype) {
  int bytes = 0;
  KeyKind kind{};
  return dense::KeyLayout(keys.dtype, &bytes, &kind) && keys.rows != 0 && keys.rows < (std::uint64_t{1} << 31) &&
         (value_dtype == rules::DType::kFloat32 || value_dtype == rules::DType::kFloat64);
}

// f(T{}) for float32 or float64 values.
template <typename F>
cudaError_t VisitValues(rules::DType dtype, F&& f) {
  return dtype == rules::DType::kFloat32 ? f(float{}) : f(double{});
}

}  // namespace

cudaError_t SpreadOfKeys(const GroupKeys& keys, const DenseValues& values, void* scratch, cudaStream_t stream,
                         KeySpread* out) {
  int key_bytes = 0;
  KeyKind kind{};
  if (!Taken(keys, values.dtype) || !dense::KeyLayout(keys.dtype, &key_bytes, &kind)) {
    return cuda::Record(cudaErrorInvalidValue, "SpreadOfKeys: keys or values not taken", __FILE__, __LINE__);
  }
  auto* extremes = static_cast<unsigned long long*>(scratch);
  const unsigned long long init[3] = {~0ull, 0ull, 0ull};
  TALLY_CUDA_TRY(cudaMemcpyAsync(extremes, init, sizeof init, cudaMemcpyHostToDevice, stream));
  TALLY_CUDA_TRY(VisitValues(values.dtype, [&](auto t) {
    using T = decltype(t);
    return dense::VisitKeyWidth(key_bytes, [&](auto width) -> cudaError_t {
      constexpr int kBytes = decltype(width)::value;
      const bool vectors = VectorsAligned(keys.data, values.data);
      RangeAndMagnitudeKernel<T, kBytes><<<Blocks(), kThreads, 0, stream>>>(
          KeyReader<kBytes>{keys.data, kind}, static_cast<const T*>(values.data), keys.rows, vectors, extremes);
      return cudaPeekAtLastError();
    });
  }));
  unsigned long long found[3] = {0, 0, 0};
  TALLY_CUDA_TRY(cudaMemcpyAsync(found, extremes, sizeof found, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  *out = KeySpread{.lowest = found[0], .range = found[1] - found[0] + 1, .largest = found[2]};
  return cudaSuccess;
}

cudaError_t DenseGroupScratchBytes(const GroupKeys& keys, rules::DType value_dtype, const KeySpread& spread,
                                   std::size_t* bytes) {
  const std::uint64_t range = spread.range;
  if (!Taken(keys, value_dtype) || range == 0 || range > kMaxPartitionedRange ||
      (range > kMaxLaneCopiesRange && range > 2 * keys.rows + 65536)) {
    return cudaErrorInvalidValue;
  }
  (void)partitioned::LayOut(keys.rows, range, rules::SizeOf(value_dtype), nullptr, bytes);
  return cudaSuccess;
}

cudaError_t SumByKey(const GroupKeys& keys, const DenseValues& values, const KeySpread& spread, void* scratch,
                     std::size_t scratch_bytes, cudaStream_t stream, DenseGroups* out) {
  std::size_t need = 0;
  int key_bytes = 0;
  KeyKind kind{};
  if (DenseGroupScratchBytes(keys, values.dtype, spread, &need) != cudaSuccess ||
      !dense::KeyLayout(keys.dtype, &key_bytes, &kind)) {
    return cuda::Record(cudaErrorInvalidValue, "SumByKey: keys, values or their spread not taken", __FILE__, __LINE__);
  }
  if (scratch_bytes < need) return cuda::Record(cudaErrorInvalidValue, "SumByKey: too little scratch", __FILE__, __LINE__);
  *out = DenseGroups{};
  out->range = spread.range;
  // The scale: every |value| x 2^scale below 2^(92 - log2 rows), so that
  // the high words of n of them sum within 63 bits.
  out->scale = rules::keyed::FixedScale(spread.largest, keys.rows);
  std::size_t used = 0;
  const partitioned::Layout at =
      partitioned::LayOut(keys.rows, spread.range, rules::SizeOf(values.dtype), scratch, &used);
  dense::InitSlotsKernel<<<Blocks(), kThreads, 0, stream>>>(at.slots,
                                                            std::uint64_t{at.buckets} * partitioned::kBucketKeys);
  TALLY_CUDA_CHECK_LAUNCH();
  TALLY_CUDA_TRY(VisitValues(values.dtype, [&](auto t) -> cudaError_t {
    using T = decltype(t);
    const auto* typed = static_cast<const T*>(values.data);
    if (spread.range > kMaxLaneCopiesRange) {
      return partitioned::Accumulate<T>(keys, typed, spread, out->scale, at, stream);
    }
    const bool vectors = VectorsAligned(keys.data, typed);
    return dense::VisitKeyWidth(key_bytes, [&](auto width) -> cudaError_t {
      constexpr int kBytes = decltype(width)::value;
      if (spread.range <= kMaxOwnCopiesRange) {
        const std::size_t shared = spread.range * kOwnThreads * dense::Packed<T>::kBytes;
        TALLY_CUDA_TRY(detail::AllowMostSharedMemory(OwnCopiesKernel<T, kBytes>));
        int blocks = 0;
        TALLY_CUDA_TRY(OwnCopiesBlocks(OwnCopiesKernel<T, kBytes>, shared, keys.rows, &blocks));
        OwnCopiesKernel<T, kBytes><<<blocks, kOwnThreads, shared, stream>>>(
            KeyReader<kBytes>{keys.data, kind}, typed, keys.rows, spread.lowest, spread.range,
            dense::FixedStep::Of(out->scale), vectors, at.slots);
        TALLY_CUDA_CHECK_LAUNCH();
        return cudaSuccess;
      }
      const std::size_t shared = spread.range * 32 * dense::Packed<T>::kBytes;
      TALLY_CUDA_TRY(detail::AllowMostSharedMemory(LaneCopiesKernel<T, kBytes>));
      LaneCopiesKernel<T, kBytes><<<LaneCopiesBlocks(keys.rows), kThreads, shared, stream>>>(
          KeyReader<kBytes>{keys.data, kind}, typed, keys.rows, spread.lowest, spread.range,
          dense::FixedStep::Of(out->scale), vectors, at.slots);
      TALLY_CUDA_CHECK_LAUNCH();
      return cudaSuccess;
    });
  }));
  return partitioned::WriteGroups(at, spread.lowest, kind, key_bytes, out->scale, stream, out);
}

}  // namespace tally::kernels
