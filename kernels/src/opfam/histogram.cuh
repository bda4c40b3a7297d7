// OP_HISTOGRAM: numpy-exact binning (ops::HistogramBinner) into counters that
// are privatized in shared memory (one block, or a thread-block cluster's
// distributed shared memory when the bins exceed one block), or, for short
// rows, global. Counters are integers, so their combine order never shows.
// Slots: bins 0..bins-1, then below, above, nan (stride bins + 3).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "tally/ops/histogram_bin.h"
#include "../device_traits.cuh"

namespace tally::kernels::detail {

enum class HistSink : int { kShared, kCluster, kGlobal };

// The slot of a bin from HistogramBinner::Bin.
TALLY_DEV std::int32_t SlotOf(std::int32_t bin, std::int32_t bins) {
  return bin >= 0 ? bin : bins - 1 - bin;  // kBinBelow -> bins, kBinAbove -> +1, kBinNan -> +2
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
  template <typename T>
  TALLY_DEV std::int32_t SlotFor(T x, bool& exact) const {
    return SlotFast(binner, edges, static_cast<B>(x), exact);
  }
  template <typename T>
  TALLY_DEV std::int32_t SlotExact(T x) const {
    return SlotOf(binner.Bin(static_cast<B>(x)), binner.bins);
  }
  TALLY_DEV void Count(std::int32_t slot) {
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
