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

// A key as an unsigned number that orders as the key does.
template <typename K>
__host__ __device__ std::uint64_t Ordered(K k) {
  if constexpr (std::is_same_v<K, bool>) {
    return k ? 1 : 0;
  } else if constexpr (std::is_signed_v<K>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(k)) ^ (std::uint64_t{1} << 63);
  } else {
    return static_cast<std::uint64_t>(k);
  }
}

template <typename K>
__global__ void KeyRangeKernel(const K* keys, std::uint64_t n, unsigned long long* lo, unsigned long long* hi) {
  std::uint64_t mine_lo = ~std::uint64_t{0}, mine_hi = 0;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t o = Ordered(keys[i]);
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

template <typename K>
__global__ void CodesKernel(const K* keys, std::uint64_t n, std::uint64_t lo, std::uint32_t* codes,
                            std::uint32_t* rows) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    codes[i] = static_cast<std::uint32_t>(Ordered(keys[i]) - lo);
    rows[i] = static_cast<std::uint32_t>(i);
  }
}

template <typename T>
__global__ void GatherKernel(const T* values, const std::uint32_t* rows, std::uint64_t n, T* out) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    out[i] = values[rows[i]];
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

// The scratch's arrays; the same walk sizes it (no base) and carves it.
struct Layout {
  unsigned long long* extremes = nullptr;  // lo, hi
  std::uint32_t* codes[2] = {nullptr, nullptr};
  std::uint32_t* rows_alt = nullptr;
  std::uint32_t* unique = nullptr;
  std::uint32_t* counts = nullptr;
  std::uint64_t* starts = nullptr;
  std::uint32_t* runs = nullptr;
  void* cub = nullptr;
  std::size_t cub_bytes = 0;
};

cudaError_t LayOut(std::uint64_t rows, void* base, Layout* at) {
  select::Carver c(base);
  at->extremes = c.Take<unsigned long long>(2);
  at->codes[0] = c.Take<std::uint32_t>(rows);
  at->codes[1] = c.Take<std::uint32_t>(rows);
  at->rows_alt = c.Take<std::uint32_t>(rows);
  at->unique = c.Take<std::uint32_t>(rows);
  at->counts = c.Take<std::uint32_t>(rows);
  at->starts = c.Take<std::uint64_t>(rows + 1);
  at->runs = c.Take<std::uint32_t>(1);
  // CUB's temporary storage: the largest of the sort's, the encode's and
  // the scan's for `rows` items.
  const int n = static_cast<int>(rows);
  std::size_t sort = 0, encode = 0, scan = 0;
  cub::DoubleBuffer<std::uint32_t> k(nullptr, nullptr), v(nullptr, nullptr);
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, sort, k, v, n, 0, 32));
  TALLY_CUDA_TRY(cub::DeviceRunLengthEncode::Encode(nullptr, encode, static_cast<std::uint32_t*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr), n));
  TALLY_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<std::uint32_t*>(nullptr),
                                               static_cast<std::uint64_t*>(nullptr), n + 1));
  at->cub_bytes = std::max(sort, std::max(encode, scan));
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
    default: return false;
  }
}

template <typename K>
cudaError_t Order(const GroupKeys& keys, std::uint64_t max_range, const Layout& at, cudaStream_t stream,
                  std::uint32_t* rows_out, KeyOrder* out) {
  const K* data = static_cast<const K*>(keys.data);
  const std::uint64_t n = keys.rows;
  const unsigned long long init[2] = {~0ull, 0ull};
  TALLY_CUDA_TRY(cudaMemcpyAsync(at.extremes, init, sizeof init, cudaMemcpyHostToDevice, stream));
  KeyRangeKernel<K><<<Blocks(n), kThreads, 0, stream>>>(data, n, at.extremes, at.extremes + 1);
  TALLY_CUDA_CHECK_LAUNCH();
  unsigned long long extremes[2] = {0, 0};
  TALLY_CUDA_TRY(cudaMemcpyAsync(extremes, at.extremes, sizeof extremes, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  const std::uint64_t range = extremes[1] - extremes[0] + 1;  // 0: the whole 64-bit range
  out->range = range;
  if (range == 0 || range > max_range || range > (std::uint64_t{1} << 32)) {
    return cuda::Record(cudaErrorInvalidValue, "the keys' range passes the device's limit", __FILE__, __LINE__);
  }
  CodesKernel<K><<<Blocks(n), kThreads, 0, stream>>>(data, n, extremes[0], at.codes[0], rows_out);
  TALLY_CUDA_CHECK_LAUNCH();
  const int bits = range <= 1 ? 1 : std::bit_width(range - 1);
  const int items = static_cast<int>(n);
  cub::DoubleBuffer<std::uint32_t> codes(at.codes[0], at.codes[1]);
  cub::DoubleBuffer<std::uint32_t> rows(rows_out, at.rows_alt);
  std::size_t cub_bytes = 0;
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, codes, rows, items, 0, bits, stream));
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(at.cub, cub_bytes, codes, rows, items, 0, bits, stream));
  if (rows.Current() != rows_out) {
    TALLY_CUDA_TRY(cudaMemcpyAsync(rows_out, rows.Current(), n * sizeof(std::uint32_t), cudaMemcpyDeviceToDevice,
                                   stream));
  }
  TALLY_CUDA_TRY(cub::DeviceRunLengthEncode::Encode(nullptr, cub_bytes, codes.Current(), at.unique, at.counts,
                                                    at.runs, items, stream));
  TALLY_CUDA_TRY(cub::DeviceRunLengthEncode::Encode(at.cub, cub_bytes, codes.Current(), at.unique, at.counts,
                                                    at.runs, items, stream));
  std::uint32_t groups = 0;
  TALLY_CUDA_TRY(cudaMemcpyAsync(&groups, at.runs, sizeof groups, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  // Starts: the exclusive sum of the counts, one more entry for the end.
  TALLY_CUDA_TRY(cudaMemsetAsync(at.counts + groups, 0, sizeof(std::uint32_t), stream));
  TALLY_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, cub_bytes, at.counts, at.starts, static_cast<int>(groups) + 1,
                                               stream));
  TALLY_CUDA_TRY(cub::DeviceScan::ExclusiveSum(at.cub, cub_bytes, at.counts, at.starts, static_cast<int>(groups) + 1,
                                               stream));
  std::vector<std::uint32_t> unique(groups);
  out->groups = groups;
  out->offsets.resize(groups + 1);
  TALLY_CUDA_TRY(cudaMemcpyAsync(unique.data(), at.unique, groups * sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                                 stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(out->offsets.data(), at.starts, (groups + 1) * sizeof(std::uint64_t),
                                 cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  out->keys.resize(groups);
  for (std::uint32_t g = 0; g < groups; ++g) {
    // Back from the ordered form to the key's own bytes.
    std::uint64_t o = extremes[0] + unique[g];
    if constexpr (std::is_signed_v<K> && !std::is_same_v<K, bool>) o ^= std::uint64_t{1} << 63;
    std::uint64_t bits64 = 0;
    const K k = static_cast<K>(o);
    std::memcpy(&bits64, &k, sizeof(K));
    out->keys[g] = bits64;
  }
  return cudaSuccess;
}

}  // namespace

bool GroupKeysSupported(rules::DType dtype) {
  return VisitKey(dtype, [](auto) {});
}

cudaError_t GroupByKeyScratchBytes(const GroupKeys& keys, std::size_t* bytes) {
  if (!GroupKeysSupported(keys.dtype) || keys.rows == 0 || keys.rows >= (std::uint64_t{1} << 31)) {
    return cuda::Record(cudaErrorInvalidValue, "GroupByKeyScratchBytes: keys not taken", __FILE__, __LINE__);
  }
  Layout at;
  TALLY_CUDA_TRY(LayOut(keys.rows, nullptr, &at));
  *bytes = at.cub_bytes;
  return cudaSuccess;
}

cudaError_t OrderByKey(const GroupKeys& keys, std::uint64_t max_range, void* scratch, std::size_t scratch_bytes,
                       cudaStream_t stream, std::uint32_t* rows_out, KeyOrder* out) {
  std::size_t need = 0;
  TALLY_CUDA_TRY(GroupByKeyScratchBytes(keys, &need));
  if (scratch_bytes < need) return cuda::Record(cudaErrorInvalidValue, "OrderByKey: too little scratch", __FILE__, __LINE__);
  Layout at;
  TALLY_CUDA_TRY(LayOut(keys.rows, scratch, &at));
  cudaError_t status = cudaSuccess;
  VisitKey(keys.dtype, [&](auto k) { status = Order<decltype(k)>(keys, max_range, at, stream, rows_out, out); });
  return status;
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
