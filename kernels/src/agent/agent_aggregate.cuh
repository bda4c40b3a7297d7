// What one thread does with its share of a range of elements: 16-byte vector
// loads, Policy::VecsPerThread of them issued before any is used, all requested ops
// accumulated in registers, then turned into a Partial. The masking kernels
// (kMasking: a validity mask, NaN-skipping ops) add each group with the
// bits of the elements that take part (AddOk, AccumulateRangeOk).
#pragma once

#include <cstdint>

#include "../opfam/histogram.cuh"
#include "../partial.cuh"
#include "../policy.cuh"

namespace tally::kernels::detail {

template <rules::DType D, bool kMaskingAgg = false>
struct ThreadAgg {
  static constexpr bool kMasking = kMaskingAgg;
  using T = typename DevTraits<D>::T;
  using S = typename DevTraits<D>::S;
  using E = typename DevTraits<D>::E;
  using B = typename DevTraits<D>::B;

  Want w;
  S sum;
  T mn, mx;
  T amin_v, amax_v;
  std::int64_t amin_i, amax_i;
  int amin_pending = 0, amax_pending = 0;  // ArgOp::UpdateGroup
  T amin_floor, amax_floor;                // ShareWarp
  bool defer_args;                         // ArgOp::UpdateGroup
  // Most vectors in a group whose argmin/argmax search is deferred
  // (histogram and full slice kernels: Policy::HistVecs,
  // VecsPerThread or fewer). kSimple's larger groups have no arg ops.
  static constexpr int kMaxGroupVecs = Policy::VecsPerThread(static_cast<int>(sizeof(T)));
  double sumsq;
  rules::Moments mom;
  HistThread<B, typename DevTraits<D>::BE>* hist;
  // kMasking only: valid elements, and the NaN-skipping ops' state.
  unsigned long long cnt = 0, ncnt = 0;
  double nsum = 0.0;
  T nmn, nmx;
  rules::Moments nmom{};
  T namin_v, namax_v;
  std::int64_t namin_i = -1, namax_i = -1;

  // `defer`: argmin/argmax resolve their group at Finish() (ArgOp::UpdateGroup).
  TALLY_DEV ThreadAgg(const Want& want, HistThread<B, typename DevTraits<D>::BE>* h, bool defer = false)
      : w(want), defer_args(defer), hist(h) {
    sum = SumOp<D>::Identity();
    mn = amin_v = amin_floor = ExtremeOp<D>::MinIdentity();
    mx = amax_v = amax_floor = ExtremeOp<D>::MaxIdentity();
    nmn = namin_v = ExtremeOp<D>::MinIdentity();
    nmx = namax_v = ExtremeOp<D>::MaxIdentity();
    amin_i = amax_i = -1;
    sumsq = 0.0;
    mom = rules::Moments{};
  }

  // nvec of the V groups of K contiguous elements are valid (a prefix);
  // group v starts at row index base[v]. Groups come in increasing index order.
  template <int V, int K>
  TALLY_DEV void Add(const T (&x)[V][K], const std::int64_t (&base)[V], int nvec) {
    if (w.sum) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) sum = SumOp<D>::Merge(sum, SumOp<D>::template Group<K>(x[v]));
    }
    // float32 and integers: min and argmin (max and argmax) share one group
    // extreme, one min (max) per element for both. (Their min/max does not
    // depend on order; float64's software NaN rule is kept element by
    // element.)
    constexpr bool kShare = K <= 4 && D != rules::DType::kFloat64;
    if constexpr (kShare) {
      if (w.min || w.argmin) {
        const T g = ArgOp<D, false>::template GroupExtreme<V, K>(x, nvec);
        if (w.min) mn = ExtremeOp<D>::Min(mn, g);
        if (w.argmin) ArgOp<D, false>::template UpdateGroupWith<V, K>(amin_v, amin_i, amin_pending, defer_args, x, base, nvec, g, amin_floor);
      }
      if (w.max || w.argmax) {
        const T g = ArgOp<D, true>::template GroupExtreme<V, K>(x, nvec);
        if (w.max) mx = ExtremeOp<D>::Max(mx, g);
        if (w.argmax) ArgOp<D, true>::template UpdateGroupWith<V, K>(amax_v, amax_i, amax_pending, defer_args, x, base, nvec, g, amax_floor);
      }
    } else if (w.min || w.max) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
#pragma unroll
          for (int e = 0; e < K; ++e) {
            mn = ExtremeOp<D>::Min(mn, x[v][e]);
            mx = ExtremeOp<D>::Max(mx, x[v][e]);
          }
        }
    }
    if (w.sumsq) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) sumsq += SumSquaresOp<D>::template Group<K>(x[v]);
    }
    if (w.moments) mom = rules::MergeMoments(mom, MomentsOp<D>::template Group<V, K>(x, nvec));
    if (!kShare && w.argmin) ArgOp<D, false>::template UpdateGroup<V, K>(amin_v, amin_i, amin_pending, defer_args, x, base, nvec, amin_floor);
    if (!kShare && w.argmax) ArgOp<D, true>::template UpdateGroup<V, K>(amax_v, amax_i, amax_pending, defer_args, x, base, nvec, amax_floor);
    if (w.hist) {
      // Every slot by the quick guess first: independent work the
      // scheduler can overlap, no edge loads, one branch per group. When
      // some element is near an edge, outside the range or NaN (rare on
      // data inside the range), the group takes the exact path.
      // (uint8, 16 elements a vector, always branches per element, since
      // a group's exact path unrolled over 32 elements costs registers.)
      std::int32_t slot[V][K];
      if (K > 4 || hist->quick.per_element) {
#pragma unroll
        for (int v = 0; v < V; ++v)
#pragma unroll
          for (int e = 0; e < K; ++e)
            if (!hist->Quick(x[v][e], slot[v][e])) slot[v][e] = hist->SlotSlow(x[v][e]);
      } else {
        unsigned quick = 1;  // (a bool here became byte shuffling in SASS)
#pragma unroll
        for (int v = 0; v < V; ++v)
#pragma unroll
          for (int e = 0; e < K; ++e) quick &= static_cast<unsigned>(hist->Quick(x[v][e], slot[v][e]));
        if (!quick) {
#pragma unroll
          for (int v = 0; v < V; ++v)
#pragma unroll
            for (int e = 0; e < K; ++e) slot[v][e] = hist->SlotSlow(x[v][e]);
        }
      }
      hist->template CountGroup<V, K>(slot, nvec);
    }
  }

  // Raises argmin's and argmax's floors to the best candidate any lane of
  // the warp holds, when some lane's beats them: from then on a group no
  // better than the floor costs its lane one comparison (ArgOp::Worse), not
  // a search. Each lane alone takes a new candidate in about 1 of k groups
  // at its k-th, so, lane by lane, some lane of a warp searched in most
  // groups (a warp waits for its slowest lane); against the warp's best the
  // chance is about 1 in k for the whole warp. Every lane of the warp must
  // call it together.
  TALLY_DEV void ShareWarp() {
    if (w.argmin) ShareFloor<false>(amin_v, amin_floor);
    if (w.argmax) ShareFloor<true>(amax_v, amax_floor);
  }
  template <bool kMax>
  static TALLY_DEV void ShareFloor(T best, T& floor) {
    if (!__any_sync(0xffffffffu, ArgOp<D, kMax>::Worse(floor, best))) return;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const T other = ShflXor(best, o, 32);
      best = kMax ? ExtremeOp<D>::Max(best, other) : ExtremeOp<D>::Min(best, other);
    }
    floor = best;
  }

  TALLY_DEV void AddOne(T x, std::int64_t index) {
    const T g[1][1] = {{x}};
    const std::int64_t b[1] = {index};
    Add<1, 1>(g, b, 1);
  }

  // The masking kernels' Add: bit e of vm[v] is set when element e of
  // vector v is valid (vm[v] is 0 for v >= nvec). The plain ops see the
  // valid elements only, as if they ran on x[valid]: an element that is not
  // is replaced by the op's identity (0 for sums, the extremes' identities,
  // for argmin/argmax together with its bit, UpdateGroupOk) or skipped
  // (moments, histogram). The NaN-skipping ops (float dtypes) see the valid
  // elements that are not NaN the same way. Never deferred, never shared
  // across the warp: the masking kernels are not where the plain ops'
  // speed is won.
  template <int V, int K>
  TALLY_DEV void AddOk(const T (&x)[V][K], const std::int64_t (&base)[V], int nvec,
                       const unsigned (&vm)[V]) {
    static_assert(kMasking);
    using X = ExtremeOp<D>;
    auto bit = [](unsigned m, int e) { return ((m >> e) & 1u) != 0; };
    if (w.count) {
      unsigned c = 0;
#pragma unroll
      for (int v = 0; v < V; ++v) c += __popc(vm[v]);
      cnt += c;
    }
    if (w.sum) {
      // Zero in the element's own type (one select, before the widening).
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
          T y[K];
#pragma unroll
          for (int e = 0; e < K; ++e) y[e] = bit(vm[v], e) ? x[v][e] : T{};
          sum = SumOp<D>::Merge(sum, SumOp<D>::template Group<K>(y));
        }
    }
    if (w.min || w.max) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
#pragma unroll
          for (int e = 0; e < K; ++e) {
            if (w.min) mn = X::Min(mn, bit(vm[v], e) ? x[v][e] : X::MinIdentity());
            if (w.max) mx = X::Max(mx, bit(vm[v], e) ? x[v][e] : X::MaxIdentity());
          }
        }
    }
    if (w.sumsq) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
          double g = 0.0;
#pragma unroll
          for (int e = 0; e < K; ++e) {
            const double d = bit(vm[v], e) ? static_cast<double>(x[v][e]) : 0.0;
            g = __fma_rn(d, d, g);
          }
          sumsq += g;
        }
    }
    if (w.moments) mom = rules::MergeMoments(mom, MomentsOp<D>::template GroupOk<V, K>(x, nvec, vm));
    if constexpr (V * K <= 32) {
      if (w.argmin || w.argmax) {
        T y[V][K];
        if (w.argmin) {
#pragma unroll
          for (int v = 0; v < V; ++v)
#pragma unroll
            for (int e = 0; e < K; ++e) y[v][e] = bit(vm[v], e) ? x[v][e] : X::MinIdentity();
          ArgOp<D, false>::template UpdateGroupOk<V, K>(amin_v, amin_i, y, base, nvec, vm);
        }
        if (w.argmax) {
#pragma unroll
          for (int v = 0; v < V; ++v)
#pragma unroll
            for (int e = 0; e < K; ++e) y[v][e] = bit(vm[v], e) ? x[v][e] : X::MaxIdentity();
          ArgOp<D, true>::template UpdateGroupOk<V, K>(amax_v, amax_i, y, base, nvec, vm);
        }
      }
    }
    if (w.hist) {
      std::int32_t slot[V][K];
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int e = 0; e < K; ++e)
          if (!hist->Quick(x[v][e], slot[v][e])) slot[v][e] = hist->SlotSlow(x[v][e]);
      hist->template CountGroupOk<V, K>(slot, nvec, vm);
    }
    if constexpr (DevTraits<D>::kFloat) {
      if (w.ncount) {  // every NaN-skipping op
        unsigned ok[V];
        unsigned c = 0;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          unsigned b = 0;
#pragma unroll
          for (int e = 0; e < K; ++e) b |= x[v][e] == x[v][e] ? 1u << e : 0u;
          ok[v] = vm[v] & b;
          c += __popc(ok[v]);
        }
        ncnt += c;
        if (w.nsum) {
#pragma unroll
          for (int v = 0; v < V; ++v)
            if (v < nvec) {
              T y[K];
#pragma unroll
              for (int e = 0; e < K; ++e) y[e] = bit(ok[v], e) ? x[v][e] : T{};
              nsum += SumOp<D>::template Group<K>(y);
            }
        }
        if (w.nmin || w.nmax) {
#pragma unroll
          for (int v = 0; v < V; ++v)
            if (v < nvec) {
#pragma unroll
              for (int e = 0; e < K; ++e) {
                if (w.nmin) nmn = X::Min(nmn, bit(ok[v], e) ? x[v][e] : X::MinIdentity());
                if (w.nmax) nmx = X::Max(nmx, bit(ok[v], e) ? x[v][e] : X::MaxIdentity());
              }
            }
        }
        if (w.nmom) nmom = rules::MergeMoments(nmom, MomentsOp<D>::template GroupOk<V, K>(x, nvec, ok));
        if constexpr (V * K <= 32) {
          if (w.namin || w.namax) {
            T y[V][K];
            if (w.namin) {
#pragma unroll
              for (int v = 0; v < V; ++v)
#pragma unroll
                for (int e = 0; e < K; ++e) y[v][e] = bit(ok[v], e) ? x[v][e] : X::MinIdentity();
              ArgOp<D, false>::template UpdateGroupOk<V, K>(namin_v, namin_i, y, base, nvec, ok);
            }
            if (w.namax) {
#pragma unroll
              for (int v = 0; v < V; ++v)
#pragma unroll
                for (int e = 0; e < K; ++e) y[v][e] = bit(ok[v], e) ? x[v][e] : X::MaxIdentity();
              ArgOp<D, true>::template UpdateGroupOk<V, K>(namax_v, namax_i, y, base, nvec, ok);
            }
          }
        }
      }
    }
  }

  TALLY_DEV void AddOneOk(T x, std::int64_t index, bool valid) {
    const T g[1][1] = {{x}};
    const std::int64_t b[1] = {index};
    const unsigned vm[1] = {valid ? 1u : 0u};
    AddOk<1, 1>(g, b, 1, vm);
  }

  // `data`, `shift` and `stride` say where the elements Add() saw are: row
  // index i at data[i - shift], a group's vectors `stride` elements apart
  // (ArgOp::Resolve).
  TALLY_DEV Partial<D> Finish(const T* data, std::int64_t shift, std::int64_t stride) {
    if (w.argmin) ArgOp<D, false>::template Resolve<DevTraits<D>::kVec, kMaxGroupVecs>(amin_v, amin_i, amin_pending, data, shift, stride);
    if (w.argmax) ArgOp<D, true>::template Resolve<DevTraits<D>::kVec, kMaxGroupVecs>(amax_v, amax_i, amax_pending, data, shift, stride);
    if (w.hist) hist->Flush();
    Partial<D> p = IdentityPartial<D>();
    p.sum = sum;
    p.min = static_cast<E>(mn);
    p.max = static_cast<E>(mx);
    p.sumsq = sumsq;
    p.mom = mom;
    p.amin = {static_cast<E>(amin_v), amin_i};
    p.amax = {static_cast<E>(amax_v), amax_i};
    if constexpr (kMasking) {
      p.count = cnt;
      p.nsum = nsum;
      p.ncount = ncnt;
      p.nmin = static_cast<E>(nmn);
      p.nmax = static_cast<E>(nmx);
      p.nmom = nmom;
      p.namin = {static_cast<E>(namin_v), namin_i};
      p.namax = {static_cast<E>(namax_v), namax_i};
    }
    return p;
  }
};

// Elements [begin, end) of p, shared by `lanes` lanes (this one is `lane`)
// of `parts` groups (this one is `part`; blocks of a slice kernel);
// element i has row index i + shift. Each lane sees its elements in
// increasing order: a scalar head up to 16-byte alignment (part 0), full
// tiles of lanes * U vectors dealt round-robin to the parts (all
// parts stream through the same neighbourhood of memory, as a grid-stride
// loop does: contiguous slices per block ran at 0.91x CUB), one predicated
// partial tile and a scalar tail (the part whose turn it is). With
// kSyncTiles > 0 the block meets at a barrier after every kSyncTiles full
// tiles (every thread of a block runs the same tiles), which bounds the
// work done between two barriers (HistThread::Count16). With kPipe each
// lane issues its next tile's loads before it adds the current one, which
// keeps twice the bytes in flight for twice the registers. With kWarpShare
// the lanes of each warp pool their argmin/argmax candidates after every
// full tile (ThreadAgg::ShareWarp): only where every lane of a warp runs
// the same full tiles, as the threads of a slice kernel's block do. `agg`
// is a ThreadAgg<D, false>, or what takes the same calls (AggWithExact).
template <rules::DType D, int U = Policy::VecsPerThread(static_cast<int>(sizeof(typename DevTraits<D>::T))),
          int kSyncTiles = 0, bool kPipe = false, bool kWarpShare = false, typename Agg>
TALLY_DEV void AccumulateRange(const typename DevTraits<D>::T* __restrict__ p, std::int64_t begin,
                               std::int64_t end, int lane, int lanes, std::int64_t shift,
                               Agg& agg, std::int64_t part = 0,
                               std::int64_t parts = 1) {
  using T = typename DevTraits<D>::T;
  constexpr int K = DevTraits<D>::kVec;
  if (begin >= end) return;
  const auto addr = reinterpret_cast<std::uintptr_t>(p + begin);
  const std::int64_t head = static_cast<std::int64_t>(((16 - (addr & 15)) & 15) / sizeof(T));
  const std::int64_t a = begin + head < end ? begin + head : end;
  if (part == 0) {
    for (std::int64_t i = begin + lane; i < a; i += lanes) agg.AddOne(p[i], i + shift);
  }

  const std::int64_t nv = (end - a) / K;
  const uint4* vp = reinterpret_cast<const uint4*>(p + a);
  const std::int64_t tile = static_cast<std::int64_t>(lanes) * U;
  const std::int64_t full = nv / tile;  // full tiles
  // A full tile at vector t: this lane's vectors t + k * lanes + lane, and
  // their row indices.
  auto load_tile = [&](std::int64_t t, T (&x)[U][K]) {
#pragma unroll
    for (int k = 0; k < U; ++k) LoadVec<T, K>(x[k], vp + t + static_cast<std::int64_t>(k) * lanes + lane);
  };
  auto tile_bases = [&](std::int64_t t, std::int64_t (&base)[U]) {
#pragma unroll
    for (int k = 0; k < U; ++k) base[k] = a + (t + static_cast<std::int64_t>(k) * lanes + lane) * K + shift;
  };
  std::int64_t t = part * tile;
  if constexpr (kPipe) {
    // Registers double-buffer the tiles: the next tile's loads are issued
    // before this one is added, so they are in flight during the work.
    static_assert(kSyncTiles == 0);
    T next[U][K];
    bool have = t + tile <= nv;
    if (have) load_tile(t, next);
    while (have) {
      T x[U][K];
      std::int64_t base[U];
      std::memcpy(x, next, sizeof x);
      tile_bases(t, base);
      t += parts * tile;
      have = t + tile <= nv;
      if (have) load_tile(t, next);
      agg.template Add<U, K>(x, base, U);
      if constexpr (kWarpShare) agg.ShareWarp();
    }
  } else {
    int since_sync = 0;
    for (; t + tile <= nv; t += parts * tile) {
      if constexpr (kSyncTiles > 0) {
        if (++since_sync > kSyncTiles) {
          __syncthreads();
          since_sync = 1;
        }
      }
      T x[U][K];
      std::int64_t base[U];
      load_tile(t, x);
      tile_bases(t, base);
      agg.template Add<U, K>(x, base, U);
      if constexpr (kWarpShare) agg.ShareWarp();
    }
  }
  if (full % parts != part) return;  // the partial tile and the tail are another part's
  if (t < nv) {
    T x[U][K] = {};
    std::int64_t base[U];
    int nvec = 0;
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const std::int64_t j = t + static_cast<std::int64_t>(k) * lanes + lane;
      if (j < nv) {
        LoadVec<T, K>(x[k], vp + j);
        nvec = k + 1;
      }
      base[k] = a + j * K + shift;
    }
    if (nvec > 0) agg.template Add<U, K>(x, base, nvec);
  }
  for (std::int64_t i = a + nv * K + lane; i < end; i += lanes) agg.AddOne(p[i], i + shift);
}

}  // namespace tally::kernels::detail

namespace tally::kernels::detail {

// AccumulateRange for the masking kernels (ThreadAgg<D, true>): the same
// walk (head, full tiles dealt round-robin to the parts, a partial tile, a
// tail), not pipelined, and with each vector the validity bits of its
// elements: element i of p is element goff + i of the array, whose bit
// `validity` holds (nullptr: every element valid, as for the NaN-skipping
// ops without a mask). A warp's lanes read neighbouring vectors, so their
// bits come from the same few words: one 4-byte load per 16-byte vector,
// served by one L1 line per warp instruction.
//
// With kSplit the tiles run in one of three loops chosen once per range:
// no mask (the bits are constants and every select folds away), vectors
// aligned to K elements of the array (their bits never straddle two words:
// one load and one shift), and any other alignment (ValidBits). Without
// it (the kernels with every field, whose registers are the limit) only
// the last, for code size, which then also serves plans without a mask.
enum class BitsMode : int { kNone, kAligned, kAny };

template <rules::DType D, int U, BitsMode kMode>
TALLY_DEV void TilesOk(const uint4* vp, std::int64_t a, std::int64_t nv, std::int64_t t, int lane, int lanes,
                       std::int64_t shift, ThreadAgg<D, true>& agg, std::int64_t parts,
                       const std::uint32_t* __restrict__ validity, std::uint64_t goff, bool partial_tile) {
  using T = typename DevTraits<D>::T;
  constexpr int K = DevTraits<D>::kVec;
  constexpr unsigned kAll = (1u << K) - 1u;
  auto bits = [&](std::int64_t i) -> unsigned {
    const std::uint64_t g = goff + static_cast<std::uint64_t>(i);
    if constexpr (kMode == BitsMode::kNone) return kAll;
    else if constexpr (kMode == BitsMode::kAligned) return (__ldg(validity + (g >> 5)) >> (g & 31)) & kAll;
    else return validity == nullptr ? kAll : ValidBits(validity, g, K);  // unsplit: any plan
  };
  const std::int64_t tile = static_cast<std::int64_t>(lanes) * U;
  for (; t + tile <= nv; t += parts * tile) {
    T x[U][K];
    std::int64_t base[U];
    unsigned vm[U];
#pragma unroll
    for (int k = 0; k < U; ++k) LoadVec<T, K>(x[k], vp + t + static_cast<std::int64_t>(k) * lanes + lane);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const std::int64_t j = t + static_cast<std::int64_t>(k) * lanes + lane;
      vm[k] = bits(a + j * K);
      base[k] = a + j * K + shift;
    }
    agg.template AddOk<U, K>(x, base, U, vm);
  }
  if (!partial_tile || t >= nv) return;
  T x[U][K] = {};
  std::int64_t base[U];
  unsigned vm[U];
  int nvec = 0;
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const std::int64_t j = t + static_cast<std::int64_t>(k) * lanes + lane;
    vm[k] = 0;
    if (j < nv) {
      LoadVec<T, K>(x[k], vp + j);
      vm[k] = bits(a + j * K);
      nvec = k + 1;
    }
    base[k] = a + j * K + shift;
  }
  if (nvec > 0) agg.template AddOk<U, K>(x, base, nvec, vm);
}

template <rules::DType D, int U, bool kSplit = false>
TALLY_DEV void AccumulateRangeOk(const typename DevTraits<D>::T* __restrict__ p, std::int64_t begin,
                                 std::int64_t end, int lane, int lanes, std::int64_t shift,
                                 ThreadAgg<D, true>& agg, std::int64_t part, std::int64_t parts,
                                 const std::uint32_t* __restrict__ validity, std::uint64_t goff) {
  using T = typename DevTraits<D>::T;
  constexpr int K = DevTraits<D>::kVec;
  if (begin >= end) return;
  auto bit = [&](std::int64_t i) -> bool {
    return validity == nullptr || ValidBits(validity, goff + static_cast<std::uint64_t>(i), 1) != 0;
  };
  const auto addr = reinterpret_cast<std::uintptr_t>(p + begin);
  const std::int64_t head = static_cast<std::int64_t>(((16 - (addr & 15)) & 15) / sizeof(T));
  const std::int64_t a = begin + head < end ? begin + head : end;
  if (part == 0) {
    for (std::int64_t i = begin + lane; i < a; i += lanes) agg.AddOneOk(p[i], i + shift, bit(i));
  }
  const std::int64_t nv = (end - a) / K;
  const uint4* vp = reinterpret_cast<const uint4*>(p + a);
  const std::int64_t tile = static_cast<std::int64_t>(lanes) * U;
  const std::int64_t full = nv / tile;
  const bool mine = full % parts == part;  // the partial tile and the tail are this part's
  const std::int64_t t = part * tile;
  if constexpr (kSplit) {
    if (validity == nullptr) {
      TilesOk<D, U, BitsMode::kNone>(vp, a, nv, t, lane, lanes, shift, agg, parts, validity, goff, mine);
    } else if ((goff + static_cast<std::uint64_t>(a)) % K == 0) {
      TilesOk<D, U, BitsMode::kAligned>(vp, a, nv, t, lane, lanes, shift, agg, parts, validity, goff, mine);
    } else {
      TilesOk<D, U, BitsMode::kAny>(vp, a, nv, t, lane, lanes, shift, agg, parts, validity, goff, mine);
    }
  } else {
    TilesOk<D, U, BitsMode::kAny>(vp, a, nv, t, lane, lanes, shift, agg, parts, validity, goff, mine);
  }
  if (!mine) return;
  for (std::int64_t i = a + nv * K + lane; i < end; i += lanes) agg.AddOneOk(p[i], i + shift, bit(i));
}

}  // namespace tally::kernels::detail
