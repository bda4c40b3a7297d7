// tally/kernels/group.h's direct path: sum, count, min and max of float
// values per key for keys in a small range, in one read of keys and values
// after a pass for the range. Each block accumulates into its own slots in
// shared memory (a copy per lane of a warp for ranges of up to
// kLaneCopiesRange keys), then adds them to the global slots. Every accumulation
// is an integer one, so the answer does not depend on the order the
// threads add in: counts and NaN counts; the extremes as order-preserving
// integers; the sums in fixed point (a 96-bit number per element, at a
// scale chosen from the largest magnitude and the row count so that no sum
// can overflow, kept as a signed high word and an unsigned low word that
// each fit 64 bits for up to 2^31 rows).
#include <bit>
#include <cmath>
#include <cstring>

#include "select/scratch.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/group.h"
#include "tally/rules/keyed_sums.h"

namespace tally::kernels {
namespace {

constexpr int kThreads = 256;
// Slots a block keeps in shared memory: 44 bytes each, 176 KiB (the
// group.h's kMaxDenseRange is this).
constexpr std::uint64_t kSharedSlots = kMaxDenseRange;

struct Slots {
  unsigned long long* hi;     // signed high words of the fixed-point sums
  unsigned long long* lo;     // low 32-bit words, summed
  unsigned long long* count;  // elements
  unsigned long long* low;    // ordered-integer minima (all ones: none yet)
  unsigned long long* high;   // ordered-integer maxima
  unsigned int* special;      // NaN count in the high 30 bits; bit 0 +inf seen, bit 1 -inf seen
};

using rules::keyed::FromOrdered;
using rules::keyed::OrderedDouble;
using rules::keyed::OrderedKey;
using rules::keyed::ToFixed;

// Element i's key as an unsigned number that orders as the key does.
__device__ std::uint64_t OrderedKeyAt(const void* keys, int code, std::uint64_t i) {
  switch (code) {
    case 0: return static_cast<const std::uint8_t*>(keys)[i] != 0;  // bool
    case 1: return OrderedKey(static_cast<const std::int8_t*>(keys)[i]);
    case 2: return OrderedKey(static_cast<const std::int16_t*>(keys)[i]);
    case 3: return OrderedKey(static_cast<const std::int32_t*>(keys)[i]);
    case 4: return OrderedKey(static_cast<const std::int64_t*>(keys)[i]);
    case 5: return OrderedKey(static_cast<const std::uint8_t*>(keys)[i]);
    case 6: return OrderedKey(static_cast<const std::uint16_t*>(keys)[i]);
    case 7: return OrderedKey(static_cast<const std::uint32_t*>(keys)[i]);
    default: return OrderedKey(static_cast<const std::uint64_t*>(keys)[i]);
  }
}

template <typename T>
__global__ void RangeAndMagnitudeKernel(const void* keys, int code, const T* values, std::uint64_t n,
                                        unsigned long long* extremes /* lo, hi, largest |value| as ordered */) {
  std::uint64_t lo = ~0ull, hi = 0, mag = 0;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t k = OrderedKeyAt(keys, code, i);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
    const double v = fabs(static_cast<double>(values[i]));
    if (isfinite(v)) {
      std::uint64_t b;
      std::memcpy(&b, &v, 8);
      mag = b > mag ? b : mag;
    }
  }
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

__device__ void AddTo(const Slots& s, std::uint64_t slot, double v, int scale) {
  atomicAdd(&s.count[slot], 1ull);
  if (isnan(v)) {
    atomicAdd(&s.special[slot], 4u);
    return;
  }
  if (isinf(v)) {
    atomicOr(&s.special[slot], v > 0 ? 1u : 2u);
  } else {
    long long hi;
    unsigned long long lo;
    ToFixed(v, scale, &hi, &lo);
    atomicAdd(&s.hi[slot], static_cast<unsigned long long>(hi));
    atomicAdd(&s.lo[slot], lo);
  }
  const unsigned long long o = OrderedDouble(v);
  atomicMin(&s.low[slot], o);
  atomicMax(&s.high[slot], o);
}

// Key ranges up to this many take one copy of every slot per lane of a
// warp (slot j of lane l at j x 32 + l): the lanes of a warp never update
// one address, so a few hot keys (16 groups, or a skewed key) cost no
// serialised atomics. 32 keys x 32 copies x 44 bytes is 44 KiB a block.
constexpr std::uint64_t kLaneCopiesRange = 32;
// Elements a thread loads before it adds them, so that several loads are
// in flight while the atomics of the last ones run.
constexpr int kLoadsPerThread = 4;

template <typename T, bool kPerLane>
__global__ void DenseKernel(const void* keys, int code, const T* __restrict__ values, std::uint64_t n,
                            std::uint64_t base, std::uint64_t range, int scale, Slots global) {
  extern __shared__ unsigned long long shared[];
  constexpr std::uint64_t kCopies = kPerLane ? 32 : 1;
  const std::uint64_t slots = range * kCopies;
  Slots s;
  s.hi = shared;
  s.lo = shared + slots;
  s.count = shared + 2 * slots;
  s.low = shared + 3 * slots;
  s.high = shared + 4 * slots;
  s.special = reinterpret_cast<unsigned int*>(shared + 5 * slots);
  for (std::uint64_t j = threadIdx.x; j < slots; j += blockDim.x) {
    s.hi[j] = s.lo[j] = s.count[j] = 0;
    s.low[j] = ~0ull;
    s.high[j] = 0;
    s.special[j] = 0;
  }
  __syncthreads();
  const std::uint64_t lane = kPerLane ? (threadIdx.x & 31u) : 0;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += kLoadsPerThread * stride) {
    std::uint64_t k[kLoadsPerThread];
    double v[kLoadsPerThread];
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) {
      const std::uint64_t at = i + u * stride;
      if (at < n) {
        k[u] = OrderedKeyAt(keys, code, at);
        v[u] = static_cast<double>(values[at]);
      }
    }
#pragma unroll
    for (int u = 0; u < kLoadsPerThread; ++u) {
      if (i + u * stride < n) AddTo(s, (k[u] - base) * kCopies + lane, v[u], scale);
    }
  }
  __syncthreads();
  for (std::uint64_t j = threadIdx.x; j < range; j += blockDim.x) {
    // Key j's copies folded into one (the sums wrap as the global ones do).
    unsigned long long hi = 0, lo = 0, count = 0, low = ~0ull, high = 0;
    unsigned int nans = 0, infinities = 0;
    for (std::uint64_t c = j * kCopies; c < (j + 1) * kCopies; ++c) {
      hi += s.hi[c];
      lo += s.lo[c];
      count += s.count[c];
      low = s.low[c] < low ? s.low[c] : low;
      high = s.high[c] > high ? s.high[c] : high;
      nans += s.special[c] & ~3u;
      infinities |= s.special[c] & 3u;
    }
    if (count == 0) continue;
    atomicAdd(&global.hi[j], hi);
    atomicAdd(&global.lo[j], lo);
    atomicAdd(&global.count[j], count);
    atomicMin(&global.low[j], low);
    atomicMax(&global.high[j], high);
    if (nans != 0) atomicAdd(&global.special[j], nans);
    if (infinities != 0) atomicOr(&global.special[j], infinities);
  }
}

__global__ void InitSlotsKernel(Slots s, std::uint64_t range) {
  for (std::uint64_t j = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; j < range;
       j += std::uint64_t{gridDim.x} * blockDim.x) {
    s.hi[j] = s.lo[j] = s.count[j] = 0;
    s.low[j] = ~0ull;
    s.high[j] = 0;
    s.special[j] = 0;
  }
}

int KeyCode(rules::DType dtype) {
  switch (dtype) {
    case rules::DType::kBool: return 0;
    case rules::DType::kInt8: return 1;
    case rules::DType::kInt16: return 2;
    case rules::DType::kInt32: return 3;
    case rules::DType::kInt64: return 4;
    case rules::DType::kUInt8: return 5;
    case rules::DType::kUInt16: return 6;
    case rules::DType::kUInt32: return 7;
    case rules::DType::kUInt64: return 8;
    default: return -1;
  }
}

int Blocks() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    sms = 132;
  }
  return sms * 4;
}

struct DenseLayout {
  unsigned long long* extremes = nullptr;
  Slots slots{};
};

DenseLayout LayOutDense(std::uint64_t range, void* base, std::size_t* used) {
  select::Carver c(base);
  DenseLayout at;
  at.extremes = c.Take<unsigned long long>(3);
  at.slots.hi = c.Take<unsigned long long>(range);
  at.slots.lo = c.Take<unsigned long long>(range);
  at.slots.count = c.Take<unsigned long long>(range);
  at.slots.low = c.Take<unsigned long long>(range);
  at.slots.high = c.Take<unsigned long long>(range);
  at.slots.special = c.Take<unsigned int>(range);
  *used = c.used();
  return at;
}

template <typename T>
cudaError_t Dense(const GroupKeys& keys, const void* values, std::uint64_t max_range, const DenseLayout& at,
                  cudaStream_t stream, DenseGroups* out) {
  const int code = KeyCode(keys.dtype);
  const std::uint64_t n = keys.rows;
  const unsigned long long init[3] = {~0ull, 0ull, 0ull};
  TALLY_CUDA_TRY(cudaMemcpyAsync(at.extremes, init, sizeof init, cudaMemcpyHostToDevice, stream));
  RangeAndMagnitudeKernel<T><<<Blocks(), kThreads, 0, stream>>>(keys.data, code, static_cast<const T*>(values), n,
                                                                 at.extremes);
  TALLY_CUDA_CHECK_LAUNCH();
  unsigned long long extremes[3] = {0, 0, 0};
  TALLY_CUDA_TRY(cudaMemcpyAsync(extremes, at.extremes, sizeof extremes, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  const std::uint64_t range = extremes[1] - extremes[0] + 1;
  out->range = range;
  if (range == 0 || range > max_range || range > kSharedSlots) {
    return cuda::Record(cudaErrorInvalidValue, "the keys' range passes the direct path's", __FILE__, __LINE__);
  }
  // The scale: every |value| x 2^scale below 2^(92 - log2 rows), so that
  // the high words of n of them sum within 63 bits.
  out->scale = rules::keyed::FixedScale(extremes[2], n);
  Slots slots = at.slots;
  InitSlotsKernel<<<Blocks(), kThreads, 0, stream>>>(slots, range);
  TALLY_CUDA_CHECK_LAUNCH();
  const bool per_lane = range <= kLaneCopiesRange;
  const std::size_t shared =
      range * (per_lane ? 32 : 1) * (5 * sizeof(unsigned long long) + sizeof(unsigned int));
  const auto kernel = per_lane ? DenseKernel<T, true> : DenseKernel<T, false>;
  TALLY_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  kernel<<<Blocks(), kThreads, shared, stream>>>(keys.data, code, static_cast<const T*>(values), n, extremes[0],
                                                 range, out->scale, slots);
  TALLY_CUDA_CHECK_LAUNCH();
  std::vector<unsigned long long> hi(range), lo(range), count(range), low(range), high(range);
  std::vector<unsigned int> special(range);
  TALLY_CUDA_TRY(cudaMemcpyAsync(hi.data(), slots.hi, range * 8, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(lo.data(), slots.lo, range * 8, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(count.data(), slots.count, range * 8, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(low.data(), slots.low, range * 8, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(high.data(), slots.high, range * 8, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(special.data(), slots.special, range * 4, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  // The slots with rows are the groups, in ascending key order.
  for (std::uint64_t j = 0; j < range; ++j) {
    if (count[j] == 0) continue;
    std::uint64_t o = extremes[0] + j;
    if (code >= 1 && code <= 4) o ^= 1ull << 63;  // back from the ordered form
    out->keys.push_back(o);
    out->count.push_back(count[j]);
    out->nan.push_back(special[j] >> 2);
    out->infinities.push_back(static_cast<std::uint8_t>(special[j] & 3u));
    out->sum.push_back(rules::keyed::FixedSum(hi[j], lo[j], out->scale));  // the finite elements
    out->min.push_back(FromOrdered(low[j]));
    out->max.push_back(FromOrdered(high[j]));
  }
  out->groups = out->keys.size();
  return cudaSuccess;
}

}  // namespace

cudaError_t DenseGroupScratchBytes(std::uint64_t max_range, std::size_t* bytes) {
  (void)LayOutDense(max_range, nullptr, bytes);
  return cudaSuccess;
}

cudaError_t SumByKey(const GroupKeys& keys, const DenseValues& values, std::uint64_t max_range, void* scratch,
                     std::size_t scratch_bytes, cudaStream_t stream, DenseGroups* out) {
  if (KeyCode(keys.dtype) < 0 || keys.rows == 0 || keys.rows >= (std::uint64_t{1} << 31)) {
    return cuda::Record(cudaErrorInvalidValue, "SumByKey: keys not taken", __FILE__, __LINE__);
  }
  std::size_t need = 0;
  const DenseLayout at = LayOutDense(max_range, scratch, &need);
  if (scratch_bytes < need) return cuda::Record(cudaErrorInvalidValue, "SumByKey: too little scratch", __FILE__, __LINE__);
  *out = DenseGroups{};
  switch (values.dtype) {
    case rules::DType::kFloat32: return Dense<float>(keys, values.data, max_range, at, stream, out);
    case rules::DType::kFloat64: return Dense<double>(keys, values.data, max_range, at, stream, out);
    default: return cuda::Record(cudaErrorInvalidValue, "SumByKey: values must be float32 or float64", __FILE__, __LINE__);
  }
}

}  // namespace tally::kernels
