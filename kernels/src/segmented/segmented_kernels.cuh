// Variable-length segmented reduction over CSR offsets: the kernels behind
// tally/kernels/segmented.h and the host code that launches them for one
// dtype (instantiated once per dtype in segmented_<dtype>.cu).
//
// The work is the merged sequence of the N elements and the S segment ends
// (segment s ends at offsets[s + 1]; an end goes before the element at its
// offset), each item weighted by its bytes (an element 1, an end 8 / element
// size), cut into tiles of equal weight (merge path, as moderngpu's
// segreduce). A tile thus holds a bounded number of bytes of elements and
// offsets together, whatever the lengths: a pile of empty segments costs one
// offset each, and a huge segment spreads over many tiles.
//
//   PartitionKernel  where each tile starts in both sequences: a binary
//                    search on its diagonal, one thread per tile boundary.
//   SegmentKernel    persistent blocks take the tiles round-robin. A producer
//                    warp copies each tile's elements and offsets into shared
//                    memory with bulk copies (cp.async.bulk, completing on an
//                    mbarrier), kStages tiles ahead of the consumers. The
//                    consumers first mark where the tile's segments end (and
//                    write the empty ones), then each walks one chunk of
//                    consecutive elements, closing a segment at each marked
//                    position, and a segmented block scan joins the parts of
//                    a segment that spans chunks. A tile leaves in scratch the
//                    partial of its last, still open segment (its carry)
//                    and, when its first segment began in an earlier tile,
//                    that segment's in-tile part (its head).
//   FixupKernel      each such segment's result: the carries of the tiles it
//                    spans folded in a fixed order, then the head.
//
// The bytes: data + offsets (8 per segment) + results (8 per segment and
// field) over the read ceiling is the floor. In GB/s of data bytes, the
// fraction of the read ceiling that is reachable for float32 with kSum:
// segments of uniform 1-64 elements (130 data bytes each, 16 more of offset
// and result) 0.89; uniform 1K-64K and power-law lengths (P(L >= k) = k^-0.5,
// mean about 8200) 1.00 to within 0.5%.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "../device_traits.cuh"
#include "../opfam/extreme.cuh"
#include "../shared_memory.cuh"
#include "../opfam/sum.cuh"
#include "../policy.cuh"
#include "segmented_dispatch.h"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::detail {

using SegPolicy = SegmentedPolicy;
constexpr int kSegConsumers = SegPolicy::kConsumerWarps * 32;
constexpr int kSegThreads = kSegConsumers + 32;

// A tile's shape for elements of type T.
template <typename T>
struct SegGeometry {
  static constexpr int kElem = static_cast<int>(sizeof(T));
  static constexpr int kChunk = SegPolicy::ChunkElements(kElem);      // elements per consumer
  static constexpr int kTileWeight = SegPolicy::TileWeight(kElem);    // elements at most
  static constexpr int kEndWeight = SegPolicy::EndWeight(kElem);
  // A tile weighs at most kTileWeight + kEndWeight - 1 (its start may fall
  // short of its diagonal by less than an end's weight).
  static constexpr int kMaxTileWeight = kTileWeight + kEndWeight - 1;
  // A stage holds the 16-byte vectors covering a tile's elements (at its
  // start) and its offsets (at its far end): at most kMaxTileWeight
  // elements' bytes plus the offset before the first end, 30 + 30 bytes of
  // rounding, and up to a chunk (128 bytes) that the consumers read past
  // the elements.
  static constexpr int kStageBytes = kTileWeight * kElem + 352;
  static_assert(kStageBytes % 16 == 0 && kStageBytes >= kMaxTileWeight * kElem + 8 + 60 + 128);
  // Every tile's elements, starting up to 15 bytes into their first vector,
  // fit the consumers' chunks.
  static_assert(kSegConsumers * kChunk >= kMaxTileWeight + 16 / kElem);
  // Tile-local end indices fit 16 bits.
  static_assert(kMaxTileWeight / kEndWeight < 65536);
};

// ---- mbarriers and bulk copies (sm_90) -------------------------------------

TALLY_DEV std::uint32_t SmemAddr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
TALLY_DEV void MbarInit(std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count) : "memory");
}
TALLY_DEV void MbarArrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar)) : "memory");
}
// Bytes the current phase waits for besides its arrivals (the bulk copies
// issued after this).
TALLY_DEV void MbarExpectTx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(bytes) : "memory");
}
// Until the phase of parity `parity` has completed.
TALLY_DEV void MbarWait(std::uint64_t* bar, std::uint32_t parity) {
  const std::uint32_t addr = SmemAddr(bar);
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}
// 16-byte aligned global -> shared copy by the copy engine; completes as
// bytes on `bar`.
TALLY_DEV void BulkCopy(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
}
// The consumer warps alone (the producer never joins): named barrier 1.
TALLY_DEV void ConsumerSync() { asm volatile("bar.sync 1, %0;" ::"n"(kSegConsumers) : "memory"); }

// ---- partials -------------------------------------------------------------

// A segment's (or a run's) partial. dsum: the float64 sum that integer
// dtypes keep for the mean in the full variant (a float dtype's sum is
// float64 already); min and max in the full variant only.
template <rules::DType D, bool kFull>
struct SegOps {
  using T = typename DevTraits<D>::T;
  using S = typename DevTraits<D>::S;
  using E = typename DevTraits<D>::E;
  static constexpr bool kDsum = kFull && !DevTraits<D>::kFloat;
  struct P {
    S sum;
    double dsum;
    E mn, mx;
  };

  static TALLY_DEV P Identity() {
    P p;
    p.sum = SumOp<D>::Identity();
    p.dsum = 0.0;
    p.mn = static_cast<E>(ExtremeOp<D>::MinIdentity());
    p.mx = static_cast<E>(ExtremeOp<D>::MaxIdentity());
    return p;
  }
  // a covers elements before b.
  static TALLY_DEV P Merge(const P& a, const P& b) {
    P r;
    r.sum = SumOp<D>::Merge(a.sum, b.sum);
    r.dsum = kDsum ? a.dsum + b.dsum : 0.0;
    if constexpr (kFull) {
      r.mn = ExtremeOp<D>::MergeMin(a.mn, b.mn);
      r.mx = ExtremeOp<D>::MergeMax(a.mx, b.mx);
    } else {
      r.mn = a.mn;
      r.mx = a.mx;
    }
    return r;
  }
  static TALLY_DEV P ShflUp(const P& p, int delta) {
    P q = p;
    q.sum = __shfl_up_sync(0xffffffffu, p.sum, delta);
    if constexpr (kDsum) q.dsum = __shfl_up_sync(0xffffffffu, p.dsum, delta);
    if constexpr (kFull) {
      q.mn = __shfl_up_sync(0xffffffffu, p.mn, delta);
      q.mx = __shfl_up_sync(0xffffffffu, p.mx, delta);
    }
    return q;
  }
  static TALLY_DEV P ShflXor(const P& p, int mask) {
    P q = p;
    q.sum = __shfl_xor_sync(0xffffffffu, p.sum, mask);
    if constexpr (kDsum) q.dsum = __shfl_xor_sync(0xffffffffu, p.dsum, mask);
    if constexpr (kFull) {
      q.mn = __shfl_xor_sync(0xffffffffu, p.mn, mask);
      q.mx = __shfl_xor_sync(0xffffffffu, p.mx, mask);
    }
    return q;
  }
  static TALLY_DEV P Broadcast(const P& p, int lane) {
    P q = p;
    q.sum = __shfl_sync(0xffffffffu, p.sum, lane);
    if constexpr (kDsum) q.dsum = __shfl_sync(0xffffffffu, p.dsum, lane);
    if constexpr (kFull) {
      q.mn = __shfl_sync(0xffffffffu, p.mn, lane);
      q.mx = __shfl_sync(0xffffffffu, p.mx, lane);
    }
    return q;
  }

  // A thread's running partial over its run of elements: min and max in
  // the element type (float32's hardware NaN-propagating min/max).
  struct Run {
    S sum;
    double dsum;
    T mn, mx;
    TALLY_DEV void Reset() {
      sum = SumOp<D>::Identity();
      dsum = 0.0;
      mn = ExtremeOp<D>::MinIdentity();
      mx = ExtremeOp<D>::MaxIdentity();
    }
    TALLY_DEV void Add(T x) {
      sum = SumOp<D>::Merge(sum, SumOp<D>::Lift(x));
      if constexpr (kDsum) dsum += static_cast<double>(x);
      if constexpr (kFull) {
        mn = ExtremeOp<D>::Min(mn, x);
        mx = ExtremeOp<D>::Max(mx, x);
      }
    }
    // A whole chunk: eight interleaved partial sums (independent dependency
    // chains), then a fixed tree, instead of one chain through every
    // element; min and max likewise.
    template <int K>
    TALLY_DEV void AddAll(const T (&x)[K]) {
      constexpr int kWays = K < 8 ? K : 8;
      Run part[kWays];
#pragma unroll
      for (int w = 0; w < kWays; ++w) part[w].Reset();
#pragma unroll
      for (int k = 0; k < K; ++k) part[k % kWays].Add(x[k]);
#pragma unroll
      for (int span = 1; span < kWays; span *= 2) {
#pragma unroll
        for (int w = 0; w + span < kWays; w += 2 * span) part[w].Merge(part[w + span]);
      }
      Merge(part[0]);
    }
    // b's elements follow this run's.
    TALLY_DEV void Merge(const Run& b) {
      sum = SumOp<D>::Merge(sum, b.sum);
      if constexpr (kDsum) dsum += b.dsum;
      if constexpr (kFull) {
        mn = ExtremeOp<D>::Min(mn, b.mn);
        mx = ExtremeOp<D>::Max(mx, b.mx);
      }
    }
    TALLY_DEV P Part() const {
      P p;
      p.sum = sum;
      p.dsum = dsum;
      p.mn = static_cast<E>(mn);
      p.mx = static_cast<E>(mx);
      return p;
    }
  };
};

// Scratch and result arrays (nullptr: absent) of one launch.
template <rules::DType D, bool kFull>
struct SegArgs {
  using Ops = SegOps<D, kFull>;
  using T = typename Ops::T;
  using S = typename Ops::S;
  using E = typename Ops::E;
  using P = typename Ops::P;
  const T* data;
  const std::int64_t* offsets;
  std::int64_t n;         // elements
  std::int64_t segments;  // offsets has segments + 1
  std::int64_t tiles;
  std::int64_t* splits;   // [tiles + 1][2]: ends and elements before each tile
  // Per tile: the carry (the last, open segment's partial) and the head
  // (the first segment's in-tile part, written when it began earlier).
  S *carry_sum, *head_sum;
  double *carry_dsum, *head_dsum;
  E *carry_min, *head_min, *carry_max, *head_max;
  // Per segment.
  S* sum;
  double* dsum;
  E *min, *max;

  TALLY_DEV void StoreResult(std::int64_t s, const P& p) const {
    if (sum) sum[s] = p.sum;
    if (dsum) {
      if constexpr (Ops::kDsum) dsum[s] = p.dsum;
      else if constexpr (DevTraits<D>::kFloat) dsum[s] = p.sum;
    }
    if constexpr (kFull) {
      if (min) min[s] = p.mn;
      if (max) max[s] = p.mx;
    }
  }
  TALLY_DEV void StoreTile(S* s_arr, double* d_arr, E* mn_arr, E* mx_arr, std::int64_t t,
                           const P& p) const {
    s_arr[t] = p.sum;
    if constexpr (Ops::kDsum) d_arr[t] = p.dsum;
    if constexpr (kFull) {
      mn_arr[t] = p.mn;
      mx_arr[t] = p.mx;
    }
  }
  TALLY_DEV P LoadTile(const S* s_arr, const double* d_arr, const E* mn_arr, const E* mx_arr,
                       std::int64_t t) const {
    P p = Ops::Identity();
    p.sum = s_arr[t];
    if constexpr (Ops::kDsum) p.dsum = d_arr[t];
    if constexpr (kFull) {
      p.mn = mn_arr[t];
      p.mx = mx_arr[t];
    }
    return p;
  }
  TALLY_DEV P Carry(std::int64_t t) const { return LoadTile(carry_sum, carry_dsum, carry_min, carry_max, t); }
  TALLY_DEV P Head(std::int64_t t) const { return LoadTile(head_sum, head_dsum, head_min, head_max, t); }
};

// ---- PartitionKernel ------------------------------------------------------

// Where merge weight d falls: the longest prefix of the merged sequence
// that weighs at most d holds ends [0, a) and elements [0, b), where a
// counts the ends j whose prefix up to and including them (elements before
// them, then ends 0..j) weighs at most d, and b takes elements up to the
// next end or the weight left. splits[t] = {a, b} for d = t x TileWeight.
// A binary search: wider ones (7 and 15 probes a round) were slower, their
// deeper rounds being scattered DRAM reads (uniform 1-64 lengths, 42K
// tiles: binary 16.9 us, 8-ary 32 us, 16-ary 46 us).
template <rules::DType D, bool kFull>
__global__ void __launch_bounds__(256) PartitionKernel(const SegArgs<D, kFull> a) {
  using G = SegGeometry<typename SegOps<D, kFull>::T>;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t > a.tiles) return;
  const std::int64_t r = G::kEndWeight;
  const std::int64_t total = a.n + r * a.segments;
  std::int64_t d = t * G::kTileWeight;
  if (d > total) d = total;
  // The first j with offsets[j + 1] + r (j + 1) > d (increasing in j).
  std::int64_t lo = 0, hi = a.segments;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) >> 1;
    if (__ldg(a.offsets + mid + 1) + r * (mid + 1) <= d) lo = mid + 1;
    else hi = mid;
  }
  const std::int64_t next = lo < a.segments ? __ldg(a.offsets + lo + 1) : a.n;
  const std::int64_t left = d - r * lo;
  a.splits[2 * t] = lo;
  a.splits[2 * t + 1] = next < left ? next : left;
}

// ---- SegmentKernel --------------------------------------------------------

// What the producer tells the consumers about a staged tile.
struct SegStageMeta {
  std::int64_t tile;
  std::int64_t a0;   // first end (segment index) of the tile
  std::int64_t b0;   // first element of the tile
  int na, nb;        // ends, elements
  int x_off, e_off;  // bytes into the stage: element b0, end a0 (offsets[a0 + 1])
};

template <rules::DType D, bool kFull>
struct SegShared {
  using P = typename SegOps<D, kFull>::P;
  static constexpr int kChunk = SegGeometry<typename SegOps<D, kFull>::T>::kChunk;
  std::uint64_t full[SegPolicy::kStages];
  std::uint64_t empty[SegPolicy::kStages];
  SegStageMeta meta[SegPolicy::kStages];
  // Warp aggregates of the block scan, two sets: tile i + 2 writes set
  // i % 2 only after every consumer has passed tile i + 1's barrier.
  P scan_val[2][SegPolicy::kConsumerWarps];
  int scan_flag[2][SegPolicy::kConsumerWarps];
  // Per chunk: bit k set when a non-empty segment ends before the chunk's
  // element k; per element position: the tile-local end index of that
  // segment.
  std::uint32_t mask[kSegConsumers];
  std::uint16_t seg_at[kSegConsumers * kChunk];
};

// The producer warp: for each of the block's tiles, once its stage is free,
// the 16-byte vectors holding the tile's elements and its offsets (from the
// one before its first end, where its first segment began) by one bulk copy
// each, then the arrival that lets the consumers in. Only where such a
// vector reaches outside the caller's arrays (their first and last vectors)
// are those elements or offsets loaded one by one, by the lanes. The next
// tile's split is loaded a tile ahead, so that its latency overlaps the wait
// for a free stage.
template <rules::DType D, bool kFull>
__device__ void ProduceTiles(const SegArgs<D, kFull>& a, SegShared<D, kFull>& sh,
                             unsigned char* stages) {
  using T = typename SegOps<D, kFull>::T;
  using G = SegGeometry<T>;
  constexpr std::uintptr_t kAlign = 15;
  const int lane = threadIdx.x & 31;
  const auto x_begin = reinterpret_cast<std::uintptr_t>(a.data);
  const std::uintptr_t x_end = x_begin + static_cast<std::uintptr_t>(a.n) * sizeof(T);
  const auto e_begin = reinterpret_cast<std::uintptr_t>(a.offsets);
  const std::uintptr_t e_end = e_begin + static_cast<std::uintptr_t>(a.segments + 1) * 8;
  std::int64_t t = blockIdx.x;
  std::int64_t a0 = a.splits[2 * t], b0 = a.splits[2 * t + 1];
  std::int64_t a1 = a.splits[2 * t + 2], b1 = a.splits[2 * t + 3];
  for (int i = 0; t < a.tiles; t += gridDim.x, ++i) {
    std::int64_t next[4] = {0, 0, 0, 0};
    if (t + gridDim.x < a.tiles) {
#pragma unroll
      for (int k = 0; k < 4; ++k) next[k] = a.splits[2 * (t + gridDim.x) + k];
    }
    const int stage = i % SegPolicy::kStages;
    MbarWait(&sh.empty[stage], ((i / SegPolicy::kStages) & 1) ^ 1);
    const int na = static_cast<int>(a1 - a0), nb = static_cast<int>(b1 - b0);
    unsigned char* buf = stages + stage * G::kStageBytes;

    // Elements b0.. at the stage's start, at their address's offset mod 16.
    const std::uintptr_t gx0 = x_begin + static_cast<std::uintptr_t>(b0) * sizeof(T);
    const std::uintptr_t gx1 = gx0 + static_cast<std::uintptr_t>(nb) * sizeof(T);
    std::uintptr_t xlo = gx0 & ~kAlign, xhi = (gx1 + kAlign) & ~kAlign;
    if (xlo < x_begin) xlo += 16;
    if (xhi > x_end) xhi -= 16;
    const bool xbulk = xlo < xhi;
    const int xhead = !xbulk ? nb : xlo > gx0 ? static_cast<int>((xlo - gx0) / sizeof(T)) : 0;
    const int xtail = xbulk && xhi < gx1 ? static_cast<int>((gx1 - xhi) / sizeof(T)) : 0;
    const int x_off = static_cast<int>(gx0 & kAlign);

    // Offsets a0..a1 (start of the tile's first segment, then its ends) at
    // the stage's far end.
    const std::uintptr_t ge0 = e_begin + static_cast<std::uintptr_t>(a0) * 8;
    const std::uintptr_t ge1 = ge0 + static_cast<std::uintptr_t>(na + 1) * 8;
    const std::uintptr_t region = ((ge1 + kAlign) & ~kAlign) - (ge0 & ~kAlign);
    const int base = static_cast<int>((G::kStageBytes - region) & ~kAlign);
    std::uintptr_t elo = ge0 & ~kAlign, ehi = (ge1 + kAlign) & ~kAlign;
    if (elo < e_begin) elo += 16;
    if (ehi > e_end) ehi -= 16;
    const bool ebulk = elo < ehi;
    const int ehead = !ebulk ? na + 1 : elo > ge0 ? static_cast<int>((elo - ge0) / 8) : 0;
    const int etail = ebulk && ehi < ge1 ? static_cast<int>((ge1 - ehi) / 8) : 0;
    const int start_off = base + static_cast<int>(ge0 & kAlign);  // offsets[a0]

    if (lane == 0) {
      const auto tx = static_cast<std::uint32_t>((xbulk ? xhi - xlo : 0) + (ebulk ? ehi - elo : 0));
      MbarExpectTx(&sh.full[stage], tx);
      if (xbulk)
        BulkCopy(buf + (xlo - (gx0 & ~kAlign)), reinterpret_cast<const void*>(xlo),
                 static_cast<std::uint32_t>(xhi - xlo), &sh.full[stage]);
      if (ebulk)
        BulkCopy(buf + base + (elo - (ge0 & ~kAlign)), reinterpret_cast<const void*>(elo),
                 static_cast<std::uint32_t>(ehi - elo), &sh.full[stage]);
    }
    if (xhead + xtail + ehead + etail > 0) {
      T* xs = reinterpret_cast<T*>(buf + x_off);
      for (int j = lane; j < xhead + xtail; j += 32) {
        const int k = j < xhead ? j : nb - xtail + (j - xhead);
        xs[k] = a.data[b0 + k];
      }
      auto* os = reinterpret_cast<std::int64_t*>(buf + start_off);
      for (int j = lane; j < ehead + etail; j += 32) {
        const int k = j < ehead ? j : na + 1 - etail + (j - ehead);
        os[k] = __ldg(a.offsets + a0 + k);
      }
      __syncwarp();
    }
    if (lane == 0) {
      sh.meta[stage] = SegStageMeta{t, a0, b0, na, nb, x_off, start_off + 8};
      MbarArrive(&sh.full[stage]);
    }
    a0 = next[0];
    b0 = next[1];
    a1 = next[2];
    b1 = next[3];
  }
}

// The kChunk elements of chunk `c` (positions c x kChunk.. of the stage's
// 16-byte aligned element area) by 16-byte shared loads.
template <typename T, int kChunk>
TALLY_DEV void LoadChunk(const unsigned char* area, int c, T (&v)[kChunk]) {
  constexpr int kPerVec = 16 / static_cast<int>(sizeof(T));
  const auto* src = reinterpret_cast<const uint4*>(area + static_cast<std::size_t>(c) * kChunk * sizeof(T));
#pragma unroll
  for (int k = 0; k < kChunk / kPerVec; ++k) {
    const uint4 raw = src[k];
    std::memcpy(&v[k * kPerVec], &raw, 16);
  }
}

// The consumer threads, per tile:
//  1. the ends, one per thread in turn: an empty segment gets its identity
//     at once; the first end at each position sets that position's bit in
//     its chunk's boundary mask and notes its end index there;
//  2. each thread takes one chunk of consecutive elements (16-byte loads,
//     aligned as in global memory) and walks it, closing a segment at each
//     boundary bit: the first closed segment's part waits for the block
//     scan, the others are written at once;
//  3. a segmented block scan over the chunks (has a boundary, partial after
//     the last boundary) supplies each chunk's first segment with what the
//     chunks before it hold of it.
// A warp whose chunks are all full and free of boundaries (long segments)
// sums them without looking at any mask.
template <rules::DType D, bool kFull>
__device__ void ConsumeTiles(const SegArgs<D, kFull>& a, SegShared<D, kFull>& sh,
                             const unsigned char* stages) {
  using Ops = SegOps<D, kFull>;
  using T = typename Ops::T;
  using P = typename Ops::P;
  using G = SegGeometry<T>;
  constexpr int kChunk = G::kChunk;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int c0 = tid * kChunk;  // this thread's chunk: positions [c0, c0 + kChunk)
  sh.mask[tid] = 0;
  ConsumerSync();
  int i = 0;
  for (std::int64_t t = blockIdx.x; t < a.tiles; t += gridDim.x, ++i) {
    const int stage = i % SegPolicy::kStages;
    MbarWait(&sh.full[stage], (i / SegPolicy::kStages) & 1);
    const SegStageMeta m = sh.meta[stage];
    const unsigned char* buf = stages + stage * G::kStageBytes;
    const auto* es = reinterpret_cast<const std::int64_t*>(buf + m.e_off);
    const std::int64_t start0 = es[-1];  // where the tile's first segment began
    // Element positions: b0 sits at position `lead` of the aligned area.
    const int lead = m.x_off / G::kElem;
    const int stop = lead + m.nb;

    for (int j = tid; j < m.na; j += kSegConsumers) {
      const std::int64_t end = es[j];
      if (end == es[j - 1]) {
        a.StoreResult(m.a0 + j, Ops::Identity());
      } else {
        const int pos = static_cast<int>(end - m.b0) + lead;
        atomicOr(&sh.mask[pos / kChunk], 1u << (pos % kChunk));
        sh.seg_at[pos] = static_cast<std::uint16_t>(j);
      }
    }
    ConsumerSync();
    const std::uint32_t mask = sh.mask[tid];
    sh.mask[tid] = 0;  // for the next tile: only this thread reads it
    T v[kChunk];
    if (c0 < stop) LoadChunk(buf, tid, v);
    const bool edge = c0 < lead || c0 + kChunk > stop;
    std::uint32_t valid = ~0u;
    if (edge) {
      valid = 0;
#pragma unroll
      for (int k = 0; k < kChunk; ++k)
        if (c0 + k >= lead && c0 + k < stop) valid |= 1u << k;
      if constexpr (!kFull) {
        // Outside the tile's elements: the sum's identity.
#pragma unroll
        for (int k = 0; k < kChunk; ++k)
          if (!((valid >> k) & 1u)) v[k] = static_cast<T>(0);
      }
    }

    // head: the elements before the chunk's first boundary (all of them when
    // it has none); run: those after its last boundary. One running partial:
    // the head is taken at the first boundary, later closed segments are
    // written as they close.
    typename Ops::Run head_run, run;
    run.Reset();
    const bool has_end = mask != 0;
    if (__all_sync(0xffffffffu, !edge && !has_end)) {
      run.AddAll(v);
    } else {
      const int first = has_end ? __ffs(static_cast<int>(mask)) - 1 : kChunk;
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if ((mask >> k) & 1u) {
          if (k == first) head_run = run;
          else a.StoreResult(m.a0 + sh.seg_at[c0 + k], run.Part());
          run.Reset();
        }
        if (!kFull || ((valid >> k) & 1u)) run.Add(v[k]);
      }
    }
    if (!has_end) head_run = run;
    const P head = head_run.Part();
    const std::int64_t head_seg = has_end ? m.a0 + sh.seg_at[c0 + __ffs(static_cast<int>(mask)) - 1] : 0;
    // The stage is read and every loaded element used: free it for the
    // producer. (An arrival right after the loads, before their values were
    // used, let a later tile's bulk copy change what some of them read.)
    __syncwarp();
    if (lane == 0) MbarArrive(&sh.empty[stage]);

    // Segmented scan over the chunks: (has a boundary, partial after the
    // last boundary, or of the whole chunk).
    const P tail = run.Part();
    P inc = tail;
    bool inc_flag = has_end;
    const bool warp_ends = __any_sync(0xffffffffu, has_end);
    if (warp_ends) {
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const P up = Ops::ShflUp(inc, d);
        const bool up_flag = __shfl_up_sync(0xffffffffu, inc_flag, d);
        if (lane >= d) {
          if (!inc_flag) inc = Ops::Merge(up, inc);
          inc_flag = inc_flag || up_flag;
        }
      }
    } else {
      // No boundary in the warp: only the warp's total is wanted.
#pragma unroll
      for (int bit = 1; bit < 32; bit <<= 1) {
        const P other = Ops::ShflXor(inc, bit);
        inc = (lane & bit) ? Ops::Merge(other, inc) : Ops::Merge(inc, other);
      }
    }
    const int set = i & 1;
    if (lane == 31) {
      sh.scan_val[set][warp] = inc;
      sh.scan_flag[set][warp] = inc_flag;
    }
    const P excl = Ops::ShflUp(inc, 1);
    const bool excl_flag = __shfl_up_sync(0xffffffffu, inc_flag, 1) && lane > 0;
    ConsumerSync();
    const bool last = tid == kSegConsumers - 1;
    // What the warps before this one hold of the segment open at its start,
    // for a chunk whose first segment began before its warp and for the last
    // thread's tile carry: the warps' aggregates, scanned across the lanes.
    P before = Ops::Identity();
    if (__any_sync(0xffffffffu, (has_end && !excl_flag) || last) && warp > 0) {
      P w = lane < warp ? sh.scan_val[set][lane] : Ops::Identity();
      bool w_flag = lane < warp && sh.scan_flag[set][lane];
#pragma unroll
      for (int d = 1; d < SegPolicy::kConsumerWarps; d <<= 1) {
        const P up = Ops::ShflUp(w, d);
        const bool up_flag = __shfl_up_sync(0xffffffffu, w_flag, d);
        if (lane >= d) {
          if (!w_flag) w = Ops::Merge(up, w);
          w_flag = w_flag || up_flag;
        }
      }
      before = Ops::Broadcast(w, warp - 1);
    }
    if (has_end) {
      // In a warp with boundaries, `excl` is the segmented scan up to the
      // lane before this one.
      const P in = lane == 0 ? before : excl_flag ? excl : Ops::Merge(before, excl);
      const P value = Ops::Merge(in, head);
      if (head_seg == m.a0 && start0 < m.b0) {
        // The tile's first segment began in an earlier tile: FixupKernel.
        a.StoreTile(a.head_sum, a.head_dsum, a.head_min, a.head_max, m.tile, value);
      } else {
        a.StoreResult(head_seg, value);
      }
    }
    if (last) {
      // `inc` is the last warp's inclusive value (its total when it has no
      // boundary).
      const P carry = inc_flag ? inc : Ops::Merge(before, inc);
      a.StoreTile(a.carry_sum, a.carry_dsum, a.carry_min, a.carry_max, m.tile, carry);
    }
  }
}

template <rules::DType D, bool kFull>
__global__ void __launch_bounds__(kSegThreads, SegPolicy::kBlocksPerSm)
    SegmentKernel(const SegArgs<D, kFull> a) {
  __shared__ SegShared<D, kFull> sh;
  extern __shared__ __align__(128) unsigned char seg_stages[];
  if (threadIdx.x == 0) {
    for (int s = 0; s < SegPolicy::kStages; ++s) {
      MbarInit(&sh.full[s], 1);
      MbarInit(&sh.empty[s], SegPolicy::kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x >= kSegConsumers) {
    ProduceTiles(a, sh, seg_stages);
  } else {
    ConsumeTiles(a, sh, seg_stages);
  }
}

// ---- FixupKernel ----------------------------------------------------------

// One thread per tile. A tile whose first segment began in tile f < t: the
// segment's result is carries f..t-1 folded, then the tile's head. Windows
// up to kShortWindow tiles are folded by the thread in tile order; longer
// ones (segments over many tiles) by the whole warp, lane l taking tiles
// f + l, f + l + 32, ..., then a butterfly. Both orders depend on f and t
// alone.
template <rules::DType D, bool kFull>
__global__ void __launch_bounds__(SegPolicy::kFixupThreads) FixupKernel(const SegArgs<D, kFull> a) {
  using Ops = SegOps<D, kFull>;
  using P = typename Ops::P;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  bool need = false;
  std::int64_t f = 0, s = 0;
  if (t < a.tiles) {
    using G = SegGeometry<typename Ops::T>;
    const std::int64_t a0 = a.splits[2 * t], b0 = a.splits[2 * t + 1], a1 = a.splits[2 * t + 2];
    if (a1 > a0) {
      // The tile of the segment's first element: its prefix weighs the
      // elements before it, a0 ends and itself.
      const std::int64_t start = a.offsets[a0];
      need = start < b0;
      f = (start + a0 * G::kEndWeight) / G::kTileWeight;
      s = a0;
    }
  }
  // Carries are loaded kBatch at a time (independent loads) and merged in
  // order.
  constexpr int kBatch = 8;
  P fold = Ops::Identity();
  const bool wide = need && t - f > SegPolicy::kShortWindow;
  if (need && !wide) {
    std::int64_t j = f;
    for (; j + kBatch <= t; j += kBatch) {
      P c[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) c[u] = a.Carry(j + u);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) fold = Ops::Merge(fold, c[u]);
    }
    for (; j < t; ++j) fold = Ops::Merge(fold, a.Carry(j));
  }
  unsigned wide_lanes = __ballot_sync(0xffffffffu, wide);
  while (wide_lanes) {
    const int leader = __ffs(wide_lanes) - 1;
    wide_lanes &= wide_lanes - 1;
    const std::int64_t wf = __shfl_sync(0xffffffffu, f, leader);
    const std::int64_t wt = __shfl_sync(0xffffffffu, t, leader);
    constexpr int kWideBatch = kFull ? kBatch : 4 * kBatch;
    P part = Ops::Identity();
    std::int64_t j = wf + lane;
    for (; j + 32 * (kWideBatch - 1) < wt; j += 32 * kWideBatch) {
      P c[kWideBatch];
#pragma unroll
      for (int u = 0; u < kWideBatch; ++u) c[u] = a.Carry(j + 32 * u);
#pragma unroll
      for (int u = 0; u < kWideBatch; ++u) part = Ops::Merge(part, c[u]);
    }
    for (; j < wt; j += 32) part = Ops::Merge(part, a.Carry(j));
#pragma unroll
    for (int mask = 16; mask >= 1; mask >>= 1) {
      const P other = Ops::ShflXor(part, mask);
      part = (lane & mask) ? Ops::Merge(other, part) : Ops::Merge(part, other);
    }
    if (lane == leader) fold = part;
  }
  if (need) a.StoreResult(s, Ops::Merge(fold, a.Head(t)));
}

// ---- host -----------------------------------------------------------------

template <rules::DType D, bool kFull>
cudaError_t LaunchVariant(const SegmentedPlan& plan, const SegmentedLayout& lay,
                          const SegmentedScratch& sl, const void* data,
                          const std::int64_t* offsets, void* result, void* scratch, int sms,
                          cudaStream_t stream) {
  using A = SegArgs<D, kFull>;
  using S = typename A::S;
  using E = typename A::E;
  auto* sc = static_cast<unsigned char*>(scratch);
  auto* res = static_cast<unsigned char*>(result);
  auto at = [](unsigned char* base, std::size_t off) -> void* {
    return off == SegmentedScratch::kAbsent ? nullptr : base + off;
  };
  A a{};
  a.data = static_cast<const typename A::T*>(data);
  a.offsets = offsets;
  a.n = static_cast<std::int64_t>(plan.length);
  a.segments = static_cast<std::int64_t>(plan.segments);
  a.tiles = sl.tiles;
  a.splits = static_cast<std::int64_t*>(at(sc, sl.splits));
  a.carry_sum = static_cast<S*>(at(sc, sl.carry[SegmentedScratch::kSum]));
  a.head_sum = static_cast<S*>(at(sc, sl.head[SegmentedScratch::kSum]));
  a.carry_dsum = static_cast<double*>(at(sc, sl.carry[SegmentedScratch::kDsum]));
  a.head_dsum = static_cast<double*>(at(sc, sl.head[SegmentedScratch::kDsum]));
  a.carry_min = static_cast<E*>(at(sc, sl.carry[SegmentedScratch::kMin]));
  a.head_min = static_cast<E*>(at(sc, sl.head[SegmentedScratch::kMin]));
  a.carry_max = static_cast<E*>(at(sc, sl.carry[SegmentedScratch::kMax]));
  a.head_max = static_cast<E*>(at(sc, sl.head[SegmentedScratch::kMax]));
  a.sum = static_cast<S*>(at(res, lay.sum));
  a.dsum = static_cast<double*>(at(res, lay.dsum));
  a.min = static_cast<E*>(at(res, lay.min));
  a.max = static_cast<E*>(at(res, lay.max));

  const auto partition_blocks = static_cast<unsigned>((sl.tiles + 1 + 255) / 256);
  PartitionKernel<D, kFull><<<partition_blocks, 256, 0, stream>>>(a);
  TALLY_CUDA_CHECK_LAUNCH();

  constexpr int kSmem = SegPolicy::kStages * SegGeometry<typename A::T>::kStageBytes;
  const auto kernel = SegmentKernel<D, kFull>;
  TALLY_CUDA_TRY(AllowMostSharedMemory(kernel));
  int per_sm = 0;
  TALLY_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kSegThreads, kSmem));
  if (per_sm < 1) per_sm = 1;
  if (per_sm > SegPolicy::kBlocksPerSm) per_sm = SegPolicy::kBlocksPerSm;
  std::int64_t blocks = static_cast<std::int64_t>(per_sm) * sms;
  if (blocks > sl.tiles) blocks = sl.tiles;
  kernel<<<static_cast<unsigned>(blocks), kSegThreads, kSmem, stream>>>(a);
  TALLY_CUDA_CHECK_LAUNCH();

  if (sl.tiles > 1) {
    const auto fixup_blocks = static_cast<unsigned>((sl.tiles + SegPolicy::kFixupThreads - 1) /
                                                    SegPolicy::kFixupThreads);
    FixupKernel<D, kFull><<<fixup_blocks, SegPolicy::kFixupThreads, 0, stream>>>(a);
    TALLY_CUDA_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

template <rules::DType D>
cudaError_t LaunchSegments(const SegmentedPlan& plan, const SegmentedLayout& layout,
                           const SegmentedScratch& scratch_layout, const void* data,
                           const std::int64_t* offsets, void* result, void* scratch, int sms,
                           cudaStream_t stream) {
  return scratch_layout.full
             ? LaunchVariant<D, true>(plan, layout, scratch_layout, data, offsets, result,
                                      scratch, sms, stream)
             : LaunchVariant<D, false>(plan, layout, scratch_layout, data, offsets, result,
                                       scratch, sms, stream);
}

}  // namespace tally::kernels::detail

// One line per dtype file.
#define TALLY_SEGMENTED_INSTANTIATE(DT)                                                        \
  namespace tally::kernels::detail {                                                           \
  template cudaError_t LaunchSegments<rules::DType::DT>(                                       \
      const SegmentedPlan&, const SegmentedLayout&, const SegmentedScratch&, const void*,      \
      const std::int64_t*, void*, void*, int, cudaStream_t);                                   \
  }
