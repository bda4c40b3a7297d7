// OP_HISTOGRAM: numpy-exact binning (ops::HistogramBinner) into counters that
// are privatized in shared memory (one block, or a thread-block cluster's
// distributed shared memory when the bins exceed one block), or, for short
// rows, global. Counters are integers, so their combine order never shows.
// Slots: bins 0..bins-1, then below, above, nan (stride bins + 3).
#pragma once

#include <cooperative_groups.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tally/ops/histogram_bin.h"
#include "../device_traits.cuh"
#include "../policy.cuh"

namespace tally::kernels::detail {

enum class HistSink : int { kShared, kCluster, kGlobal };

// The slot of a bin from HistogramBinner::Bin.
TALLY_DEV std::int32_t SlotOf(std::int32_t bin, std::int32_t bins) {
  return bin >= 0 ? bin : bins - 1 - bin;  // kBinBelow -> bins, kBinAbove -> +1, kBinNan -> +2
}

// Rounding to the nearest integer without a conversion instruction: adding
// 1.5 * 2^(mantissa bits) leaves round(f) in the low bits (|f| < 2^22).
template <typename B>
struct RoundMagic;
template <>
struct RoundMagic<float> {
  static TALLY_DEV float Add(float a, float b) { return __fadd_rn(a, b); }
  static TALLY_DEV float Sub(float a, float b) { return __fsub_rn(a, b); }
  static TALLY_DEV float Mul(float a, float b) { return __fmul_rn(a, b); }
  static constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  static TALLY_DEV std::int32_t Bits(float y) { return __float_as_int(y) - 0x4B400000; }
};
template <>
struct RoundMagic<double> {
  static TALLY_DEV double Add(double a, double b) { return __dadd_rn(a, b); }
  static TALLY_DEV double Sub(double a, double b) { return __dsub_rn(a, b); }
  static TALLY_DEV double Mul(double a, double b) { return __dmul_rn(a, b); }
  static constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  static TALLY_DEV std::int32_t Bits(double y) {
    return static_cast<std::int32_t>(__double_as_longlong(y) - 0x4338000000000000LL);
  }
};

// The margin (in bins) that makes the quick guess exact, HistMargin below.
// With t = (x - lo) / step the exact position and e_i = (Edge(i) - lo) /
// step, the guess f = (x - lo_t) * scale (3 roundings) is within
// u*A/step + 3u*bins of t (float32; u the unit roundoff of B, A = max(|lo|,
// |hi|)), and each e_i within u*A/step (+ the float64 linspace rounding,
// 3*2^-53*bins) of i; float64 binning: within 4u*bins and u*A/step + 3u*bins.
// So when f is at least 4u*A/step + 8u*bins (twice the sum, or more) away
// from every integer, floor(f) = g satisfies Edge(g) <= x < Edge(g + 1):
// g is Bin's answer (and x lies inside [lo_t, hi_t]).
template <typename B>
B HistMargin(const ops::HistogramBinner<B>& b, double lo, double hi) {
  const double u = static_cast<double>(std::numeric_limits<B>::epsilon()) / 2;
  const double a = std::fmax(std::fabs(lo), std::fabs(hi));
  const double m = 4 * u * (a / b.step + 2 * static_cast<double>(b.bins)) + 1e-300;
  return m < 0.25 ? static_cast<B>(m) : static_cast<B>(1);  // 1: never safe
}

// The quick guess: true (and the slot in `slot`) when x is safely inside
// one bin; false when x is near an edge, outside [lo, hi] or NaN.
template <typename B>
TALLY_DEV bool SlotQuick(const ops::HistogramBinner<B>& b, B margin, B x, std::int32_t& slot) {
  using R = RoundMagic<B>;
  const B f = R::Mul(R::Sub(x, b.lo_t), b.scale);
  const B y = R::Add(f, R::kMagic);
  const B d = R::Sub(f, R::Sub(y, R::kMagic));  // f - round(f), exact
  slot = R::Bits(y) - (d < B(0) ? 1 : 0);
  return f > B(0) && f < static_cast<B>(b.bins) && (d >= margin || d <= -margin);
}

// HistogramBinner::Bin, fast and branch-free. Bin walks from its guess g:
// down while x < edge[i], then up while x >= edge[i+1]. When the walk takes
// no step, both edges read here (from a shared table, edges[i] ==
// binner.Edge(i) and edges[bins] == hi_t, or computed) show it, and g is
// Bin's answer. A walk of a step or more (x within rounding of an edge) is
// rare: the caller then asks Bin itself (`exact` false).
template <typename B>
TALLY_DEV std::int32_t SlotFast(const ops::HistogramBinner<B>& b, const B* edges, B x, bool& exact) {
  const B f = (x - b.lo_t) * b.scale;
  std::int32_t g = f >= static_cast<B>(b.bins) ? b.bins - 1 : static_cast<std::int32_t>(f);
  g = g < 0 ? 0 : g;  // also NaN: cvt gives 0
  const B e0 = edges ? edges[g] : b.Edge(g);
  const B e1 = edges ? edges[g + 1] : b.Edge(g + 1);
  const bool down = g > 0 && x < e0;
  const bool up = g < b.bins - 1 && x >= e1;
  const bool nan = x != x, below = x < b.lo_t, above = x > b.hi_t;
  exact = nan || below || above || !(down || up);
  std::int32_t slot = g;
  slot = above ? b.bins + 1 : slot;
  slot = below ? b.bins : slot;
  slot = nan ? b.bins + 2 : slot;
  return slot;
}

// Where one thread's counts go, plus a run-length counter in registers: a run
// of equal slots costs one atomic, so skewed data (every value in one bin)
// does not serialize on one shared-memory address.
template <typename B>
struct HistThread {
  ops::HistogramBinner<B> binner;
  const B* edges;                // shared edge table, or nullptr
  unsigned* counts;              // shared counters (this block's part)
  unsigned long long* global;    // kGlobal: the row's counters in the state
  std::uint32_t per_rank;        // kCluster: slots held by each block
  HistSink sink;
  B margin;                      // HistMargin
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
      atomicAdd(global + slot, static_cast<unsigned long long>(n));
    }
  }
  // The slot of x: the quick guess, else the edges, else Bin itself.
  template <typename T>
  TALLY_DEV std::int32_t Slot(T x) const {
    std::int32_t slot;
    if (!SlotQuick(binner, margin, static_cast<B>(x), slot)) {
      bool exact = true;
      slot = SlotFast(binner, edges, static_cast<B>(x), exact);
      if (!exact) slot = SlotExact(x);
    }
    return slot;
  }
  template <typename T>
  TALLY_DEV std::int32_t SlotExact(T x) const {
    return SlotOf(binner.Bin(static_cast<B>(x)), binner.bins);
  }
  TALLY_DEV void Count(std::int32_t slot) {
    if (!Policy::kSharedRunLength && sink == HistSink::kShared) {
      atomicAdd(counts + slot, 1u);  // same-address shared atomics are cheap on sm_90
      return;
    }
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
