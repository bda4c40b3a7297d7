// The selection's window pass: when the caller says where its ranks will
// lie (Count's hints), a few ranks of the sample place a window of keys
// around each, and one pass counts the elements below each window and up to its
// top and gathers the keys inside the windows. No bucket table, no shared
// counters: a few comparisons an element, so the pass runs at the read's
// speed where the counting pass is bound by its instructions.
#pragma once

#include <cstdint>

#include "select/for_each.cuh"
#include "select/rank_select.cuh"
#include "select/keys.h"
#include "select/select_dispatch.h"
#include "select/select_policy.h"

namespace tally::kernels::select {

// The windows of `hints` from the sample (`count` keys, the all-ones keys
// of NaN, `counts->sampled_nan` of them, sorting last and left out): for
// the hint at fraction f of the t numbers sampled, the keys at sample ranks
// f (t - 1) -+ w, w = kHintSigmas sqrt(t f (1 - f)) + kHintExtra (past
// either end, every key on that side); hints ascending, so windows are too;
// overlapping ones joined. Two steps around a rank selection over the
// sample: the ranks (WindowRanksKernel), then the windows from the keys
// found at them (WindowsFromRanksKernel). No window (count 0) when the
// sample holds no number or the windows' sample keys predict more
// elements than kHintRoomShare of the room. One thread each.
template <typename K>
__global__ void WindowRanksKernel(std::uint32_t count, const WindowCounts* __restrict__ counts, GatherHints hints,
                                  RankSelect<K>* select, WindowPlan* plan) {
  WindowPlan p;
  const std::uint32_t t = count - counts->sampled_nan;
  p.numbers = t;
  std::uint32_t ranks = 0;
  std::uint64_t rank[kMaxRankSelect];
  // Each hint's low and high sample ranks, then their places once sorted
  // (the windows of neighbouring hints may overlap, so the high rank of one
  // may pass the low rank of the next).
  std::uint32_t a[P::kMaxHints], b[P::kMaxHints];
  if (t > 0) {
    p.count = hints.count;
    for (int h = 0; h < hints.count; ++h) {
      const double f = hints.fraction[h];
      const double width = P::kHintSigmas * sqrt(static_cast<double>(t) * f * (1 - f)) + P::kHintExtra;
      const double at = f * (t - 1);
      p.to_bottom[h] = at - width <= 0;
      p.to_top[h] = at + width >= t - 1;
      a[h] = p.to_bottom[h] ? 0u : static_cast<std::uint32_t>(floor(at - width));
      b[h] = p.to_top[h] ? t - 1 : static_cast<std::uint32_t>(ceil(at + width));
      p.predicted += b[h] - a[h] + 1;
      rank[ranks++] = a[h];
      rank[ranks++] = b[h];
    }
    for (std::uint32_t i = 1; i < ranks; ++i) {  // insertion sort of at most 16
      const std::uint64_t v = rank[i];
      std::uint32_t j = i;
      for (; j > 0 && rank[j - 1] > v; --j) rank[j] = rank[j - 1];
      rank[j] = v;
    }
    for (int h = 0; h < hints.count; ++h) {
      std::uint8_t i = 0;
      while (rank[i] != a[h]) ++i;
      p.lo_at[h] = i;
      i = 0;
      while (rank[i] != b[h]) ++i;
      p.hi_at[h] = i;
    }
  }
  select->count = ranks;
  for (std::uint32_t i = 0; i < ranks; ++i) select->rank[i] = rank[i];
  *plan = p;
}

template <typename K>
__global__ void WindowsFromRanksKernel(const RankSelect<K>* __restrict__ select, const WindowPlan* __restrict__ plan,
                                       std::uint64_t n, std::uint64_t room, Windows<K>* out) {
  constexpr K kHigh = static_cast<K>(~K{0});
  const WindowPlan& p = *plan;
  Windows<K> w;
  for (int h = 0; h < p.count; ++h) {
    const K lo = p.to_bottom[h] ? K{0} : select->key[p.lo_at[h]];
    const K hi = p.to_top[h] ? kHigh : select->key[p.hi_at[h]];
    if (w.count > 0 && lo <= w.hi[w.count - 1]) {
      w.hi[w.count - 1] = max(w.hi[w.count - 1], hi);
    } else {
      w.lo[w.count] = lo;
      w.hi[w.count] = hi;
      ++w.count;
    }
  }
  const bool too_many = p.numbers == 0 || select->lost != 0 ||
                        p.predicted * static_cast<double>(n) / p.numbers > P::kHintRoomShare * static_cast<double>(room);
  if (too_many) w.count = 0;
  *out = w;
}

// The window pass over the first `W` windows (a caller with fewer repeats
// the last, whose counts are then written once): counts->below[r] the
// numbers with key < lo[r], counts->upto[r] those with key <= hi[r],
// counts->nan the NaN elements; the keys inside any window appended to
// keys[0, room) in no order (counts->gathered counts all of them). Each
// warp buffers its keys in shared memory and appends a full buffer with one
// atomic (CountKernel's measurements: lanes appending one by one, or a
// block buffer flushed at barriers, made such a pass slower). Nothing runs
// when there is no window.
template <typename T, int W>
__global__ void __launch_bounds__(P::kThreads, P::CountBlocksPerSm(sizeof(T)))
    WindowPassKernel(const T* __restrict__ data, std::uint64_t n, bool aligned,
                     const Windows<KeyOf<T>>* __restrict__ windows, KeyOf<T>* __restrict__ keys, std::uint32_t room,
                     WindowCounts* __restrict__ counts) {
  using K = KeyOf<T>;
  __shared__ K buffers[kWarpBuffer * (P::kThreads / 32)];
  const std::uint32_t nwindows = windows->count;
  if (nwindows == 0) return;
  K lo[W], span[W];
#pragma unroll
  for (int r = 0; r < W; ++r) {
    const std::uint32_t at = min(static_cast<std::uint32_t>(r), nwindows - 1);
    lo[r] = windows->lo[at];
    span[r] = windows->hi[at] - lo[r];
  }
  std::uint32_t below[W] = {}, inside[W] = {}, nan = 0;
  K* const buffer = buffers + kWarpBuffer * (threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  WarpBuffer<kWarpBuffer> staged;
  const auto drain = [&] {
    staged.Drain(&counts->gathered, [&](std::uint32_t slot, std::uint64_t place) {
      if (place < room) keys[place] = buffer[slot];
    });
  };
  ForEach<T, P::kThreads, P::kVecs>(data, n, aligned, [&](T x, std::uint64_t, bool valid) {
    const K key = KeyIn<KeyMode::kNumbers>(x);
    const bool is_nan = IsNan(x);
    const bool number = valid && !is_nan;
    nan += valid && is_nan ? 1 : 0;
    bool take = false;
#pragma unroll
    for (int r = 0; r < W; ++r) {
      const bool in = number && key - lo[r] <= span[r];
      below[r] += number && key < lo[r] ? 1 : 0;
      inside[r] += in ? 1 : 0;
      take |= in;
    }
    const std::uint32_t slot = staged.Slot(take, drain);
    if (slot != ~0u) buffer[slot] = key;
  });
  if (staged.used > 0) drain();
  const auto add = [&](std::uint32_t v, unsigned long long* to) {
    v = __reduce_add_sync(0xffffffffu, v);
    if (lane == 0 && v != 0) atomicAdd(to, static_cast<unsigned long long>(v));
  };
#pragma unroll
  for (int r = 0; r < W; ++r) {
    if (static_cast<std::uint32_t>(r) < nwindows) {
      add(below[r], &counts->below[r]);
      add(below[r] + inside[r], &counts->upto[r]);
    }
  }
  add(nan, &counts->nan);
}

}  // namespace tally::kernels::select
