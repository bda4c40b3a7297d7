// tally/kernels/group.h: the key range, the stable radix order of the rows
// by key, the groups' keys and starts, and the gather.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <bit>
#include <cstring>
#include <type_traits>

#include "select/scratch.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/group.h"

namespace tally::kernels {
namespace {

constexpr int kThreads = 256;

// A float key dtype's bits: U its unsigned word, kExponentBits its
// exponent's width.
template <typename U, int kExponentBits>
struct FloatKey {
  using Bits = U;
};
using Float16Key = FloatKey<std::uint16_t, 5>;
using BFloat16Key = FloatKey<std::uint16_t, 8>;
using Float32Key = FloatKey<std::uint32_t, 8>;
using Float64Key = FloatKey<std::uint64_t, 11>;

template <typename K>
struct KeyTraits {  // the integers: the element is its own word
  using Bits = K;
  static constexpr bool kFloat = false;
};
template <>
struct KeyTraits<bool> {  // read as its byte
  using Bits = std::uint8_t;
  static constexpr bool kFloat = false;
};
template <typename U, int kExponentBits>
struct KeyTraits<FloatKey<U, kExponentBits>> {
  using Bits = U;
  static constexpr bool kFloat = true;
  static constexpr int kWidth = 8 * sizeof(U);
  static constexpr U kSign = U(1) << (kWidth - 1);
  static constexpr U kInfinity = ((U(1) << kExponentBits) - 1) << (kWidth - 1 - kExponentBits);
};
template <typename K>
using BitsOf = typename KeyTraits<K>::Bits;

// Whether a float key's bits are a NaN (never for integers).
template <typename K>
__host__ __device__ bool IsNanKey(BitsOf<K> bits) {
  if constexpr (KeyTraits<K>::kFloat) {
    return static_cast<BitsOf<K>>(bits & ~KeyTraits<K>::kSign) > KeyTraits<K>::kInfinity;
  } else {
    return false;
  }
}

// A key as an unsigned number that orders as the groups do (pandas' sort
// order): an integer's with its sign bit flipped where signed; a float's
// with -0.0 as 0.0 and every NaN as one number past +inf (the NaN group is
// the last), the sign bit flipped where positive and every bit where
// negative.
template <typename K>
__host__ __device__ std::uint64_t Ordered(BitsOf<K> k) {
  if constexpr (KeyTraits<K>::kFloat) {
    using U = BitsOf<K>;
    constexpr U kSign = KeyTraits<K>::kSign;
    const U magnitude = static_cast<U>(k & ~kSign);
    if (magnitude > KeyTraits<K>::kInfinity) return static_cast<U>(KeyTraits<K>::kInfinity + 1) | kSign;  // NaN
    if (magnitude == 0) return kSign;  // either zero
    return (k & kSign) != 0 ? static_cast<U>(~k) : static_cast<U>(k | kSign);
  } else if constexpr (std::is_same_v<K, bool>) {
    return k != 0 ? 1 : 0;
  } else if constexpr (std::is_signed_v<K>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(k)) ^ (std::uint64_t{1} << 63);
  } else {
    return static_cast<std::uint64_t>(k);
  }
}

template <typename K>
__global__ void KeyRangeKernel(const BitsOf<K>* keys, std::uint64_t n, unsigned long long* lo,
                               unsigned long long* hi) {
  std::uint64_t mine_lo = ~std::uint64_t{0}, mine_hi = 0;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t o = Ordered<K>(keys[i]);
    mine_lo = o < mine_lo ? o : mine_lo;
    mine_hi = o > mine_hi ? o : mine_hi;
  }
  // A warp's extremes, then one atomic per warp.
  for (int d = 16; d > 0; d /= 2) {
    const std::uint64_t l = __shfl_down_sync(0xffffffffu, mine_lo, d);
    const std::uint64_t h = __shfl_down_sync(0xffffffffu, mine_hi, d);
    mine_lo = l < mine_lo ? l : mine_lo;
    mine_hi = h > mine_hi ? h : mine_hi;
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMin(lo, static_cast<unsigned long long>(mine_lo));
    atomicMax(hi, static_cast<unsigned long long>(mine_hi));
  }
}

// Each row's code (its ordered key less the least), C 32 or 64 bits wide.
template <typename K, typename C>
__global__ void CodesKernel(const BitsOf<K>* keys, std::uint64_t n, std::uint64_t lo, C* codes, std::uint32_t* rows) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    codes[i] = static_cast<C>(Ordered<K>(keys[i]) - lo);
    rows[i] = static_cast<std::uint32_t>(i);
  }
}

// Each group's key: the bytes of its first row's key (the order is
// stable, so the least row of the group), as the host's steps answer it
// (one of a group's zeros of either sign, one of its NaNs).
template <typename K>
__global__ void FirstKeysKernel(const BitsOf<K>* keys, const std::uint32_t* rows, const std::uint64_t* starts,
                                std::uint64_t groups, std::uint64_t* out) {
  for (std::uint64_t g = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; g < groups;
       g += std::uint64_t{gridDim.x} * blockDim.x) {
    out[g] = static_cast<std::uint64_t>(keys[rows[starts[g]]]);
  }
}

template <typename T>
__global__ void GatherKernel(const T* values, const std::uint32_t* rows, std::uint64_t n, T* out) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    out[i] = values[rows[i]];
  }
}

// Positions of the order each thread numbers: one search for the first's
// group, then a walk.
constexpr std::uint64_t kNumberedPerThread = 64;

// out[rows[i]] = the group whose rows hold position i (starts[g] <= i <
// starts[g + 1]), or `groups` past the last group's rows.
__global__ void NumberRowsKernel(const std::uint32_t* __restrict__ rows, std::uint64_t n,
                                 const std::uint64_t* __restrict__ starts, std::uint64_t groups,
                                 std::uint32_t* __restrict__ out) {
  const std::uint64_t first = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) * kNumberedPerThread;
  if (first >= n) return;
  // The last g with starts[g] <= first (starts[0] is 0).
  std::uint64_t lo = 0, hi = groups;
  while (lo < hi) {
    const std::uint64_t mid = (lo + hi + 1) / 2;
    if (starts[mid] <= first) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  std::uint64_t g = lo;
  std::uint64_t next = g < groups ? starts[g + 1] : n;
  const std::uint64_t last = first + kNumberedPerThread < n ? first + kNumberedPerThread : n;
  for (std::uint64_t i = first; i < last; ++i) {
    while (g < groups && i >= next) {
      ++g;
      next = g < groups ? starts[g + 1] : n;
    }
    out[rows[i]] = static_cast<std::uint32_t>(g);
  }
}

int Blocks(std::uint64_t n) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    sms = 132;
  }
  const std::uint64_t wanted = (n + kThreads - 1) / kThreads;
  const std::uint64_t most = std::uint64_t{static_cast<unsigned>(sms)} * 8;
  return static_cast<int>(wanted < 1 ? 1 : (wanted < most ? wanted : most));
}

// Whether codes of `range` (0: all 2^64) need 64 bits.
bool WideCodes(std::uint64_t range) { return range == 0 || range > (std::uint64_t{1} << 32); }

// The scratch's arrays; the same walk sizes it (no base) and carves it.
// Codes are 32-bit words, or 64-bit where the range needs them (wide).
struct Layout {
  bool wide = false;
  void* codes[2] = {nullptr, nullptr};
  std::uint32_t* rows_alt = nullptr;
  void* unique = nullptr;  // the runs' codes; then each group's first key (64-bit words)
  std::uint32_t* counts = nullptr;
  std::uint64_t* starts = nullptr;
  std::uint32_t* runs = nullptr;
  void* cub = nullptr;
  std::size_t cub_bytes = 0;
};

template <typename C>
cudaError_t CubBytes(int n, std::size_t* bytes) {
  std::size_t sort = 0, encode = 0, scan = 0;
  cub::DoubleBuffer<C> k(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> v(nullptr, nullptr);
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort, k, v, n, 0, 8 * static_cast<int>(sizeof(C))));
  TALLY_CUDA_TRY(cub::DeviceRunLengthEncode::Encode(nullptr, encode, static_cast<C*>(nullptr), static_cast<C*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr), n));
  TALLY_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<std::uint32_t*>(nullptr),
                                               static_cast<std::uint64_t*>(nullptr), n + 1));
  *bytes = std::max(sort, std::max(encode, scan));
  return cudaSuccess;
}

cudaError_t LayOut(std::uint64_t rows, bool wide, void* base, Layout* at) {
  select::Carver c(base);
  const std::size_t code = wide ? 8 : 4;
  at->wide = wide;
  at->codes[0] = c.Take<std::byte>(rows * code);
  at->codes[1] = c.Take<std::byte>(rows * code);
  at->rows_alt = c.Take<std::uint32_t>(rows);
  at->unique = c.Take<std::uint64_t>(rows);
  at->counts = c.Take<std::uint32_t>(rows);
  at->starts = c.Take<std::uint64_t>(rows + 1);
  at->runs = c.Take<std::uint32_t>(1);
  // CUB's temporary storage: the largest of the sort's, the encode's and
  // the scan's for `rows` items.
  const int n = static_cast<int>(rows);
  TALLY_CUDA_TRY(wide ? CubBytes<std::uint64_t>(n, &at->cub_bytes) : CubBytes<std::uint32_t>(n, &at->cub_bytes));
  at->cub = c.Take<std::byte>(at->cub_bytes);
  at->cub_bytes = c.used();  // the whole scratch, for the size query
  return cudaSuccess;
}

template <typename F>
bool VisitKey(rules::DType dtype, F&& f) {
  switch (dtype) {
    case rules::DType::kInt8: f(std::int8_t{}); return true;
    case rules::DType::kInt16: f(std::int16_t{}); return true;
    case rules::DType::kInt32: f(std::int32_t{}); return true;
    case rules::DType::kInt64: f(std::int64_t{}); return true;
    case rules::DType::kUInt8: f(std::uint8_t{}); return true;
    case rules::DType::kUInt16: f(std::uint16_t{}); return true;
    case rules::DType::kUInt32: f(std::uint32_t{}); return true;
    case rules::DType::kUInt64: f(std::uint64_t{}); return true;
    case rules::DType::kBool: f(bool{}); return true;
    case rules::DType::kFloat16: f(Float16Key{}); return true;
    case rules::DType::kBFloat16: f(BFloat16Key{}); return true;
    case rules::DType::kFloat32: f(Float32Key{}); return true;
    case rules::DType::kFloat64: f(Float64Key{}); return true;
  }
  return false;
}

template <typename K>
cudaError_t Bounds(const GroupKeys& keys, unsigned long long* extremes, cudaStream_t stream, KeyBounds* out) {
  const auto* data = static_cast<const BitsOf<K>*>(keys.data);
  const std::uint64_t n = keys.rows;
  const unsigned long long init[2] = {~0ull, 0ull};
  TALLY_CUDA_TRY(cudaMemcpyAsync(extremes, init, sizeof init, cudaMemcpyHostToDevice, stream));
  KeyRangeKernel<K><<<Blocks(n), kThreads, 0, stream>>>(data, n, extremes, extremes + 1);
  TALLY_CUDA_CHECK_LAUNCH();
  unsigned long long found[2] = {0, 0};
  TALLY_CUDA_TRY(cudaMemcpyAsync(found, extremes, sizeof found, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  out->lowest = found[0];
  out->range = found[1] - found[0] + 1;  // 0: the whole 64-bit range
  return cudaSuccess;
}

// The rows sorted by their codes of type C, the runs of equal codes
// counted; the group count back on the host.
template <typename K, typename C>
cudaError_t SortAndCount(const GroupKeys& keys, const KeyBounds& bounds, const Layout& at, cudaStream_t stream,
                         std::uint32_t* rows_out, std::uint32_t* groups) {
  const auto* data = static_cast<const BitsOf<K>*>(keys.data);
  const std::uint64_t n = keys.rows;
  C* codes0 = static_cast<C*>(at.codes[0]);
  CodesKernel<K, C><<<Blocks(n), kThreads, 0, stream>>>(data, n, bounds.lowest, codes0, rows_out);
  TALLY_CUDA_CHECK_LAUNCH();
  const int bits = bounds.range == 0 ? 64 : bounds.range == 1 ? 1 : std::bit_width(bounds.range - 1);
  const int items = static_cast<int>(n);
  cub::DoubleBuffer<C> codes(codes0, static_cast<C*>(at.codes[1]));
  cub::DoubleBuffer<std::uint32_t> rows(rows_out, at.rows_alt);
  std::size_t cub_bytes = 0;
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, codes, rows, items, 0, bits, stream));
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(at.cub, cub_bytes, codes, rows, items, 0, bits, stream));
  if (rows.Current() != rows_out) {
    TALLY_CUDA_TRY(cudaMemcpyAsync(rows_out, rows.Current(), n * sizeof(std::uint32_t), cudaMemcpyDeviceToDevice,
                                   stream));
  }
  C* unique = static_cast<C*>(at.unique);
  TALLY_CUDA_TRY(cub::DeviceRunLengthEncode::Encode(nullptr, cub_bytes, codes.Current(), unique, at.counts, at.runs,
                                                    items, stream));
  TALLY_CUDA_TRY(cub::DeviceRunLengthEncode::Encode(at.cub, cub_bytes, codes.Current(), unique, at.counts, at.runs,
                                                    items, stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(groups, at.runs, sizeof *groups, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  return cudaSuccess;
}

template <typename K>
cudaError_t Order(const GroupKeys& keys, const KeyBounds& bounds, const Layout& at, cudaStream_t stream,
                  std::uint32_t* rows_out, KeyOrder* out) {
  std::uint32_t groups = 0;
  const cudaError_t sorted = at.wide ? SortAndCount<K, std::uint64_t>(keys, bounds, at, stream, rows_out, &groups)
                                     : SortAndCount<K, std::uint32_t>(keys, bounds, at, stream, rows_out, &groups);
  TALLY_CUDA_TRY(sorted);
  // Starts: the exclusive sum of the counts, one more entry for the end.
  std::size_t cub_bytes = 0;
  TALLY_CUDA_TRY(cudaMemsetAsync(at.counts + groups, 0, sizeof(std::uint32_t), stream));
  TALLY_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, cub_bytes, at.counts, at.starts, static_cast<int>(groups) + 1,
                                               stream));
  TALLY_CUDA_TRY(cub::DeviceScan::ExclusiveSum(at.cub, cub_bytes, at.counts, at.starts, static_cast<int>(groups) + 1,
                                               stream));
  auto* first_keys = static_cast<std::uint64_t*>(at.unique);  // the runs' codes are spent
  FirstKeysKernel<K><<<Blocks(groups), kThreads, 0, stream>>>(static_cast<const BitsOf<K>*>(keys.data), rows_out,
                                                               at.starts, groups, first_keys);
  TALLY_CUDA_CHECK_LAUNCH();
  out->groups = groups;
  out->keys.resize(groups);
  out->offsets.resize(groups + 1);
  TALLY_CUDA_TRY(cudaMemcpyAsync(out->keys.data(), first_keys, groups * sizeof(std::uint64_t), cudaMemcpyDeviceToHost,
                                 stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(out->offsets.data(), at.starts, (groups + 1) * sizeof(std::uint64_t),
                                 cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  out->nan_group = groups != 0 && IsNanKey<K>(static_cast<BitsOf<K>>(out->keys.back()));
  return cudaSuccess;
}

}  // namespace

bool GroupKeysSupported(rules::DType dtype) { return !rules::IsFloat(dtype); }

bool OrderedKeysSupported(rules::DType dtype) {
  return VisitKey(dtype, [](auto) {});
}

cudaError_t BoundsOfKeys(const GroupKeys& keys, void* scratch, cudaStream_t stream, KeyBounds* out) {
  if (!OrderedKeysSupported(keys.dtype) || keys.rows == 0) {
    return cuda::Record(cudaErrorInvalidValue, "BoundsOfKeys: keys not taken", __FILE__, __LINE__);
  }
  cudaError_t status = cudaSuccess;
  VisitKey(keys.dtype, [&](auto k) {
    status = Bounds<decltype(k)>(keys, static_cast<unsigned long long*>(scratch), stream, out);
  });
  return status;
}

cudaError_t GroupByKeyScratchBytes(const GroupKeys& keys, const KeyBounds& bounds, std::size_t* bytes) {
  if (!OrderedKeysSupported(keys.dtype) || keys.rows == 0 || keys.rows >= (std::uint64_t{1} << 31)) {
    return cuda::Record(cudaErrorInvalidValue, "GroupByKeyScratchBytes: keys not taken", __FILE__, __LINE__);
  }
  Layout at;
  TALLY_CUDA_TRY(LayOut(keys.rows, WideCodes(bounds.range), nullptr, &at));
  *bytes = at.cub_bytes;
  return cudaSuccess;
}

cudaError_t OrderByKey(const GroupKeys& keys, const KeyBounds& bounds, void* scratch, std::size_t scratch_bytes,
                       cudaStream_t stream, std::uint32_t* rows_out, KeyOrder* out) {
  std::size_t need = 0;
  TALLY_CUDA_TRY(GroupByKeyScratchBytes(keys, bounds, &need));
  if (scratch_bytes < need) return cuda::Record(cudaErrorInvalidValue, "OrderByKey: too little scratch", __FILE__, __LINE__);
  Layout at;
  TALLY_CUDA_TRY(LayOut(keys.rows, WideCodes(bounds.range), scratch, &at));
  cudaError_t status = cudaSuccess;
  VisitKey(keys.dtype, [&](auto k) { status = Order<decltype(k)>(keys, bounds, at, stream, rows_out, out); });
  return status;
}

cudaError_t NumberRows(const std::uint32_t* rows, std::uint64_t n, const std::uint64_t* starts, std::uint64_t groups,
                       std::uint32_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const std::uint64_t threads = (n + kNumberedPerThread - 1) / kNumberedPerThread;
  NumberRowsKernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      rows, n, starts, groups, out);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

cudaError_t GatherRows(std::size_t element_size, const void* values, const std::uint32_t* rows, std::uint64_t n,
                       void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (element_size) {
    case 1:
      GatherKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const std::uint8_t*>(values), rows, n,
                                                       static_cast<std::uint8_t*>(out));
      break;
    case 2:
      GatherKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const std::uint16_t*>(values), rows, n,
                                                       static_cast<std::uint16_t*>(out));
      break;
    case 4:
      GatherKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const std::uint32_t*>(values), rows, n,
                                                       static_cast<std::uint32_t*>(out));
      break;
    case 8:
      GatherKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const std::uint64_t*>(values), rows, n,
                                                       static_cast<std::uint64_t*>(out));
      break;
    default:
      return cuda::Record(cudaErrorInvalidValue, "GatherRows: element size", __FILE__, __LINE__);
  }
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace tally::kernels
