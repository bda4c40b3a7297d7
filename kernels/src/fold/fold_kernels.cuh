// The fold pass: functions without a fused implementation (numpy.prod and
// numpy.count_nonzero, which any and all read) reduced by one generic
// kernel that takes the function's per-element value and combine as a
// functor, CUB-style. Same contract as the fused pass (aggregate.h): chunks
// in order with their global offset, rows of row_length (0: the whole
// array) that may span chunks, a validity mask read by bit, the same bits
// for the same input and chunk cuts (no atomics; fixed combine order).
//
// A functor F has:
//   using Acc = ...;                         // 8 bytes: the state's type
//   static Acc Identity();
//   static Acc Of(const void* chunk, uint64 i);  // element i of the chunk
//   static Acc Combine(Acc a, Acc b);        // a's elements come first
//
// Two shapes, chosen on the host by row length (FoldPolicy):
// - short rows: a group of G lanes (a power of two, at most a warp) per row
//   strides the row's elements in the chunk and reduces by shuffles; lane 0
//   writes the row (merged after the state when the row began in an
//   earlier chunk);
// - long rows (and whole arrays): each row's elements in the chunk are cut
//   into pieces of kPieceElements; a block reduces each piece into scratch,
//   then one block per row combines the row's pieces in order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "device_traits.cuh"
#include "policy.cuh"
#include "tally/kernels/aggregate.h"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::detail {

// numpy.prod's accumulator: float64 for float dtypes, int64 for signed and
// uint64 for unsigned integers and bool, wrapping modulo 2^64 (computed
// unsigned: signed overflow is undefined in C++). As the cpu backend's.
template <rules::DType D>
struct ProductFold {
  using T = typename DevTraits<D>::T;
  static constexpr bool kFloat = DevTraits<D>::kFloat;
  using Acc = std::conditional_t<kFloat, double,
                                 std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>>;
  static TALLY_DEV Acc Identity() { return Acc{1}; }
  static TALLY_DEV Acc Of(const void* chunk, std::uint64_t i) {
    const T x = static_cast<const T*>(chunk)[i];
    if constexpr (kFloat) {
      return ToDouble(x);
    } else {
      return static_cast<Acc>(x);
    }
  }
  static TALLY_DEV Acc Combine(Acc a, Acc b) {
    if constexpr (kFloat) {
      return a * b;
    } else {
      return static_cast<Acc>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
    }
  }

 private:
  static TALLY_DEV double ToDouble(T x) {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<double>(x);
    } else {
      return static_cast<double>(static_cast<float>(x));  // float16 and bfloat16: exact through float
    }
  }
};

// numpy.count_nonzero: elements that are not zero, NaN counting as nonzero
// and -0.0 as zero. Read as unsigned words of the element's width: a float's
// value is zero exactly when its bits but the sign are (`sign` is the sign
// bit for float dtypes, 0 for integers and bool), so one instantiation per
// width serves every dtype of it.
template <typename U>
struct NonzeroFold {
  using Acc = std::uint64_t;
  U sign;
  static TALLY_DEV Acc Identity() { return 0; }
  TALLY_DEV Acc Of(const void* chunk, std::uint64_t i) const {
    const U bits = static_cast<const U*>(chunk)[i];
    return (bits & static_cast<U>(~sign)) != 0 ? 1 : 0;
  }
  static TALLY_DEV Acc Combine(Acc a, Acc b) { return a + b; }
};

// What a fold launch reads and writes.
template <typename Acc>
struct FoldArgs {
  const void* chunk = nullptr;
  std::uint64_t n = 0;            // elements in the chunk
  std::uint64_t offset = 0;       // the chunk's first element in the array
  std::uint64_t row_length = 0;   // > 0 (the whole array: its length, at least 1)
  std::uint64_t first_row = 0;    // offset / row_length
  std::uint64_t rows = 0;         // rows with elements in the chunk
  const std::uint32_t* validity = nullptr;
  Acc* state = nullptr;           // Acc[rows of the array]
  Acc* pieces = nullptr;          // scratch, long rows only
  std::uint64_t row_pieces = 0;   // pieces of a row with all its elements in the chunk
  std::uint64_t first_pieces = 0; // pieces of the chunk's first row (it may be cut)
};

// Row k's (of the chunk's rows) elements in the chunk: [lo, hi), chunk indices.
template <typename Acc>
__host__ __device__ inline void RowRange(const FoldArgs<Acc>& a, std::uint64_t k, std::uint64_t& lo,
                                         std::uint64_t& hi) {
  const std::uint64_t start = (a.first_row + k) * a.row_length;
  const std::uint64_t end = start + a.row_length;
  lo = start > a.offset ? start - a.offset : 0;
  hi = end - a.offset < a.n ? end - a.offset : a.n;
}

inline __host__ __device__ std::uint64_t PiecesOf(std::uint64_t elements) {
  return (elements + FoldPolicy::kPieceElements - 1) / FoldPolicy::kPieceElements;
}

// The first piece of row k and its count: the first row and the last may
// be cut by the chunk; the rows between have row_pieces each.
template <typename Acc>
TALLY_DEV void RowPieces(const FoldArgs<Acc>& a, std::uint64_t k, std::uint64_t& first, std::uint64_t& count) {
  if (k == 0) {
    first = 0;
    count = a.first_pieces;
    return;
  }
  first = a.first_pieces + (k - 1) * a.row_pieces;
  std::uint64_t lo, hi;
  RowRange(a, k, lo, hi);
  count = PiecesOf(hi - lo);
}

template <typename Acc>
TALLY_DEV bool Valid(const FoldArgs<Acc>& a, std::uint64_t i) {
  if (a.validity == nullptr) return true;
  const std::uint64_t g = a.offset + i;
  return (a.validity[g >> 5] >> (g & 31) & 1u) != 0;
}

// Stores row k's fold of this chunk: merged after the state when the row
// began before the chunk.
template <typename F, typename Acc>
TALLY_DEV void StoreFoldRow(const FoldArgs<Acc>& a, std::uint64_t k, Acc v) {
  const std::uint64_t row = a.first_row + k;
  a.state[row] = row * a.row_length < a.offset ? F::Combine(a.state[row], v) : v;
}

// Combines `v` over groups of G lanes (xor butterfly: every lane ends with
// the same value, in an order fixed by G).
template <typename F, int G, typename Acc>
TALLY_DEV Acc GroupReduce(Acc v) {
#pragma unroll
  for (int m = 1; m < G; m <<= 1) {
    const Acc other = __shfl_xor_sync(0xffffffffu, v, m, G);
    // The lower lane's value first, so that both lanes combine alike.
    v = (threadIdx.x & m) == 0 ? F::Combine(v, other) : F::Combine(other, v);
  }
  return v;
}

// Short rows: G lanes per row.
template <typename F, int G, typename Acc = typename F::Acc>
__global__ void __launch_bounds__(FoldPolicy::kThreads) FoldShortRows(const F f, const FoldArgs<Acc> a) {
  const std::uint64_t t = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t k = t / G;
  const int lane = static_cast<int>(threadIdx.x % G);
  Acc v = F::Identity();
  if (k < a.rows) {
    std::uint64_t lo, hi;
    RowRange(a, k, lo, hi);
    for (std::uint64_t i = lo + lane; i < hi; i += G) {
      if (Valid(a, i)) v = F::Combine(v, f.Of(a.chunk, i));
    }
  }
  v = GroupReduce<F, G>(v);
  if (k < a.rows && lane == 0) StoreFoldRow<F>(a, k, v);
}

// A block's values combined in thread order's tree (warps by shuffles, then
// the warps' results by the first warp); the result in thread 0.
template <typename F, typename Acc>
TALLY_DEV Acc BlockFold(Acc v) {
  __shared__ Acc warps[FoldPolicy::kThreads / 32];
  v = GroupReduce<F, 32>(v);
  const int warp = static_cast<int>(threadIdx.x / 32);
  if (threadIdx.x % 32 == 0) warps[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = threadIdx.x < FoldPolicy::kThreads / 32 ? warps[threadIdx.x] : F::Identity();
    v = GroupReduce<F, 32>(v);
  }
  return v;
}

// Long rows, step 1: piece p of the chunk's rows into a.pieces[p].
template <typename F, typename Acc = typename F::Acc>
__global__ void __launch_bounds__(FoldPolicy::kThreads)
    FoldPieces(const F f, const FoldArgs<Acc> a, std::uint64_t total_pieces) {
  for (std::uint64_t p = blockIdx.x; p < total_pieces; p += gridDim.x) {
    // Which row: the first row's pieces, then row_pieces per row.
    const std::uint64_t k = p < a.first_pieces ? 0 : 1 + (p - a.first_pieces) / a.row_pieces;
    std::uint64_t first, count;
    RowPieces(a, k, first, count);
    std::uint64_t lo, hi;
    RowRange(a, k, lo, hi);
    const std::uint64_t begin = lo + (p - first) * FoldPolicy::kPieceElements;
    const std::uint64_t end = begin + FoldPolicy::kPieceElements < hi ? begin + FoldPolicy::kPieceElements : hi;
    Acc v = F::Identity();
#pragma unroll 4
    for (std::uint64_t i = begin + threadIdx.x; i < end; i += FoldPolicy::kThreads) {
      if (Valid(a, i)) v = F::Combine(v, f.Of(a.chunk, i));
    }
    v = BlockFold<F>(v);
    if (threadIdx.x == 0) a.pieces[p] = v;
    __syncthreads();  // `warps` is reused by the next piece
  }
}

// Long rows, step 2: one block per row combines its pieces in order.
template <typename F, typename Acc = typename F::Acc>
__global__ void __launch_bounds__(FoldPolicy::kThreads) FoldRowsOfPieces(const FoldArgs<Acc> a) {
  for (std::uint64_t k = blockIdx.x; k < a.rows; k += gridDim.x) {
    std::uint64_t first, count;
    RowPieces(a, k, first, count);
    Acc v = F::Identity();
    for (std::uint64_t j = threadIdx.x; j < count; j += FoldPolicy::kThreads) v = F::Combine(v, a.pieces[first + j]);
    v = BlockFold<F>(v);
    if (threadIdx.x == 0) StoreFoldRow<F>(a, k, v);
    __syncthreads();
  }
}

// Scratch of a fold over chunks of up to max_chunk elements: one Acc per
// piece (8 bytes), 256-byte aligned.
inline std::size_t FoldScratchBytes(const AggregatePlan& plan, std::uint64_t max_chunk) {
  const std::uint64_t row = plan.row_length == 0 ? plan.length : plan.row_length;
  if (row < FoldPolicy::kLongRowElements || max_chunk == 0) return 0;
  // Every row of a chunk has at most one cut piece, and at most
  // max_chunk / row + 2 rows touch a chunk.
  const std::uint64_t pieces = max_chunk / FoldPolicy::kPieceElements + 2 * (max_chunk / row + 2);
  return (pieces * 8 + 255) / 256 * 256;
}

template <int G, typename F, typename Acc>
cudaError_t LaunchShort(const F& f, const FoldArgs<Acc>& a, cudaStream_t stream) {
  const std::uint64_t threads = a.rows * G;
  const unsigned blocks = static_cast<unsigned>((threads + FoldPolicy::kThreads - 1) / FoldPolicy::kThreads);
  FoldShortRows<F, G><<<blocks, FoldPolicy::kThreads, 0, stream>>>(f, a);
  TALLY_CUDA_TRY(cudaGetLastError());
  return cudaSuccess;
}

// Folds chunk elements [offset, offset + n) into `state` (Acc[rows]).
template <typename F>
cudaError_t LaunchFold(const F& f, const AggregatePlan& plan, const void* chunk, std::uint64_t n,
                       std::uint64_t offset, typename F::Acc* state, void* scratch, std::size_t scratch_bytes,
                       const DeviceInfo& dev, cudaStream_t stream) {
  using Acc = typename F::Acc;
  FoldArgs<Acc> a;
  a.chunk = chunk;
  a.n = n;
  a.offset = offset;
  a.row_length = plan.row_length != 0 ? plan.row_length : (plan.length > 0 ? plan.length : 1);
  a.first_row = offset / a.row_length;
  a.rows = n == 0 ? 1 : (offset + n - 1) / a.row_length - a.first_row + 1;  // n == 0: an empty whole array
  a.validity = plan.validity;
  a.state = state;
  if (a.row_length < FoldPolicy::kLongRowElements) {
    // Lanes per row: about FoldPolicy::kElementsPerLane elements each, up to a warp.
    const std::uint64_t want = (a.row_length + FoldPolicy::kElementsPerLane - 1) / FoldPolicy::kElementsPerLane;
    if (want <= 1) return LaunchShort<1>(f, a, stream);
    if (want <= 2) return LaunchShort<2>(f, a, stream);
    if (want <= 4) return LaunchShort<4>(f, a, stream);
    if (want <= 8) return LaunchShort<8>(f, a, stream);
    if (want <= 16) return LaunchShort<16>(f, a, stream);
    return LaunchShort<32>(f, a, stream);
  }
  a.pieces = static_cast<Acc*>(scratch);
  a.row_pieces = PiecesOf(a.row_length);
  // The pieces: the first row's, row_pieces for each row between, the last's.
  auto pieces_of_row = [&](std::uint64_t k) {
    std::uint64_t lo, hi;
    RowRange(a, k, lo, hi);
    return PiecesOf(hi - lo);
  };
  a.first_pieces = pieces_of_row(0);
  std::uint64_t total = a.first_pieces;
  if (a.rows > 1) total += (a.rows - 2) * a.row_pieces + pieces_of_row(a.rows - 1);
  if (total * sizeof(Acc) > scratch_bytes) {
    return cuda::Record(cudaErrorInvalidValue, "fold scratch smaller than FoldScratchBytes", __FILE__, __LINE__);
  }
  const std::uint64_t resident = static_cast<std::uint64_t>(dev.sms) * FoldPolicy::kBlocksPerSm;
  if (total > 0) {
    FoldPieces<F><<<static_cast<unsigned>(total < resident ? total : resident), FoldPolicy::kThreads, 0, stream>>>(
        f, a, total);
    TALLY_CUDA_TRY(cudaGetLastError());
  }
  FoldRowsOfPieces<F><<<static_cast<unsigned>(a.rows < resident ? a.rows : resident), FoldPolicy::kThreads, 0,
                        stream>>>(a);
  TALLY_CUDA_TRY(cudaGetLastError());
  return cudaSuccess;
}

}  // namespace tally::kernels::detail
