// OP_HISTOGRAM: numpy-exact binning (rules::HistogramBinner) into counters that
// are privatized in shared memory (one block, or a thread-block cluster's
// distributed shared memory when the bins exceed one block), or, for short
// rows, global. Counters are integers, so their combine order never shows.
// Slots, as the kernels count them: below, bins 0..bins-1 at 1..bins, above,
// nan (bins + 3). Below sits before the bins so that the quick guess's
// floor + 1 is the slot of every finite value, inside the range or out (the
// guess clamped to [-0.5, bins + 0.5]: SlotQuick). The state keeps bins
// 0..bins-1, below, above, nan (StateSlot).
#pragma once

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tally/rules/histogram_bin.h"
#include "../device_traits.cuh"
#include "../policy.cuh"

namespace tally::kernels::detail {

// kShared: one block's u32 counters. kCluster: a cluster's, in distributed
// shared memory. kGlobal: the state's u64 counters. kShared16: one block's
// counters packed two to a word (16 bits each, 65536 bins in 128 KB), with
// carries to the state's u64 counters (Count16 below).
enum class HistSink : int { kShared, kCluster, kGlobal, kShared16 };

// The slot of a bin from HistogramBinner::Bin.
TALLY_DEV std::int32_t SlotOf(std::int32_t bin, std::int32_t bins) {
  if (bin >= 0) return bin + 1;
  return bin == rules::kBinBelow ? 0 : bins - 1 - bin;  // kBinAbove -> bins + 1, kBinNan -> + 2
}

// The state's counter of a slot: bins first, then below, above, nan.
TALLY_DEV std::uint32_t StateSlot(std::uint32_t slot, std::int32_t bins) {
  const std::uint32_t b = static_cast<std::uint32_t>(bins);
  return slot == 0 ? b : slot <= b ? slot - 1 : slot;
}

// floor(f) without a conversion instruction: adding 1.5 * 2^(mantissa bits)
// rounding down leaves floor(f) in the low bits (|f| < 2^22 for float,
// 2^51 for double); FADD.RM runs at the full FP32 rate, F2I.FLOOR at a
// quarter of it.
template <typename B>
struct RoundMagic;
template <>
struct RoundMagic<float> {
  static TALLY_DEV float Fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
  static TALLY_DEV float AddDown(float a, float b) { return __fadd_rd(a, b); }
  static TALLY_DEV float Sub(float a, float b) { return __fsub_rn(a, b); }
  // f within [lo, hi], NaN kept NaN (fminf and fmaxf would drop it).
  static TALLY_DEV float Clamp(float f, float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(f), "f"(lo));
    asm("min.NaN.f32 %0, %0, %1;" : "+f"(r) : "f"(hi));
    return r;
#else
    f = f < lo ? lo : f;
    return f > hi ? hi : f;
#endif
  }
  static constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  // floor(f) + 1 for y = AddDown(f, kMagic), |f| < 2^22.
  static TALLY_DEV std::uint32_t FloorPlusOne(float y) {
    return static_cast<std::uint32_t>(__float_as_int(y)) - (0x4B400000u - 1u);
  }
};
template <>
struct RoundMagic<double> {
  static TALLY_DEV double Fma(double a, double b, double c) { return __fma_rn(a, b, c); }
  static TALLY_DEV double AddDown(double a, double b) { return __dadd_rd(a, b); }
  static TALLY_DEV double Sub(double a, double b) { return __dsub_rn(a, b); }
  static TALLY_DEV double Clamp(double f, double lo, double hi) {
    f = f < lo ? lo : f;
    return f > hi ? hi : f;
  }
  static constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  static TALLY_DEV std::uint64_t FloorPlusOne(double y) {
    return static_cast<std::uint64_t>(__double_as_longlong(y)) - (0x4338000000000000ull - 1ull);
  }
};

// The quick guess and the margin (in bins) that makes it exact.
//
// Units of bins; t = (x - lo) / step is the exact position, u the unit
// roundoff of B, A = max(|lo|, |hi|). The guess f = fma(x, scale, offset),
// offset = RN(-lo_t * scale), is within 2u*|lo|/step + 2u*bins of t for f
// in [0, bins): lo_t's and offset's roundings, scale's (relative u, times
// |f| < bins + 1) and the fma's (u*|f|). Each edge e_i = (Edge(i) - lo) /
// step is within u*A/step + u*bins of i: float32 edges are float64 linspace
// values rounded once (u*A/step, plus 2^-52 relative in float64); float64
// edges round i*step and the sum. So with m at least the sum of the two,
// 3u*(A/step + bins + 1) (times 1 + 2^-10 for the second-order terms), a
// fraction of f inside (m, 1 - m) puts t strictly between e_g and e_{g+1}
// for g = floor(f), and g is HistogramBinner::Bin's answer; for g = -1, t
// is below e_0 (x < lo: below), for g = bins above e_bins (x > hi: above).
// The test is lo_safe < frac(f) < hi_safe, with lo_safe = m rounded up and
// hi_safe = 1 - m rounded down (frac(f) itself is exact). The edge tests of
// the GPU suite put values on and one ulp around every edge, lo and hi
// among them.
template <typename B, typename BE = B>
struct HistQuick {
  B offset;   // RN(-lo_t * scale)
  B lo_safe;  // m rounded up; 2 (never safe) for margins over a quarter bin
  B hi_safe;  // 1 - m rounded down; -1 then
  B top;      // bins + 0.5: guesses past it clamped there (above)
  // The chance that an element is near an edge (2m): with more than
  // Policy::kHistGroupMaxNearEdge, groups of elements would take the exact
  // path too often, and each element branches on its own instead.
  bool per_element;

  static HistQuick Make(const rules::HistogramBinner<B, BE>& b, double lo, double hi) {
    // u: the coarser of B's and the edges' unit roundoff (16-bit edges
    // are rounded to 11 or 8 bits, however B computes).
    const double u = std::fmax(static_cast<double>(std::numeric_limits<B>::epsilon()),
                               static_cast<double>(std::numeric_limits<BE>::epsilon())) / 2;
    const double a = std::fmax(std::fabs(lo), std::fabs(hi));
    const double m = 3 * u * (a / b.step + static_cast<double>(b.bins) + 1) * (1 + 0x1p-10);
    HistQuick q;
    q.offset = -(b.lo_t * b.scale);
    B lo_safe = static_cast<B>(m);
    if (static_cast<double>(lo_safe) < m) lo_safe = std::nextafter(lo_safe, B(2));
    B hi_safe = static_cast<B>(1 - m);
    if (static_cast<double>(hi_safe) > 1 - m) hi_safe = std::nextafter(hi_safe, B(-1));
    // The margin takes scale and offset to be B's rounding of finite
    // values: a subnormal scale has fewer bits (float32 ranges near
    // FLT_MAX), an infinite one none (ranges near the smallest spacing).
    const bool usable = m < 0.25 && std::isnormal(b.scale) && std::isfinite(q.offset);  // else always ask Bin
    q.lo_safe = usable ? lo_safe : B(2);
    q.hi_safe = usable ? hi_safe : B(-1);
    q.per_element = 2 * m > Policy::kHistGroupMaxNearEdge;
    q.top = static_cast<B>(b.bins) + B(0.5);
    return q;
  }
};

// True (and the slot in `slot`) when x is safely inside one bin, or below
// or above the range and safely away from it; false when x is near an edge
// or NaN (then `slot` is meaningless). Guesses below -0.5 and above bins +
// 0.5 are clamped there, frac 0.5 of the below and above slots, so values
// outside the range (infinities too) answer here as quickly as those
// inside: data with outliers would otherwise send nearly every group of
// elements to the exact path (a sixth of the elements outside took a
// 256-bin histogram from 4,300 GB/s to 1,740 on an H200).
template <typename B, typename BE>
TALLY_DEV bool SlotQuick(const rules::HistogramBinner<B, BE>& b, const HistQuick<B, BE>& q, B x,
                         std::int32_t& slot) {
  using R = RoundMagic<B>;
  const B f = R::Clamp(R::Fma(x, b.scale, q.offset), B(-0.5), q.top);
  const B y = R::AddDown(f, R::kMagic);
  slot = static_cast<std::int32_t>(R::FloorPlusOne(y));  // floor(f) + 1, in [0, bins + 1]
  const B d = R::Sub(f, R::Sub(y, R::kMagic));  // frac(f), exact; NaN for NaN
  // Both tests evaluated, no short circuit: predicates, no branch.
  return (d > q.lo_safe) & (d < q.hi_safe);
}

// HistogramBinner::Bin, fast and branch-free. Bin starts from its guess g
// (HistogramBinner::Guess) and moves down when x < edge[g], up when
// x >= edge[g+1]. When it does not move, both edges read here (from a shared
// table, edges[i] == binner.Edge(i) and edges[bins] == hi_t, or computed)
// show it, and g is Bin's answer. A move (x within rounding of an edge) is
// rare: the caller then asks Bin itself (`exact` false).
template <typename B, typename BE>
TALLY_DEV std::int32_t SlotFast(const rules::HistogramBinner<B, BE>& b, const B* edges, B x, bool& exact) {
  const std::int32_t g = b.Guess(x);
  const B e0 = edges ? edges[g] : b.Edge(g);
  const B e1 = edges ? edges[g + 1] : b.Edge(g + 1);
  const bool down = g > 0 && x < e0;
  const bool up = g < b.bins - 1 && x >= e1;
  const bool nan = x != x, below = x < b.lo_t, above = x > b.hi_t;
  exact = nan || below || above || !(down || up);
  std::int32_t slot = g + 1;
  slot = above ? b.bins + 1 : slot;
  slot = below ? 0 : slot;
  slot = nan ? b.bins + 2 : slot;
  return slot;
}

// kShared16's packed words: slots below to above (bins + 2) two to a word.
TALLY_HD constexpr std::uint32_t Wide16Words(std::int64_t bins) {
  return static_cast<std::uint32_t>((bins + 3) / 2);
}

// Where one thread's counts go, plus a run-length counter in registers: a run
// of equal slots costs one atomic, so skewed data (every value in one bin)
// does not serialize on one shared-memory address.
template <typename B, typename BE = B>
struct HistThread {
  rules::HistogramBinner<B, BE> binner;
  const B* edges;                // shared edge table, or nullptr
  unsigned* counts;              // shared counters (this block's part)
  unsigned long long* global;    // kGlobal: the row's counters in the state
  std::uint32_t per_rank;        // kCluster: slots held by each block
  HistSink sink;
  HistQuick<B, BE> quick;
  std::int32_t run_slot = -1;
  unsigned run_count = 0;

  TALLY_DEV void Emit(std::int32_t slot, unsigned n) {
    if (sink == HistSink::kShared) {
      atomicAdd(counts + slot, n);
    } else if (sink == HistSink::kCluster) {
      const unsigned rank = static_cast<unsigned>(slot) / per_rank;
      unsigned* remote = cooperative_groups::this_cluster().map_shared_rank(counts, rank);
      atomicAdd(remote + (static_cast<unsigned>(slot) - rank * per_rank), n);
    } else {
      atomicAdd(global + StateSlot(static_cast<std::uint32_t>(slot), binner.bins), static_cast<unsigned long long>(n));
    }
  }
  // The slot of x by the quick guess; false when it cannot tell.
  template <typename T>
  TALLY_DEV bool Quick(T x, std::int32_t& slot) const {
    return SlotQuick(binner, quick, static_cast<B>(x), slot);
  }
  // The slot of x when the quick guess could not tell: the edges, else Bin.
  template <typename T>
  TALLY_DEV std::int32_t SlotSlow(T x) const {
    bool exact = true;
    const std::int32_t slot = SlotFast(binner, edges, static_cast<B>(x), exact);
    return exact ? slot : SlotExact(x);
  }
  // kShared16: n more in the slot's 16-bit field. The add that takes a
  // field from below 0x8000 to 0x8000 or above (exactly one does, for each
  // crossing) moves 0x8000 to the u64 counter in `global` at once. Between
  // two of the block's barriers fewer than 0x8000 elements are counted
  // (WideSyncTiles), and a crossing is moved before its thread reaches the
  // next barrier, so a field stays below 0x8000 + 0x7FFF and never carries
  // into its neighbour. Slots below to above are the packed fields
  // (Wide16Words of them); NaN has a u32 counter after them.
  TALLY_DEV void Count16(std::int32_t slot, unsigned n) {
    if (slot > binner.bins + 1) {
      atomicAdd(counts + Wide16Words(binner.bins), n);
      return;
    }
    unsigned* word = counts + (slot >> 1);
    const unsigned shift = (static_cast<unsigned>(slot) & 1u) * 16u;
    const unsigned old = (atomicAdd(word, n << shift) >> shift) & 0xFFFFu;
    if (old < 0x8000u && old + n >= 0x8000u) {
      atomicSub(word, 0x8000u << shift);
      atomicAdd(global + StateSlot(static_cast<std::uint32_t>(slot), binner.bins), 0x8000ull);
    }
  }
  template <typename T>
  TALLY_DEV std::int32_t SlotExact(T x) const {
    return SlotOf(binner.Bin(static_cast<B>(x)), binner.bins);
  }
  // Counts a group of slots (the first nvec of V vectors of K): one shared
  // atomic per element into this block's counters; 16-bit fields, a group
  // all in one slot (skewed data) as one add, since 32 lanes adding to one
  // field with returned values serialize; else (cluster, global) one
  // atomic per run of equal slots, since remote atomics are dear.
  template <int V, int K>
  TALLY_DEV void CountGroup(const std::int32_t (&slot)[V][K], int nvec) {
    if (!Policy::kSharedRunLength && sink == HistSink::kShared) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
#pragma unroll
          for (int e = 0; e < K; ++e) atomicAdd(counts + slot[v][e], 1u);
        }
      return;
    }
    if (sink == HistSink::kShared16) {
      bool same = nvec == V;
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int e = 0; e < K; ++e) same &= slot[v][e] == slot[0][0];
      if (same) return Count16(slot[0][0], V * K);
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (v < nvec) {
#pragma unroll
          for (int e = 0; e < K; ++e) Count16(slot[v][e], 1);
        }
      return;
    }
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
#pragma unroll
        for (int e = 0; e < K; ++e) CountRun(slot[v][e]);
      }
  }
  // CountGroup for the masking kernels: only the elements whose bit is set
  // in vm[v] (bit e of vector v) are counted; a masked one is counted
  // nowhere, not even as below, above or NaN.
  template <int V, int K>
  TALLY_DEV void CountGroupOk(const std::int32_t (&slot)[V][K], int nvec, const unsigned (&vm)[V]) {
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) {
#pragma unroll
        for (int e = 0; e < K; ++e) {
          if (((vm[v] >> e) & 1u) == 0) continue;
          if (!Policy::kSharedRunLength && sink == HistSink::kShared) atomicAdd(counts + slot[v][e], 1u);
          else if (sink == HistSink::kShared16) Count16(slot[v][e], 1);
          else CountRun(slot[v][e]);
        }
      }
  }
  // One more in `slot`, counted by runs (Emit at each change of slot).
  TALLY_DEV void CountRun(std::int32_t slot) {
    if (slot == run_slot) {
      ++run_count;
    } else {
      if (run_count) Emit(run_slot, run_count);
      run_slot = slot;
      run_count = 1;
    }
  }
  TALLY_DEV void Flush() {
    if (run_count) Emit(run_slot, run_count);
    run_count = 0;
    run_slot = -1;
  }
};

}  // namespace tally::kernels::detail
