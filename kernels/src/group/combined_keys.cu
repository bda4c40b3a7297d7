// tally/kernels/group.h's composite keys: each key column's range (one
// read of the column), then every row's columns combined into one 64-bit
// key in mixed radix (one read of the columns, one write), which the
// one-key steps (OrderByKey, SumByKey) then group.
#include <algorithm>

#include "group/dense_slots.cuh"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/group.h"

namespace tally::kernels {
namespace {

using dense::KeyKind;
using dense::KeyReader;

constexpr int kThreads = 256;
// Keys a thread loads before it folds them, so that several loads are in
// flight (as RangeAndMagnitudeKernel's).
constexpr int kLoads = 4;

// The smallest and largest key as order-preserving numbers (lo_hi: the
// least, then the greatest; set to all ones and 0 by the caller).
template <int kBytes>
__global__ void ColumnRangeKernel(KeyReader<kBytes> keys, std::uint64_t n, unsigned long long* lo_hi) {
  std::uint64_t lo = ~0ull, hi = 0;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += kLoads * stride) {
    std::uint64_t k[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) k[u] = keys.Raw(i + u * stride < n ? i + u * stride : i);
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const std::uint64_t o = keys.Ordered(k[u]);
      lo = o < lo ? o : lo;
      hi = o > hi ? o : hi;
    }
  }
  for (int d = 16; d > 0; d /= 2) {
    const std::uint64_t a = __shfl_down_sync(0xffffffffu, lo, d), b = __shfl_down_sync(0xffffffffu, hi, d);
    lo = a < lo ? a : lo;
    hi = b > hi ? b : hi;
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMin(&lo_hi[0], lo);
    atomicMax(&lo_hi[1], hi);
  }
}

struct CombineColumn {
  const void* data;
  int bytes;
  KeyKind kind;
  std::uint64_t lowest;  // as KeyColumnsSpread::lowest
  std::uint64_t stride;
};
struct CombineArgs {
  int count;
  CombineColumn column[kMaxCombinedColumns];
};

// The key of column c at row i as a 64-bit integer (sign-extended for
// signed keys, 0 or 1 for bool): KeyBits of its ordered form.
__device__ std::uint64_t ValueAt(const CombineColumn& c, std::uint64_t i) {
  std::uint64_t raw = 0;
  std::uint64_t ordered = 0;
  switch (c.bytes) {
    case 1: raw = static_cast<const std::uint8_t*>(c.data)[i]; ordered = KeyReader<1>{c.data, c.kind}.Ordered(raw); break;
    case 2: raw = static_cast<const std::uint16_t*>(c.data)[i]; ordered = KeyReader<2>{c.data, c.kind}.Ordered(raw); break;
    case 4: raw = static_cast<const std::uint32_t*>(c.data)[i]; ordered = KeyReader<4>{c.data, c.kind}.Ordered(raw); break;
    default: raw = static_cast<const std::uint64_t*>(c.data)[i]; ordered = KeyReader<8>{c.data, c.kind}.Ordered(raw); break;
  }
  return dense::KeyBits(ordered, c.kind);
}

// out[i] = sum over columns of (value - lowest) x stride. Every thread
// takes the same column in turn, so the width's switch does not diverge.
__global__ void CombineKernel(CombineArgs args, std::uint64_t n, std::uint64_t* __restrict__ out) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    std::uint64_t key = 0;
    for (int c = 0; c < args.count; ++c) {
      const CombineColumn& col = args.column[c];
      key += (ValueAt(col, i) - col.lowest) * col.stride;
    }
    out[i] = key;
  }
}

int Blocks() { return dense::SmCount() * 4; }

bool Layout(const GroupKeys& column, int* bytes, KeyKind* kind) {
  return dense::KeyLayout(column.dtype, bytes, kind);
}

}  // namespace

cudaError_t SpreadOfKeyColumns(std::span<const GroupKeys> columns, void* scratch, cudaStream_t stream,
                               KeyColumnsSpread* out) {
  if (columns.empty() || columns.size() > kMaxCombinedColumns) {
    return cuda::Record(cudaErrorInvalidValue, "SpreadOfKeyColumns: 1 to 8 key columns", __FILE__, __LINE__);
  }
  auto* lo_hi = static_cast<unsigned long long*>(scratch);
  std::uint64_t init[2 * kMaxCombinedColumns];
  for (std::size_t c = 0; c < columns.size(); ++c) {
    init[2 * c] = ~0ull;
    init[2 * c + 1] = 0;
    int bytes = 0;
    KeyKind kind{};
    if (!Layout(columns[c], &bytes, &kind) || columns[c].rows != columns[0].rows || columns[c].rows == 0) {
      return cuda::Record(cudaErrorInvalidValue, "SpreadOfKeyColumns: a key dtype or row count not taken", __FILE__,
                          __LINE__);
    }
  }
  TALLY_CUDA_TRY(cudaMemcpyAsync(lo_hi, init, sizeof(std::uint64_t) * 2 * columns.size(), cudaMemcpyHostToDevice,
                                 stream));
  for (std::size_t c = 0; c < columns.size(); ++c) {
    int bytes = 0;
    KeyKind kind{};
    (void)Layout(columns[c], &bytes, &kind);
    TALLY_CUDA_TRY(dense::VisitKeyWidth(bytes, [&](auto width) -> cudaError_t {
      constexpr int kBytes = decltype(width)::value;
      ColumnRangeKernel<kBytes><<<Blocks(), kThreads, 0, stream>>>(KeyReader<kBytes>{columns[c].data, kind},
                                                                   columns[c].rows, lo_hi + 2 * c);
      TALLY_CUDA_CHECK_LAUNCH();
      return cudaSuccess;
    }));
  }
  std::uint64_t found[2 * kMaxCombinedColumns];
  TALLY_CUDA_TRY(cudaMemcpyAsync(found, lo_hi, sizeof(std::uint64_t) * 2 * columns.size(), cudaMemcpyDeviceToHost,
                                 stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  *out = KeyColumnsSpread{};
  out->columns = static_cast<std::uint32_t>(columns.size());
  unsigned __int128 product = 1;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    int bytes = 0;
    KeyKind kind{};
    (void)Layout(columns[c], &bytes, &kind);
    // The least key as its 64-bit integer; the range from the ordered
    // forms (their difference is the integers' difference).
    out->lowest[c] = kind == KeyKind::kSigned ? found[2 * c] ^ (std::uint64_t{1} << 63) : found[2 * c];
    const unsigned __int128 range = static_cast<unsigned __int128>(found[2 * c + 1] - found[2 * c]) + 1;
    out->range[c] = static_cast<std::uint64_t>(range);  // 0 for 2^64
    product *= range;
    if (product > (static_cast<unsigned __int128>(1) << 64)) product = static_cast<unsigned __int128>(1) << 65;
  }
  out->fits = product < (static_cast<unsigned __int128>(1) << 64);
  out->combined_range = out->fits ? static_cast<std::uint64_t>(product) : 0;
  return cudaSuccess;
}

cudaError_t CombineKeys(std::span<const GroupKeys> columns, const KeyColumnsSpread& spread, std::uint64_t* out,
                        cudaStream_t stream) {
  if (columns.size() != spread.columns || !spread.fits || columns.empty()) {
    return cuda::Record(cudaErrorInvalidValue, "CombineKeys: the spread is not these columns' or does not fit",
                        __FILE__, __LINE__);
  }
  CombineArgs args{};
  args.count = static_cast<int>(columns.size());
  std::uint64_t stride = 1;
  for (int c = args.count - 1; c >= 0; --c) {
    CombineColumn& col = args.column[c];
    if (!Layout(columns[c], &col.bytes, &col.kind)) {
      return cuda::Record(cudaErrorInvalidValue, "CombineKeys: a key dtype not taken", __FILE__, __LINE__);
    }
    col.data = columns[c].data;
    col.lowest = spread.lowest[c];
    col.stride = stride;
    stride *= spread.range[c];  // within 2^64: spread.fits
  }
  CombineKernel<<<Blocks(), kThreads, 0, stream>>>(args, columns[0].rows, out);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace tally::kernels
