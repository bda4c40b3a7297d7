// Grid level: the two kernels of a fused pass over one chunk, and the host
// code that sizes and launches them for one dtype (instantiated once per
// dtype in aggregate_<dtype>.cu).
//
//   SliceKernel  one or more blocks per row segment ("slices"); whole arrays
//                and rows longer than Policy::kTeamMaxRowBytes. With one slice
//                the block writes the row's state; with several each block
//                writes a partial and sets its flag to the call's nonce; the
//                block that sees all its row's flags set and wins the claim
//                merges the partials in slice order (no zeroing launch).
//   TeamKernel   short rows: a team of 1..32 lanes per row, many rows per
//                warp, grid-stride over rows.
//   RowVecKernel short rows of 2, 4 or 8 whole 16-byte vectors, lean ops,
//                whole rows in an aligned chunk: coalesced warp loads staged
//                in shared memory, then one lane per row.
//   SmallKernel  a small whole array (one block) with sum, min and max only:
//                the latency path, as lean as CUB's single-tile kernel.
//
// A plan with a validity mask or a NaN-skipping op takes the masking
// variants instead (SliceKernel kNanSimple or kEvery, TeamKernel kEvery),
// which read each vector's validity bits and test each element for NaN
// (ThreadAgg::AddOk); the other kernels never see either, so plain plans
// run exactly the code they ran before masks existed.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <atomic>
#include <chrono>
#include <random>

#include "../agent/agent_aggregate.cuh"
#include "../block/block_reduce.cuh"
#include "../exact/exact_dispatch.h"
#include "../exact/exact_in_fused.cuh"
#include "../shared_memory.cuh"
#include "tally/kernels/aggregate.h"
#include "tally/kernels/cuda_error.h"
#include "dispatch.h"

namespace tally::kernels::detail {

template <rules::DType D>
struct AggArgs {
  using T = typename DevTraits<D>::T;
  using B = typename DevTraits<D>::B;
  using BE = typename DevTraits<D>::BE;
  const T* chunk;
  const std::uint32_t* validity;  // the whole array's bitmap, or nullptr
  std::int64_t n;            // elements in the chunk
  std::uint64_t offset;      // global index of chunk[0]
  std::uint64_t row_length;  // 0: whole array
  std::uint64_t first_row;   // row of chunk[0]
  std::int64_t segments;     // rows the chunk touches
  std::int64_t slices;       // SliceKernel: blocks per segment
  int team_lanes;            // TeamKernel: lanes per row
  Want want;
  rules::HistogramBinner<B, BE> binner;
  std::uint32_t hist_stride;  // bins + 3
  int cluster;                // blocks sharing one histogram (1: none)
  std::uint32_t per_rank;     // counters each block of a cluster holds
  bool edge_table;
  HistQuick<B, BE> quick;
  StateView state;
  Partial<D>* partials;  // [segments * slices] when slices > 1
  // When slices > 1 (no zeroing launch: the caller's scratch holds anything):
  // each block sets its flag to this call's nonce after writing its partial;
  // a block that then sees every flag of its segment set claims the merge
  // by exchanging the nonce into the segment's claim word (exactly one
  // block gets back a value that is not the nonce).
  unsigned long long* flags;   // [segments * slices]
  unsigned long long* claims;  // [segments]
  unsigned long long nonce;    // unique per call in this process (64-bit)
  // SliceKernel's kExact: the exact pass's states (exact/exact_dispatch.h).
  unsigned long long* exact_sum;
  unsigned long long* exact_squares;
};

struct Segment {
  std::int64_t begin, end;  // chunk-local element range
  std::int64_t shift;       // chunk index + shift = index within the row
  std::uint64_t row;
  bool fresh;  // holds the row's first element: overwrite the state
};

template <rules::DType D>
TALLY_DEV Segment SegmentOf(const AggArgs<D>& a, std::int64_t j) {
  if (a.row_length == 0) {
    return Segment{0, a.n, static_cast<std::int64_t>(a.offset), 0, a.offset == 0};
  }
  const std::uint64_t row = a.first_row + static_cast<std::uint64_t>(j);
  const std::uint64_t rs = row * a.row_length, re = rs + a.row_length;
  const std::uint64_t cb = a.offset, ce = a.offset + static_cast<std::uint64_t>(a.n);
  Segment s;
  s.begin = static_cast<std::int64_t>((rs > cb ? rs : cb) - cb);
  s.end = static_cast<std::int64_t>((re < ce ? re : ce) - cb);
  s.shift = static_cast<std::int64_t>(cb) - static_cast<std::int64_t>(rs);
  s.row = row;
  s.fresh = rs >= cb;
  return s;
}

// Variants: the lean one (sum, min, max, sum of squares, argmin, argmax)
// compiles without moments and histogram and needs far fewer registers, so
// more blocks share an SM and more loads are in flight; kHist adds the
// histogram (no moments); kHistWide is kHist for histograms too large for
// one block's u32 counters (HistSink::kShared16, one 1024-thread block per
// SM); kFull has everything; kSimple is sum, min and max alone, lean enough
// for long groups of loads; kHistOnly is a histogram alone (the common
// request), lean enough for 4 blocks per SM. The masking variants (a
// validity mask, NaN-skipping ops): kNanSimple is sums, extremes and
// counts, plain and NaN-skipping, as lean as kSimple; kEvery has every
// field of both. Eight slice variants and three team variants per dtype,
// not one per op subset.
enum Variant : int {
  kLean = 0, kHist = 1, kFull = 2, kHistWide = 3, kSimple = 4, kHistOnly = 5, kNanSimple = 6, kEvery = 7
};
constexpr bool MaskingVariant(int variant) { return variant == kNanSimple || variant == kEvery; }

template <rules::DType D>
TALLY_DEV Want VariantWant(Want w, int variant) {
  if (!MaskingVariant(variant) || !DevTraits<D>::kFloat)
    w.nsum = w.ncount = w.nmin = w.nmax = w.nmom = w.namin = w.namax = false;
  if (!MaskingVariant(variant)) w.count = false;
  if (variant == kNanSimple) w.sumsq = w.moments = w.argmin = w.argmax = w.hist = w.nmom = w.namin = w.namax = false;
  if (variant == kLean) w.moments = w.hist = false;
  if (variant == kHist || variant == kHistWide) w.moments = false;
  if (variant == kSimple) w.sumsq = w.moments = w.argmin = w.argmax = w.hist = false;
  if (variant == kHistOnly) w.sum = w.min = w.max = w.sumsq = w.moments = w.argmin = w.argmax = false;
  return w;
}

// exact: SliceKernel's kExact, for elements of elem_bytes.
constexpr int SliceBlocksPerSm(int variant, int exact = 0, int elem_bytes = 4) {
  return exact != 0         ? Policy::ExactFusedBlocksPerSm(elem_bytes, variant == kLean, exact == 2)
         : variant == kLean ? Policy::kLeanBlocksPerSm
         : variant == kHist ? Policy::kHistBlocksPerSm
         : variant == kFull ? Policy::kFullBlocksPerSm
         : variant == kSimple ? Policy::kSimpleBlocksPerSm
         : variant == kHistOnly ? Policy::kHistOnlyBlocksPerSm
         : variant == kNanSimple ? Policy::kNanSimpleBlocksPerSm
         : variant == kEvery ? Policy::kEveryBlocksPerSm
                            : 1;
}
// Whether the variant's loop keeps the next tile's loads in flight while it
// adds this one (AccumulateRange's kPipe).
constexpr bool SlicePipelined(int variant) {
  return variant == kLean ? Policy::kLeanPipelined
         : (variant == kHist || variant == kHistOnly) ? Policy::kHistPipelined : false;
}
// Whether the variant's warps pool their argmin/argmax candidates
// (ThreadAgg::ShareWarp): the lean kernel, which searches a new candidate's
// group at once. The others defer that search (a new candidate costs them
// a few moves), and the floors' registers raised their spills (float32
// kHist 20 -> 36 bytes, kHistWide 12 -> 28; kFull, integers 0 -> 4).
constexpr bool SliceWarpShare(int variant) { return variant == kLean; }
constexpr int SliceThreads(int variant) {
  return variant == kHistWide ? Policy::kHistWideThreads : Policy::kThreads;
}
template <rules::DType D>
constexpr int SliceVecs(int variant) {
  constexpr int kBytes = static_cast<int>(sizeof(typename DevTraits<D>::T));
  return variant == kHist       ? Policy::HistVecs(kBytes)
         : variant == kHistOnly ? Policy::HistOnlyVecs(kBytes)
         : variant == kHistWide ? Policy::HistWideVecs(kBytes)
         : variant == kSimple   ? Policy::SimpleVecs(kBytes)
         : variant == kLean     ? Policy::LeanVecs(kBytes)
         : variant == kNanSimple ? Policy::SimpleVecs(kBytes)
                                : Policy::VecsPerThread(kBytes);
}
// kHistWide: full tiles between barriers. A window between two barriers
// holds at most (tiles + 1) * tile - 1 elements (after the last barrier: the
// tiles, a partial tile and the scalar tail), which must stay within the
// 0x7FFF increments HistThread::Count16 allows.
template <rules::DType D>
constexpr int WideSyncTiles() {
  constexpr int kTile = Policy::kHistWideThreads * SliceVecs<D>(kHistWide) * DevTraits<D>::kVec;
  return 0x8000 / kTile - 1;
}

// kExact (float32 and float64, the plain variants but kFull and
// kHistWide): 1, the exact pass rides along (exact/exact_in_fused.cuh); 2,
// with the squares'.
template <rules::DType D, int kVariant, int kExact = 0>
__global__ void __launch_bounds__(SliceThreads(kVariant),
                                  SliceBlocksPerSm(kVariant, kExact, sizeof(typename DevTraits<D>::T)))
    SliceKernel(const AggArgs<D> a) {
  constexpr int kU = SliceVecs<D>(kVariant);
  constexpr int kSync = kVariant == kHistWide ? WideSyncTiles<D>() : 0;
  static_assert(kVariant != kHistWide || kSync >= 1, "kShared16 needs a barrier at least every tile");
  static_assert(kVariant != kHistWide ||
                (kSync + 1) * Policy::kHistWideThreads * kU * DevTraits<D>::kVec - 1 <= 0x7FFF);
  using B = typename DevTraits<D>::B;
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) unsigned char dyn_smem[];
  __shared__ BlockReduceStorage<D> red;
  __shared__ bool is_last;
  __shared__ unsigned long long exact_digits[kExact != 0 ? exact::kDigits : 1];
  __shared__ unsigned long long exact_square_digits[kExact == 2 ? exact::kDigits : 1];
  const exact::Digits exact_block{exact_digits, exact_square_digits};
  if constexpr (kExact != 0) {
    exact::ClearBlockDigits(exact_block, kExact == 2);
    __syncthreads();
  }

  const Want w = VariantWant<D>(a.want, kVariant);
  const std::int64_t j = blockIdx.x / a.slices, s = blockIdx.x % a.slices;
  const Segment seg = SegmentOf(a, j);

  HistThread<B, typename DevTraits<D>::BE> hist{a.binner, nullptr, nullptr, nullptr, a.per_rank,
                     kVariant == kHistWide ? HistSink::kShared16
                     : a.cluster > 1       ? HistSink::kCluster
                                           : HistSink::kShared,
                     a.quick};
  if (w.hist) {
    hist.counts = reinterpret_cast<unsigned*>(dyn_smem);
    if (kVariant == kHistWide) hist.global = a.state.hist + seg.row * a.hist_stride;
    for (std::uint32_t i = threadIdx.x; i < a.per_rank; i += blockDim.x) hist.counts[i] = 0;
    if (a.edge_table) {
      B* edges = reinterpret_cast<B*>(dyn_smem + (a.per_rank * 4 + 15) / 16 * 16);
      for (std::int32_t i = threadIdx.x; i <= a.binner.bins; i += blockDim.x)
        edges[i] = a.binner.Edge(i);
      hist.edges = edges;
    }
    if (a.cluster > 1) cg::this_cluster().sync();
    else __syncthreads();
  }

  // The histogram variants defer the argmin/argmax search (ArgOp::UpdateGroup).
  constexpr bool kDefer = kVariant == kHist || kVariant == kHistWide || kVariant == kFull;
  static_assert(!kDefer || DevTraits<D>::kVec > 4 || kU <= ThreadAgg<D>::kMaxGroupVecs,
                "a deferred group must fit ArgOp::Resolve's loads");
  constexpr bool kMasking = MaskingVariant(kVariant);
  ThreadAgg<D, kMasking> agg(w, &hist, kDefer);
  if constexpr (kExact != 0) {
    static_assert(!kMasking && (D == rules::DType::kFloat32 || D == rules::DType::kFloat64));
    exact::ExactInFused<kExact == 2, typename DevTraits<D>::T> sums{};
    sums.block = exact_block;
    AggWithExact<D, kExact == 2> both{agg, sums};
    AccumulateRange<D, kU, kSync, SlicePipelined(kVariant), SliceWarpShare(kVariant)>(
        a.chunk, seg.begin, seg.end, threadIdx.x, blockDim.x, seg.shift, both, s, a.slices);
    sums.End(a.exact_sum, a.exact_squares);
  } else if constexpr (kMasking) {
    AccumulateRangeOk<D, kU, kVariant == kNanSimple>(a.chunk, seg.begin, seg.end, threadIdx.x, blockDim.x,
                                                     seg.shift, agg, s, a.slices, a.validity, a.offset);
  } else {
    AccumulateRange<D, kU, kSync, SlicePipelined(kVariant), SliceWarpShare(kVariant)>(
        a.chunk, seg.begin, seg.end, threadIdx.x, blockDim.x, seg.shift, agg, s, a.slices);
  }
  Partial<D> p = BlockReduce(agg.Finish(a.chunk, seg.shift, static_cast<std::int64_t>(blockDim.x) * DevTraits<D>::kVec), w, red);

  if (w.hist) {
    if (a.cluster > 1) cg::this_cluster().sync();
    else __syncthreads();
    const std::uint32_t rank = a.cluster > 1 ? cg::this_cluster().block_rank() : 0;
    unsigned long long* row_hist = a.state.hist + seg.row * a.hist_stride;
    const std::int32_t bins = a.binner.bins;
    if (kVariant == kHistWide) {
      // per_rank words: Wide16Words packed pairs of slots, then NaN's.
      const std::uint32_t pairs = Wide16Words(bins);
      for (std::uint32_t i = threadIdx.x; i < a.per_rank; i += blockDim.x) {
        const unsigned c = hist.counts[i];
        if (c == 0) continue;
        if (i < pairs) {
          if (c & 0xFFFFu) atomicAdd(row_hist + StateSlot(2 * i, bins), static_cast<unsigned long long>(c & 0xFFFFu));
          if (c >> 16) atomicAdd(row_hist + StateSlot(2 * i + 1, bins), static_cast<unsigned long long>(c >> 16));
        } else {
          atomicAdd(row_hist + bins + 2, static_cast<unsigned long long>(c));
        }
      }
    } else {
      for (std::uint32_t i = threadIdx.x; i < a.per_rank; i += blockDim.x) {
        const std::uint32_t slot = rank * a.per_rank + i;
        const unsigned c = hist.counts[i];
        if (c != 0 && slot < a.hist_stride)
          atomicAdd(row_hist + StateSlot(slot, bins), static_cast<unsigned long long>(c));
      }
    }
  }

  if (a.slices == 1) {
    if (threadIdx.x == 0) StoreRow(a.state, seg.row, p, seg.fresh, w);
    return;
  }
  // Several blocks per segment: publish this block's partial, and merge
  // the segment's partials if every flag is set and this block wins the
  // claim. Every block ends here at about the same moment, so the last
  // one's tail is time the whole GPU waits: each thread issues several
  // flag loads (and the merging block several partial loads, of the wanted
  // words only) before it uses any, so that each step costs about one
  // round trip to L2 rather than one per load.
  constexpr int kFlagLoads = Policy::kTailFlagLoads;
  constexpr int kPartialLoads =
      (kVariant == kSimple || kVariant == kLean || kVariant == kNanSimple) ? Policy::kTailPartialLoads : 1;
  const unsigned words = PartialWords<D>(w);
  if (words == 0) return;  // a histogram alone: its counts are in the state already
  // One sequentially consistent fence per block, in thread 0: the barrier
  // orders the block's flag loads after it. (Every thread fenced before;
  // that fence drew a quarter of a 4 MiB argmax's stall samples, but most
  // of it was waiting that the end of the kernel hid: 4 MiB sum 407 -> 416
  // GB/s, 16 MiB and up unchanged.)
  if (threadIdx.x == 0) {
    StorePartialCg(a.partials + blockIdx.x, p, words);
    FenceAcqRel();  // the partial, then the flag that announces it
    StoreFlag(a.flags + blockIdx.x, a.nonce);
    FenceSc();  // the flag, then the others' flags
  }
  __syncthreads();
  unsigned missing = 0;
  for (std::int64_t k0 = threadIdx.x; k0 < a.slices; k0 += kFlagLoads * blockDim.x) {
    unsigned long long f[kFlagLoads];
#pragma unroll
    for (int u = 0; u < kFlagLoads; ++u) {
      const std::int64_t k = k0 + static_cast<std::int64_t>(u) * blockDim.x;
      f[u] = k < a.slices ? LoadFlag(a.flags + j * a.slices + k) : a.nonce;
    }
#pragma unroll
    for (int u = 0; u < kFlagLoads; ++u) missing |= f[u] != a.nonce;
  }
  if (!__syncthreads_and(missing == 0)) return;
  if (threadIdx.x == 0) is_last = atomicExch(a.claims + j, a.nonce) != a.nonce;
  __syncthreads();
  if (!is_last) return;
  FenceAcqRel();  // the flags seen, then the partials they announced
  // Fixed order whichever block finishes last: thread t merges partials
  // t, t + blockDim, ... in sequence, then the block tree.
  Partial<D> r = IdentityPartial<D>();
  for (std::int64_t k0 = threadIdx.x; k0 < a.slices; k0 += kPartialLoads * blockDim.x) {
    Partial<D> q[kPartialLoads];
#pragma unroll
    for (int u = 0; u < kPartialLoads; ++u) {
      const std::int64_t k = k0 + static_cast<std::int64_t>(u) * blockDim.x;
      q[u] = k < a.slices ? LoadPartialCg(a.partials + j * a.slices + k, words) : IdentityPartial<D>();
    }
#pragma unroll
    for (int u = 0; u < kPartialLoads; ++u)
      if (k0 + static_cast<std::int64_t>(u) * blockDim.x < a.slices) MergeInto(r, q[u], w);
  }
  r = BlockReduce(r, w, red);
  if (threadIdx.x == 0) StoreRow(a.state, seg.row, r, seg.fresh, w);
}

// kVariant: kLean, kFull or kEvery (the masking one).
template <rules::DType D, int kVariant>
__global__ void __launch_bounds__(Policy::kThreads, kVariant == kLean ? Policy::kTeamLeanBlocksPerSm
                                                    : kVariant == kFull ? Policy::kTeamFullBlocksPerSm
                                                                        : Policy::kTeamEveryBlocksPerSm)
    TeamKernel(const AggArgs<D> a) {
  using B = typename DevTraits<D>::B;
  constexpr bool kMasking = MaskingVariant(kVariant);
  const Want w = VariantWant<D>(a.want, kVariant);
  const int g = a.team_lanes;
  const std::int64_t gtid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t team = gtid / g;
  const int lane = static_cast<int>(gtid % g);
  const std::int64_t teams = static_cast<std::int64_t>(gridDim.x) * blockDim.x / g;
  const std::int64_t warp_team = (gtid & ~std::int64_t{31}) / g;  // first team of this warp
  for (std::int64_t it = 0; warp_team + it * teams < a.segments; ++it) {
    const std::int64_t j = team + it * teams;
    const bool active = j < a.segments;
    Segment seg = active ? SegmentOf(a, j) : Segment{0, 0, 0, 0, false};
    HistThread<B, typename DevTraits<D>::BE> hist{a.binner, nullptr, nullptr,
                       w.hist && active ? a.state.hist + seg.row * a.hist_stride : nullptr, 0,
                       HistSink::kGlobal, a.quick};
    ThreadAgg<D, kMasking> agg(w, &hist);
    if constexpr (kMasking) {
      AccumulateRangeOk<D, Policy::VecsPerThread(static_cast<int>(sizeof(typename DevTraits<D>::T)))>(
          a.chunk, seg.begin, seg.end, lane, g, seg.shift, agg, 0, 1, a.validity, a.offset);
    } else {
      AccumulateRange<D>(a.chunk, seg.begin, seg.end, lane, g, seg.shift, agg);
    }
    const Partial<D> p = TeamReduce(agg.Finish(a.chunk, seg.shift, static_cast<std::int64_t>(g) * DevTraits<D>::kVec), g, w);
    if (active && lane == 0) StoreRow(a.state, seg.row, p, seg.fresh, w);
  }
}

// Rows of g = a.team_lanes vectors each (g = 2, 4 or 8; whole rows of the
// chunk, 16-byte aligned), lean ops. Each warp loads 256 consecutive vectors
// (8 coalesced loads per lane in flight), stages them in shared memory (rows
// padded to g + 1 vectors: the reads below are free of bank conflicts), and
// then each lane reduces whole rows alone: no shuffles, and no load
// instruction touching 32 different lines (one lane per row straight from
// global memory reached 79% of the read ceiling for rows of 32 float32; a
// team of 8 lanes per row with shuffle reductions 24%).
template <rules::DType D>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kRowVecBlocksPerSm)
    RowVecKernel(const AggArgs<D> a) {
  using T = typename DevTraits<D>::T;
  constexpr int K = DevTraits<D>::kVec;
  constexpr int kLoads = Policy::kRowVecLoads;  // per lane per round
  constexpr int kVecs = 32 * kLoads;           // per warp per round
  constexpr int kWarps = Policy::kThreads / 32;
  // Staging: at most kVecs / 2 rows of 3 vectors (g = 2).
  __shared__ uint4 stage[kWarps][kVecs / 2 * 3];
  const Want w = VariantWant<D>(a.want, kLean);
  const int g = a.team_lanes;
  const int pitch = g + 1;
  const int lg = g == 2 ? 1 : (g == 4 ? 2 : 3);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t gw = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarps;
  const std::int64_t total = a.segments * g;  // vectors in the chunk
  const int rows_per_round = kVecs / g;
  const uint4* vp = reinterpret_cast<const uint4*>(a.chunk);
  uint4* st = stage[warp];
  for (std::int64_t v0 = gw * kVecs; v0 < total; v0 += warps * kVecs) {
    uint4 x[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const std::int64_t i = v0 + k * 32 + lane;
      x[k] = i < total ? __ldg(vp + i) : uint4{};
    }
    __syncwarp();  // the previous round's reads are done
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int i = k * 32 + lane;
      st[(i >> lg) * pitch + (i & (g - 1))] = x[k];
    }
    __syncwarp();
    const std::int64_t row0 = v0 / g;
    for (int r = lane; r < rows_per_round; r += 32) {
      const std::int64_t j = row0 + r;
      if (j >= a.segments) break;
      ThreadAgg<D> agg(w, nullptr);
      for (int c = 0; c < g; ++c) {
        T e[1][K];
        std::memcpy(&e[0][0], &st[r * pitch + c], 16);
        const std::int64_t base[1] = {static_cast<std::int64_t>(c) * K};
        agg.template Add<1, K>(e, base, 1);
      }
      // Row j's elements: a.chunk + j * g * K, indices from 0.
      StoreRow(a.state, a.first_row + j, agg.Finish(a.chunk + j * g * K, 0, 0), true, w);
    }
  }
}

// A whole array of at most Policy::kSmallMaxBytes, sum, min and max only, in
// one block. SliceKernel<kSimple> gives the same kind of answer, but on one
// block its generality (64-bit tile arithmetic, the full Partial through
// the block reduction, the histogram and tail paths it branches around) is
// the latency: 5850 warp instructions and ~2 us more device time than an
// empty kernel for 1K float32; this one takes about what CUB's single-tile
// kernel does (docs/performance.md). Deterministic: a fixed split over the
// threads and a fixed reduction tree.
template <rules::DType D>
__global__ void __launch_bounds__(Policy::kThreads) SmallKernel(const AggArgs<D> a) {
  using T = typename DevTraits<D>::T;
  using S = typename DevTraits<D>::S;
  using E = typename DevTraits<D>::E;
  using X = ExtremeOp<D>;
  constexpr int K = DevTraits<D>::kVec;
  const Want w = VariantWant<D>(a.want, kSimple);
  const int n = static_cast<int>(a.n);
  const auto addr = reinterpret_cast<std::uintptr_t>(a.chunk);
  const int to_aligned = static_cast<int>(((16 - (addr & 15)) & 15) / sizeof(T));
  const int head = to_aligned < n ? to_aligned : n;
  const int nv = (n - head) / K;
  S sum = SumOp<D>::Identity();
  T mn = X::MinIdentity(), mx = X::MaxIdentity();
  auto extremes = [&](T x) {
    mn = X::Min(mn, x);
    mx = X::Max(mx, x);
  };
  auto add = [&](T x) {
    sum = SumOp<D>::Merge(sum, SumOp<D>::Lift(x));
    extremes(x);
  };
  for (int i = threadIdx.x; i < head; i += blockDim.x) add(a.chunk[i]);
  const uint4* vp = reinterpret_cast<const uint4*>(a.chunk + head);
#pragma unroll 4
  for (int v = threadIdx.x; v < nv; v += blockDim.x) {
    T x[K];
    LoadVec<T, K>(x, vp + v);
    sum = SumOp<D>::Merge(sum, SumOp<D>::template Group<K>(x));
#pragma unroll
    for (int e = 0; e < K; ++e) extremes(x[e]);
  }
  for (int i = head + nv * K + threadIdx.x; i < n; i += blockDim.x) add(a.chunk[i]);

  // Warps by shuffles, then warp 0 over the warps' results; the fields in
  // `w` only (the others were computed above for free but are not stored).
  __shared__ S warp_sum[Policy::kThreads / 32];
  __shared__ E warp_min[Policy::kThreads / 32], warp_max[Policy::kThreads / 32];
  E lo = static_cast<E>(mn), hi = static_cast<E>(mx);
  auto reduce_warp = [&] {
    for (int m = 16; m > 0; m >>= 1) {
      if (w.sum) sum = SumOp<D>::Merge(sum, ShflXor(sum, m, 32));
      if (w.min) lo = X::MergeMin(lo, ShflXor(lo, m, 32));
      if (w.max) hi = X::MergeMax(hi, ShflXor(hi, m, 32));
    }
  };
  reduce_warp();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    warp_sum[warp] = sum;
    warp_min[warp] = lo;
    warp_max[warp] = hi;
  }
  __syncthreads();
  if (warp != 0) return;
  const bool have = lane < static_cast<int>(blockDim.x >> 5);
  sum = have ? warp_sum[lane] : SumOp<D>::Identity();
  lo = have ? warp_min[lane] : static_cast<E>(X::MinIdentity());
  hi = have ? warp_max[lane] : static_cast<E>(X::MaxIdentity());
  reduce_warp();
  if (lane == 0) {
    Partial<D> p = IdentityPartial<D>();
    p.sum = sum;
    p.min = lo;
    p.max = hi;
    StoreRow(a.state, 0, p, /*fresh=*/true, w);
  }
}

// ---- host side -----------------------------------------------------------

// How one chunk is processed; the same function sizes scratch and launches.
struct LaunchShape {
  bool team;
  bool rowvec;  // team.lanes = vectors per row, RowVecKernel
  std::int64_t segments;
  std::int64_t slices;
  int team_lanes;
  int cluster;
  std::uint32_t per_rank;
  bool edge_table;
  std::size_t smem;
  std::int64_t blocks;
  int threads;  // per block
  bool wide;    // SliceKernel<kHistWide>
};

inline std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline bool NeedsFull(const Want& w) { return w.moments || w.hist; }


template <rules::DType D>
using KernelFn = void (*)(AggArgs<D>);
// The team kernel for a plan's rows.
template <rules::DType D>
KernelFn<D> TeamKernelFor(const Want& w) {
  if (w.Masking()) return TeamKernel<D, kEvery>;
  return NeedsFull(w) ? TeamKernel<D, kFull> : TeamKernel<D, kLean>;
}

// With kExact (float32 and float64), the variant that takes the exact pass
// inside, or null where none does (masks and NaN-skipping ops, moments,
// wide histograms: the exact pass then runs on its own).
template <rules::DType D, int kExact = 0>
KernelFn<D> SliceKernelFor(const Want& w, bool wide) {
  if constexpr (kExact == 0) {
    if (w.Masking()) return w.OnlySimpleMasking() ? SliceKernel<D, kNanSimple> : SliceKernel<D, kEvery>;
    if (w.moments) return SliceKernel<D, kFull>;
    if (wide && w.hist) return SliceKernel<D, kHistWide>;
  } else {
    if (w.Masking() || w.moments || (wide && w.hist)) return nullptr;
  }
  if (w.OnlyHistogram()) return SliceKernel<D, kHistOnly, kExact>;
  if (w.hist) return SliceKernel<D, kHist, kExact>;
  if (w.OnlySumMinMax()) return SliceKernel<D, kSimple, kExact>;
  return SliceKernel<D, kLean, kExact>;
}

// SliceKernelFor by the exact pass's mode (0: none, 1: sums, 2: and
// squares); only float32 and float64 have the exact variants.
template <rules::DType D>
KernelFn<D> SliceKernelOf(const Want& w, bool wide, int exact_mode) {
  if constexpr (D == rules::DType::kFloat32 || D == rules::DType::kFloat64) {
    if (exact_mode == 1) return SliceKernelFor<D, 1>(w, wide);
    if (exact_mode == 2) return SliceKernelFor<D, 2>(w, wide);
  }
  return exact_mode == 0 ? SliceKernelFor<D>(w, wide) : nullptr;
}

// The whole array in one call, small, and sum, min and max only: SmallKernel.
// Decided by the plan alone (a whole array's one chunk), so a request
// always takes the same kernel and gets the same bits.
template <rules::DType D>
bool Small(const AggregatePlan& plan, std::uint64_t n, std::uint64_t offset, const Want& w) {
  return plan.row_length == 0 && offset == 0 && n == plan.length &&
         n * sizeof(typename DevTraits<D>::T) <= static_cast<std::uint64_t>(Policy::kSmallMaxBytes) &&
         w.OnlySumMinMax();
}

// Histograms whose u32 counters do not fit one block and that need no
// moments take SliceKernel<kHistWide> (Policy::kHistWideThreads).
inline bool WideHistogram(const AggregatePlan& plan, const Want& w) {
  return w.hist && !w.moments && !w.Masking() &&
         static_cast<std::int64_t>(plan.histogram.bins + 3) * 4 > Policy::kHistCountBytesPerBlock;
}

// whole_rows: the chunk is 16-byte aligned and holds whole rows only (the
// RowVecKernel's preconditions besides the plan's).
// exact_mode: the slice kernel's (SliceKernelOf), which must exist.
template <rules::DType D>
cudaError_t ShapeFor(const AggregatePlan& plan, std::int64_t n, std::int64_t segments,
                     const DeviceInfo& dev, bool whole_rows, LaunchShape* out, int exact_mode = 0) {
  using T = typename DevTraits<D>::T;
  using B = typename DevTraits<D>::B;
  constexpr int K = DevTraits<D>::kVec;
  LaunchShape sh{};
  sh.segments = segments;
  const Want w = Want::From(plan.ops, plan.validity != nullptr);
  const bool full = NeedsFull(w) || w.Masking();
  const auto team_kernel = TeamKernelFor<D>(w);
  sh.wide = WideHistogram(plan, w);
  sh.threads = sh.wide ? Policy::kHistWideThreads : Policy::kThreads;
  const auto slice_kernel = SliceKernelOf<D>(w, sh.wide, exact_mode);
  const std::int64_t row_bytes = static_cast<std::int64_t>(plan.row_length * sizeof(T));
  sh.team = plan.row_length != 0 && row_bytes <= Policy::kTeamMaxRowBytes;
  sh.cluster = 1;
  const std::int64_t row_vecs = static_cast<std::int64_t>(plan.row_length) / K;
  if (sh.team && !full && whole_rows && plan.row_length % K == 0 &&
      (row_vecs == 2 || row_vecs == 4 || row_vecs == 8)) {
    sh.rowvec = true;
    sh.team_lanes = static_cast<int>(row_vecs);
    int per_sm = 0;
    TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, RowVecKernel<D>,
                                                                  Policy::kThreads, 0));
    const std::int64_t rows_per_block = Policy::kThreads * Policy::kRowVecLoads / sh.team_lanes;
    const std::int64_t blocks = CeilDiv(segments, rows_per_block);
    const std::int64_t resident = static_cast<std::int64_t>(per_sm > 0 ? per_sm : 1) * dev.sms;
    sh.blocks = blocks < resident ? blocks : resident;
    if (sh.blocks < 1) sh.blocks = 1;
    *out = sh;
    return cudaSuccess;
  }
  if (sh.team) {
    const std::int64_t vecs = CeilDiv(static_cast<std::int64_t>(plan.row_length), DevTraits<D>::kVec);
    int g = 1;
    while (g < 32 && g * Policy::kTeamVecsPerLane < vecs) g *= 2;
    sh.team_lanes = g;
    int per_sm = 0;
    TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, team_kernel,
                                                                  Policy::kThreads, 0));
    const std::int64_t rows_per_block = Policy::kThreads / g;
    std::int64_t blocks = CeilDiv(segments, rows_per_block);
    const std::int64_t resident = static_cast<std::int64_t>(per_sm > 0 ? per_sm : 1) * dev.sms;
    sh.blocks = blocks < resident ? blocks : resident;
    if (sh.blocks < 1) sh.blocks = 1;
    *out = sh;
    return cudaSuccess;
  }
  if (sh.wide) {
    // Wide16Words of 16-bit pairs (below, the bins, above), then NaN's.
    sh.per_rank = Wide16Words(plan.histogram.bins) + 1;
    sh.smem = (sh.per_rank * 4 + 15) / 16 * 16;
    TALLY_CUDA_TRY(AllowMostSharedMemory(slice_kernel));
  } else if (w.hist) {
    const std::int64_t stride = plan.histogram.bins + 3;
    while (CeilDiv(stride, sh.cluster) * 4 > Policy::kHistCountBytesPerBlock &&
           sh.cluster < Policy::kMaxCluster)
      sh.cluster *= 2;
    sh.per_rank = static_cast<std::uint32_t>(CeilDiv(stride, sh.cluster));
    sh.edge_table = sh.cluster == 1 && plan.histogram.bins <= Policy::kEdgeTableMaxBins;
    sh.smem = (sh.per_rank * 4 + 15) / 16 * 16 +
              (sh.edge_table ? (plan.histogram.bins + 1) * sizeof(B) : 0);
    if (sh.smem > 48 * 1024) {  // before the occupancy query and the launch
      TALLY_CUDA_TRY(AllowMostSharedMemory(slice_kernel));
    }
  }
  // Slices per segment: enough blocks to fill the GPU once, none smaller
  // than kMinBytesPerBlock.
  const std::int64_t seg_len = plan.row_length == 0 ? n : static_cast<std::int64_t>(plan.row_length);
  const std::int64_t max_slices =
      CeilDiv(seg_len * static_cast<std::int64_t>(sizeof(T)), Policy::kMinBytesPerBlock);
  std::int64_t slices = 1;
  if (max_slices > 1) {
    int per_sm = 0;
    TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, slice_kernel,
                                                                  sh.threads, sh.smem));
    const std::int64_t resident = static_cast<std::int64_t>(per_sm > 0 ? per_sm : 1) * dev.sms;
    const std::int64_t rows = plan.row_length == 0 ? 1 : CeilDiv(n, seg_len);
    // One wave: rounding up would leave a few blocks for a second wave
    // (rows of 16M float32: 17 slices x 16 rows = 272 blocks on 264 slots
    // ran at 2056 GB/s).
    slices = rows >= resident ? 1 : resident / rows;
    if (slices > max_slices) slices = max_slices;
    if (slices < 1) slices = 1;
  }
  slices = CeilDiv(slices, sh.cluster) * sh.cluster;
  sh.slices = slices;
  sh.blocks = segments * slices;
  *out = sh;
  return cudaSuccess;
}

// Unique per call within the process; the random start makes a match with
// whatever an earlier process left in the scratch as good as impossible.
inline unsigned long long NextNonce() {
  static std::atomic<unsigned long long> next{[] {
    std::random_device rd;
    const auto t = static_cast<unsigned long long>(
        std::chrono::steady_clock::now().time_since_epoch().count());
    return (static_cast<unsigned long long>(rd()) << 32 ^ rd()) ^ (t * 0x9E3779B97F4A7C15ull);
  }()};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// A pass whose ops have no partial fields (`words`, PartialWords: a
// histogram alone) needs none: its blocks add their counts to the state and
// return before the tail (SliceKernel), so no partial or flag is written.
inline std::size_t ScratchOf(const LaunchShape& sh, std::size_t partial_bytes, unsigned words) {
  if (sh.team || sh.slices <= 1 || words == 0) return 0;
  const std::size_t parts = static_cast<std::size_t>(sh.segments * sh.slices) * partial_bytes;
  const std::size_t flags = static_cast<std::size_t>(sh.segments * sh.slices) * 8;
  return (parts + 255) / 256 * 256 + flags + static_cast<std::size_t>(sh.segments) * 8;
}

template <rules::DType D>
cudaError_t ScratchBytesFor(const AggregatePlan& plan, std::uint64_t max_chunk,
                            const DeviceInfo& dev, std::size_t* bytes) {
  const std::int64_t n = static_cast<std::int64_t>(max_chunk);
  const std::int64_t segs =
      plan.row_length == 0 ? 1 : CeilDiv(n, static_cast<std::int64_t>(plan.row_length)) + 1;
  LaunchShape sh{};
  TALLY_CUDA_TRY(ShapeFor<D>(plan, n, segs, dev, false, &sh));
  if (!sh.team && plan.row_length != 0) {
    // A shorter chunk (a stream's tail, a piece of a long row) spreads each of
    // its fewer rows over more slices: size for the most segments a chunk can
    // touch times the most slices one row can get.
    LaunchShape one_row{};
    const std::int64_t n1 = std::min<std::int64_t>(n, static_cast<std::int64_t>(plan.row_length));
    TALLY_CUDA_TRY(ShapeFor<D>(plan, n1, 1, dev, false, &one_row));
    if (one_row.slices > sh.slices) sh.slices = one_row.slices;
  }
  *bytes = ScratchOf(sh, sizeof(Partial<D>), PartialWords<D>(Want::From(plan.ops, plan.validity != nullptr)));
  return cudaSuccess;
}

template <rules::DType D>
cudaError_t LaunchAccumulate(const AggregatePlan& plan, const ResultLayout& lay, const void* chunk,
                             std::uint64_t n, std::uint64_t offset, void* state, void* scratch,
                             std::size_t scratch_bytes, const DeviceInfo& dev,
                             cudaStream_t stream, ExactPass* exact) {
  using T = typename DevTraits<D>::T;
  using B = typename DevTraits<D>::B;
  AggArgs<D> a{};
  a.chunk = static_cast<const T*>(chunk);
  a.validity = plan.validity;
  a.n = static_cast<std::int64_t>(n);
  a.offset = offset;
  a.row_length = plan.row_length;
  a.want = Want::From(plan.ops, plan.validity != nullptr);
  if (plan.row_length == 0) {
    a.first_row = 0;
    a.segments = 1;
  } else {
    a.first_row = offset / plan.row_length;
    a.segments = static_cast<std::int64_t>((offset + n - 1) / plan.row_length - a.first_row + 1);
  }
  auto* base = static_cast<unsigned char*>(state);
  auto at = [&](std::size_t off) -> void* {
    return off == ResultLayout::kAbsent ? nullptr : base + off;
  };
  a.state = StateView{at(lay.sum),
                      at(lay.min),
                      at(lay.max),
                      at(lay.moments),
                      static_cast<double*>(at(lay.sum_squares)),
                      static_cast<std::int64_t*>(at(lay.argmin)),
                      at(lay.argmin_value),
                      static_cast<std::int64_t*>(at(lay.argmax)),
                      at(lay.argmax_value),
                      static_cast<unsigned long long*>(at(lay.histograms)),
                      lay.histogram_stride,
                      static_cast<unsigned long long*>(at(lay.count)),
                      static_cast<double*>(at(lay.nan_sum)),
                      static_cast<unsigned long long*>(at(lay.nan_count)),
                      at(lay.nan_min),
                      at(lay.nan_max),
                      at(lay.nan_moments),
                      static_cast<std::int64_t*>(at(lay.nan_argmin)),
                      at(lay.nan_argmin_value),
                      static_cast<std::int64_t*>(at(lay.nan_argmax)),
                      at(lay.nan_argmax_value)};
  if (a.want.hist) {
    a.binner = rules::HistogramBinner<B, typename DevTraits<D>::BE>::Make(plan.histogram.bins, plan.histogram.lo, plan.histogram.hi);
    a.hist_stride = lay.histogram_stride;
    a.quick = HistQuick<B, typename DevTraits<D>::BE>::Make(a.binner, plan.histogram.lo, plan.histogram.hi);
    // Rows that start in this chunk begin with zero counters.
    const std::uint64_t first_fresh =
        plan.row_length == 0 ? (offset == 0 ? 0 : 1)
                             : (offset + plan.row_length - 1) / plan.row_length;
    const std::uint64_t end_row = plan.row_length == 0 ? 1 : a.first_row + a.segments;
    if (first_fresh < end_row) {
      TALLY_CUDA_TRY(cudaMemsetAsync(a.state.hist + first_fresh * lay.histogram_stride, 0,
                                     (end_row - first_fresh) * lay.histogram_stride * 8, stream));
    }
  }

  if (Small<D>(plan, n, offset, a.want)) {
    SmallKernel<D><<<1, Policy::kThreads, 0, stream>>>(a);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  }

  const bool whole_rows = plan.row_length != 0 && offset % plan.row_length == 0 &&
                          n % plan.row_length == 0 &&
                          reinterpret_cast<std::uintptr_t>(chunk) % 16 == 0;
  // The exact pass inside: unmasked whole arrays, chunks one exact launch
  // takes, and a plan whose slice kernel has an exact variant.
  int exact_mode = 0;
  if (exact != nullptr && plan.row_length == 0 && plan.validity == nullptr && n <= kMaxExactLaunchElements) {
    const int mode = exact->squares_state != nullptr ? 2 : 1;
    if (SliceKernelOf<D>(a.want, WideHistogram(plan, a.want), mode) != nullptr) exact_mode = mode;
  }
  LaunchShape sh{};
  TALLY_CUDA_TRY(ShapeFor<D>(plan, a.n, a.segments, dev, whole_rows, &sh, exact_mode));
  if (exact_mode != 0) {
    a.exact_sum = static_cast<unsigned long long*>(exact->sum_state);
    a.exact_squares = static_cast<unsigned long long*>(exact->squares_state);
    exact->fused = true;
  }
  a.slices = sh.slices;
  a.team_lanes = sh.team_lanes;
  a.cluster = sh.cluster;
  a.per_rank = sh.per_rank;
  a.edge_table = sh.edge_table;
  const auto team_kernel = TeamKernelFor<D>(a.want);
  const auto slice_kernel = SliceKernelOf<D>(a.want, sh.wide, exact_mode);
  if (sh.rowvec) {
    RowVecKernel<D><<<static_cast<unsigned>(sh.blocks), Policy::kThreads, 0, stream>>>(a);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  }
  if (sh.team) {
    team_kernel<<<static_cast<unsigned>(sh.blocks), Policy::kThreads, 0, stream>>>(a);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  }
  const std::size_t need = ScratchOf(sh, sizeof(Partial<D>), PartialWords<D>(a.want));
  if (need > 0) {
    if (scratch == nullptr || scratch_bytes < need) {
      return cuda::Record(cudaErrorInvalidValue, "scratch smaller than ScratchBytes()", __FILE__,
                          __LINE__);
    }
    a.partials = static_cast<Partial<D>*>(scratch);
    const std::size_t parts = static_cast<std::size_t>(sh.segments * sh.slices) * sizeof(Partial<D>);
    auto* flags = reinterpret_cast<unsigned long long*>(static_cast<unsigned char*>(scratch) +
                                                        (parts + 255) / 256 * 256);
    a.flags = flags;
    a.claims = flags + sh.segments * sh.slices;
    a.nonce = NextNonce();
  }
  if (sh.cluster > 1) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(sh.blocks));
    cfg.blockDim = dim3(static_cast<unsigned>(sh.threads));
    cfg.dynamicSmemBytes = sh.smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(sh.cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    TALLY_CUDA_TRY(cudaLaunchKernelEx(&cfg, slice_kernel, a));
  } else {
    slice_kernel<<<static_cast<unsigned>(sh.blocks), static_cast<unsigned>(sh.threads), sh.smem, stream>>>(a);
  }
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace tally::kernels::detail
