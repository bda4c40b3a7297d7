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

// HistogramBinner::Bin, fast. Bin walks from its guess g: down while
// x < edge[i], then up while x >= edge[i+1]. Here both first edges are read
// at once (from a shared table, edges[i] == binner.Edge(i) and edges[bins] ==
// hi_t, or computed); when one step suffices the answer is the one Bin's
// walk gives, and in the rare case of a longer walk Bin itself decides.
template <typename B>
TALLY_DEV std::int32_t BinFast(const ops::HistogramBinner<B>& b, const B* edges, B x) {
  if (x != x) return ops::kBinNan;
  if (x < b.lo_t) return ops::kBinBelow;
  if (x > b.hi_t) return ops::kBinAbove;
  const B f = (x - b.lo_t) * b.scale;
  std::int32_t g = f >= static_cast<B>(b.bins) ? b.bins - 1 : static_cast<std::int32_t>(f);
  if (g < 0) g = 0;
  auto edge = [&](std::int32_t i) { return edges ? edges[i] : b.Edge(i); };
  const B e0 = edge(g), e1 = edge(g + 1);
  if (g > 0 && x < e0) return (g - 1 > 0 && x < edge(g - 1)) ? b.Bin(x) : g - 1;
  if (g < b.bins - 1 && x >= e1) return (g + 1 < b.bins - 1 && x >= edge(g + 2)) ? b.Bin(x) : g + 1;
  return g;
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
  TALLY_DEV std::int32_t SlotFor(T x) const {
    return SlotOf(BinFast(binner, edges, static_cast<B>(x)), binner.bins);
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
