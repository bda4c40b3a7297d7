// The host side of tally/kernels/select.h's selection and top-k: sizing and
// carving the scratch, and the planning between passes (selection.h says
// how a selection runs; TopK below how top-k does).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "select/scratch.h"
#include "select/select_dispatch.h"
#include "select/select_policy.h"
#include "select/selection.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/select.h"

namespace tally::kernels {
namespace select {

cudaError_t Invalid(const char* why, const char* file, int line) {
  return cuda::Record(cudaErrorInvalidValue, why, file, line);
}

namespace {

using P = SelectPolicy;

constexpr std::size_t kMaxRanks = kMaxSegments;


cudaError_t Sms(int* sms) {
  int device = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&device));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device));
  return cudaSuccess;
}

// A Selection's arrays in scratch.
template <typename K>
struct SelectionLayout {
  K* sample = nullptr;
  Bin<K>* table = nullptr;
  std::uint32_t* hits = nullptr;  // the sample's per bin: kLevelBins each
  K* lows = nullptr;
  K* highs = nullptr;
  std::uint32_t* block_counts = nullptr;  // [full grid][kCountSlots]
  std::uint32_t* counts = nullptr;        // [kCountSlots]
  std::uint32_t* map = nullptr;           // [kBuckets]
  std::uint32_t* places = nullptr;        // [full grid][max ranks]
  Segment<K>* segments = nullptr;
  std::uint32_t* segment_start = nullptr;
  std::uint32_t* segment_fill = nullptr;
  K* candidates = nullptr;
  K* candidates_alt = nullptr;
  void* sort_temp = nullptr;
  std::size_t sort_bytes = 0;
  std::uint32_t* pos = nullptr;
  K* picked = nullptr;
  Windows<K>* windows = nullptr;        // [1]: the hints' windows
  WindowCounts* window_counts = nullptr;  // [1]: the window pass's counts
  WindowPlan* plan = nullptr;             // [1]: the windows' ranks in the sample
  RankSelect<K>* ranks = nullptr;         // [1]: the sample's window keys, then the picks
  std::uint64_t room = 0;  // candidates
  int grid = 0;
};

template <typename K>
cudaError_t LayOut(std::size_t max_ranks, std::uint64_t room, Carver& c, SelectionLayout<K>* at) {
  int sms = 0;
  TALLY_CUDA_TRY(Sms(&sms));
  at->grid = sms * P::CountBlocksPerSm(sizeof(K));
  at->room = room;
  TALLY_CUDA_TRY(KeyPasses<K>::SortKeysBytes(static_cast<std::uint32_t>(at->room), &at->sort_bytes));
  at->sample = c.Take<K>(P::kSelectionSample);
  at->table = c.Take<Bin<K>>(kLevelBins);
  at->hits = c.Take<std::uint32_t>(kLevelBins);
  at->lows = c.Take<K>(kLevelBins);
  at->highs = c.Take<K>(kLevelBins);
  at->block_counts = c.Take<std::uint32_t>(std::size_t(at->grid) * kCountSlots);
  at->counts = c.Take<std::uint32_t>(kCountSlots);
  at->map = c.Take<std::uint32_t>(P::kBuckets);
  at->places = c.Take<std::uint32_t>(std::size_t(at->grid) * max_ranks);
  at->segments = c.Take<Segment<K>>(max_ranks);
  at->segment_start = c.Take<std::uint32_t>(max_ranks + 1);
  at->segment_fill = c.Take<std::uint32_t>(max_ranks);
  at->candidates = c.Take<K>(at->room);
  at->candidates_alt = c.Take<K>(at->room);
  at->sort_temp = c.Take<std::byte>(at->sort_bytes);
  at->pos = c.Take<std::uint32_t>(max_ranks);
  at->picked = c.Take<K>(max_ranks);
  at->windows = c.Take<Windows<K>>(1);
  at->window_counts = c.Take<WindowCounts>(1);
  at->plan = c.Take<WindowPlan>(1);
  at->ranks = c.Take<RankSelect<K>>(1);
  return cudaSuccess;
}

// The keys [lo, hi] of a bucket of a table.
template <typename K>
struct KeyRange {
  K lo, hi;
};

template <typename K>
KeyRange<K> RangeOf(const std::vector<Bin<K>>& table, std::uint32_t bucket) {
  const auto after = std::upper_bound(table.begin(), table.end(), bucket,
                                      [](std::uint32_t b, const Bin<K>& bin) { return b < BaseOf(bin); });
  const auto level = static_cast<std::uint32_t>(after - table.begin() - 1);
  const Bin<K>& bin = table[level];
  constexpr int kRest = kKeyBits<K> - kLevelBits;
  const K start = static_cast<K>(K{level} << kRest);
  const K end = static_cast<K>(start | ((K{1} << kRest) - 1));
  const std::uint32_t d = bucket - BaseOf(bin);
  if (d == 0) return {start, static_cast<K>(bin.lo - 1)};  // below lo (never asked for when empty)
  // The sub-ranges and the rest of the bin, in 128-bit arithmetic: lo +
  // nsub << shift may pass the largest key.
  using W = unsigned __int128;
  const W from = W{bin.lo} + (W{d - 1} << ShiftOf(bin));
  const W to = d - 1 < SubRangesOf(bin) ? from + (W{1} << ShiftOf(bin)) - 1 : W{end};
  return {static_cast<K>(from), static_cast<K>(std::min<W>(to, W{end}))};
}

template <typename T>
class SelectionOf final : public Selection {
 public:
  using K = KeyOf<T>;

  SelectionOf(const DeviceArray& a, KeyMode mode, std::size_t max_ranks, std::uint64_t room, void* scratch,
              cudaStream_t stream)
      : data_(static_cast<const T*>(a.data)), n_(a.length), mode_(mode), max_ranks_(max_ranks), stream_(stream) {
    Carver c(scratch);
    laid_out_ = LayOut<K>(max_ranks_, room, c, &at_);
  }

  cudaError_t Count(std::uint64_t* nan, std::span<const double> hints) override {
    TALLY_CUDA_TRY(laid_out_);
    for (const double f : hints) {
      if (!(f >= 0 && f <= 1)) return TALLY_SELECT_INVALID("hints must be fractions in [0, 1]");
    }
    if (!hints.empty() && hints.size() <= static_cast<std::size_t>(P::kMaxHints)) {
      TALLY_CUDA_TRY(CountInWindows(hints));
    }
    if (!windowed_) TALLY_CUDA_TRY(CountBuckets());
    *nan = n_ - numbers_;
    counted_ = true;
    return cudaSuccess;
  }

  cudaError_t SelectKeys(std::span<const std::uint64_t> ranks, std::span<std::uint64_t> keys) override {
    if (!counted_) return TALLY_SELECT_INVALID("Select before Count");
    if (ranks.size() > max_ranks_ || keys.size() < ranks.size()) return TALLY_SELECT_INVALID("too many ranks");
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] >= numbers_ || (i > 0 && ranks[i] <= ranks[i - 1])) {
        return TALLY_SELECT_INVALID("ranks must be ascending, distinct and below the non-NaN count");
      }
    }
    if (windowed_) {
      bool answered = false;
      TALLY_CUDA_TRY(PickInWindows(ranks, keys, &answered));
      if (answered) return cudaSuccess;
      // A rank outside the windows, or too many keys in them: count the
      // buckets after all (a full read) and go on from there.
      windowed_ = false;
      TALLY_CUDA_TRY(CountBuckets());
    }
    // Each rank's bucket of the counting pass; a bucket of one key answers.
    std::vector<std::uint64_t> below(P::kBuckets + 1, 0);
    for (int b = 0; b < P::kBuckets; ++b) below[b + 1] = below[b] + counts_[b];
    std::vector<Target> targets;
    std::vector<int> of(ranks.size(), -1);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto b = static_cast<std::uint32_t>(std::upper_bound(below.begin(), below.end(), ranks[i]) -
                                                below.begin() - 1);
      const KeyRange<K> r = RangeOf(table_, b);
      if (r.lo == r.hi) {
        keys[i] = r.lo;
        continue;
      }
      if (targets.empty() || targets.back().bucket != b) targets.push_back({r.lo, r.hi, below[b], counts_[b], b});
      of[i] = static_cast<int>(targets.size() - 1);
    }
    for (int round = 0; !targets.empty() && Held(targets) > at_.room; ++round) {
      if (round == kMaxRefines) return TALLY_SELECT_INVALID("the refining passes did not converge");
      TALLY_CUDA_TRY(Refine(ranks, keys, targets, of));
    }
    if (targets.empty()) return cudaSuccess;
    return GatherAndPick(ranks, keys, targets, of);
  }

  std::uint64_t NumberBitsOf(std::uint64_t key) const override { return NumberBits<T>(static_cast<K>(key)); }

 private:
  // Whether the gathering pass with `count` segments' cursors in shared
  // memory still runs as many blocks per SM as the counting pass did.
  static cudaError_t PlacesFit(std::uint32_t count, bool* fits) {
    int device = 0, per_sm = 0, reserved = 0;
    TALLY_CUDA_TRY(cudaGetDevice(&device));
    TALLY_CUDA_TRY(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    TALLY_CUDA_TRY(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
    *fits = P::CountBlocksPerSm(sizeof(K)) * (GatherSharedBytes<K>(count) + reserved) <=
            static_cast<std::size_t>(per_sm);
    return cudaSuccess;
  }

  // The sample, its windows around `hints`, and the window pass
  // (window_kernels.cuh); windowed_ when the windows were there to count.
  cudaError_t CountInWindows(std::span<const double> hints) {
    const auto s = static_cast<std::uint32_t>(std::min<std::uint64_t>(n_, P::kSelectionSample));
    GatherHints h;
    h.count = static_cast<int>(hints.size());
    std::copy(hints.begin(), hints.end(), h.fraction);
    std::sort(h.fraction, h.fraction + h.count);
    int width = 1;
    while (width < h.count) width *= 2;
    TALLY_CUDA_TRY(cudaMemsetAsync(at_.window_counts, 0, sizeof(WindowCounts), stream_));
    TALLY_CUDA_TRY(ElementPasses<T>::Sample(data_, n_, mode_, at_.sample, s,
                                            SkipHigh() ? &at_.window_counts->sampled_nan : nullptr, stream_));
    TALLY_CUDA_TRY(KeyPasses<K>::MakeWindows(at_.sample, s, at_.window_counts, h, n_, at_.room, at_.ranks, at_.plan,
                                             at_.windows, stream_));
    TALLY_CUDA_TRY(ElementPasses<T>::Windowed(data_, n_, at_.windows, width, at_.candidates,
                                              static_cast<std::uint32_t>(at_.room), at_.window_counts, at_.grid,
                                              stream_));
    TALLY_CUDA_TRY(cudaMemcpyAsync(&windows_, at_.windows, sizeof windows_, cudaMemcpyDeviceToHost, stream_));
    TALLY_CUDA_TRY(cudaMemcpyAsync(&window_counts_, at_.window_counts, sizeof window_counts_,
                                   cudaMemcpyDeviceToHost, stream_));
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream_));
    if (windows_.count == 0) return cudaSuccess;  // the pass did not run
    ++stats.full_passes;
    windowed_ = true;
    numbers_ = n_ - window_counts_.nan;
    return cudaSuccess;
  }

  // The counting pass over the sample's bucket table; the counts Select
  // narrows with.
  cudaError_t CountBuckets() {
    const auto s = static_cast<std::uint32_t>(std::min<std::uint64_t>(n_, P::kSelectionSample));
    TALLY_CUDA_TRY(ElementPasses<T>::Sample(data_, n_, mode_, at_.sample, s, nullptr, stream_));
    TALLY_CUDA_TRY(KeyPasses<K>::BuildTable(at_.sample, s, SkipHigh(), at_.hits, at_.lows, at_.highs, at_.table,
                                            stream_));
    TALLY_CUDA_TRY(ElementPasses<T>::Count(data_, n_, mode_, at_.table, at_.block_counts, at_.grid, stream_));
    TALLY_CUDA_TRY(ReduceCounts(at_.block_counts, at_.grid, at_.counts, stream_));
    table_.resize(kLevelBins);
    counts_.resize(kCountSlots);
    TALLY_CUDA_TRY(cudaMemcpyAsync(table_.data(), at_.table, sizeof(Bin<K>) * kLevelBins, cudaMemcpyDeviceToHost,
                                   stream_));
    TALLY_CUDA_TRY(cudaMemcpyAsync(counts_.data(), at_.counts, sizeof(std::uint32_t) * kCountSlots,
                                   cudaMemcpyDeviceToHost, stream_));
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream_));
    ++stats.full_passes;
    numbers_ = n_ - counts_[kNanSlot];
    return cudaSuccess;
  }

  // Float keys of NaN are all-ones in the sample; the table and the
  // windows leave them out.
  bool SkipHigh() const { return mode_ == KeyMode::kNumbers && std::is_floating_point_v<T>; }

  // The ranks read from the window pass's keys when each lies in a window
  // (below[r] <= rank < upto[r]): a window of one key is the answer; the
  // others' places among the gathered keys, sorted, are the rank less the
  // numbers below its window plus the keys of the windows before it.
  // *answered false (nothing written) when some rank lies outside the
  // windows or the windows held more keys than the room kept.
  cudaError_t PickInWindows(std::span<const std::uint64_t> ranks, std::span<std::uint64_t> keys, bool* answered) {
    *answered = false;
    const WindowCounts& c = window_counts_;
    std::vector<std::uint64_t> before(windows_.count + 1, 0);  // gathered keys of the windows before
    for (std::uint32_t r = 0; r < windows_.count; ++r) before[r + 1] = before[r] + (c.upto[r] - c.below[r]);
    if (before.back() != c.gathered) return TALLY_SELECT_INVALID("the window pass's counts disagree");
    std::vector<int> of(ranks.size(), -1);
    std::vector<std::uint32_t> place(ranks.size(), 0);
    std::vector<K> direct(ranks.size(), 0);
    bool gather = false;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      std::uint32_t r = 0;
      while (r < windows_.count && !(ranks[i] >= c.below[r] && ranks[i] < c.upto[r])) ++r;
      if (r == windows_.count) return cudaSuccess;
      if (windows_.lo[r] == windows_.hi[r]) {
        direct[i] = windows_.lo[r];
        continue;
      }
      of[i] = static_cast<int>(r);
      place[i] = static_cast<std::uint32_t>(before[r] + ranks[i] - c.below[r]);
      gather = true;
    }
    if (gather && c.gathered > at_.room) return cudaSuccess;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (of[i] < 0) keys[i] = direct[i];
    }
    if (gather) TALLY_CUDA_TRY(SortAndPick(c.gathered, ranks, keys, of, [&](std::size_t i) { return place[i]; }));
    stats.gathered_while_counting = true;
    *answered = true;
    return cudaSuccess;
  }

  // Keys [lo, hi] that hold some ranks: `below` elements lie under lo and
  // `count` in it; `bucket` is the counting pass's bucket that holds it.
  struct Target {
    K lo, hi;
    std::uint64_t below, count;
    std::uint32_t bucket;
  };
  // Each round at least halves every target's keys: 64 rounds end any.
  static constexpr int kMaxRefines = 64;

  static std::uint64_t Held(const std::vector<Target>& targets) {
    std::uint64_t sum = 0;
    for (const Target& t : targets) sum += t.count;
    return sum;
  }

  // The targets as segments, and the map from the counting pass's buckets
  // to them, on the device.
  cudaError_t Upload(const std::vector<Target>& targets, std::vector<Segment<K>>& segments) {
    std::vector<std::uint32_t> map(P::kBuckets, 0);
    for (std::size_t s = 0; s < targets.size(); ++s) {
      std::uint32_t& e = map[targets[s].bucket];
      e = e == 0 ? MapEntry(static_cast<std::uint32_t>(s), 1) : e + (1u << 16);
    }
    TALLY_CUDA_TRY(cudaMemcpyAsync(at_.map, map.data(), sizeof(std::uint32_t) * map.size(), cudaMemcpyHostToDevice,
                                   stream_));
    TALLY_CUDA_TRY(cudaMemcpyAsync(at_.segments, segments.data(), sizeof(Segment<K>) * segments.size(),
                                   cudaMemcpyHostToDevice, stream_));
    return cudaSuccess;
  }

  // One refining pass: each target's keys cut into sub-ranges (as many as
  // its share of the elements, two at least), counted, and each rank's
  // sub-range its new target.
  cudaError_t Refine(std::span<const std::uint64_t> ranks, std::span<std::uint64_t> keys,
                     std::vector<Target>& targets, std::vector<int>& of) {
    const std::uint64_t held = Held(targets);
    const std::uint64_t spare = P::kBuckets - 2 * targets.size();
    std::vector<Segment<K>> segments(targets.size());
    std::uint32_t base = 0;
    for (std::size_t s = 0; s < targets.size(); ++s) {
      const Target& t = targets[s];
      const std::uint64_t want = std::max<std::uint64_t>(2, t.count * spare / std::max<std::uint64_t>(held, 1));
      const K span = t.hi - t.lo;
      std::uint32_t shift = 0;
      while ((span >> shift) >= want) ++shift;
      segments[s] = {t.lo, t.hi, base, static_cast<std::uint32_t>((span >> shift) + 1), shift};
      base += segments[s].nsub;
    }
    TALLY_CUDA_TRY(Upload(targets, segments));
    int grid = 0;
    TALLY_CUDA_TRY(ElementPasses<T>::RefineGrid(&grid));
    TALLY_CUDA_TRY(ElementPasses<T>::Refine(data_, n_, mode_, at_.table, at_.map, at_.segments, at_.block_counts,
                                            grid, stream_));
    refined_ = true;  // block_counts now holds this pass's rows
    TALLY_CUDA_TRY(ReduceCounts(at_.block_counts, grid, at_.counts, stream_));
    std::vector<std::uint32_t> counts(base);
    TALLY_CUDA_TRY(cudaMemcpyAsync(counts.data(), at_.counts, sizeof(std::uint32_t) * base, cudaMemcpyDeviceToHost,
                                   stream_));
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream_));
    ++stats.full_passes;
    std::vector<Target> next;
    std::vector<std::uint64_t> local;  // elements below each sub-range of the segment in hand
    int last = -1;                     // the segment `local` is of
    std::uint32_t last_sub = 0;        // the sub-range next.back() is (of segment `last`)
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const int s = of[i];
      if (s < 0) continue;
      const Target& t = targets[s];
      const Segment<K>& seg = segments[s];
      if (s != last) {
        local.assign(seg.nsub + 1, 0);
        for (std::uint32_t j = 0; j < seg.nsub; ++j) local[j + 1] = local[j] + counts[seg.base + j];
      }
      const std::uint64_t r = ranks[i] - t.below;
      const auto j = static_cast<std::uint32_t>(std::upper_bound(local.begin(), local.end(), r) - local.begin() - 1);
      const K lo = static_cast<K>(t.lo + (K{j} << seg.shift));
      const K hi = j + 1 == seg.nsub ? t.hi : static_cast<K>(t.lo + (K{j + 1} << seg.shift) - 1);
      if (lo == hi) {
        keys[i] = lo;
        of[i] = -1;
      } else {
        if (next.empty() || s != last || j != last_sub) {
          next.push_back({lo, hi, t.below + local[j], counts[seg.base + j], t.bucket});
        }
        of[i] = static_cast<int>(next.size() - 1);
        last_sub = j;
      }
      last = s;
    }
    targets = std::move(next);
    return cudaSuccess;
  }

  // The targets' elements gathered (one pass), sorted, and read at the
  // ranks' places.
  cudaError_t GatherAndPick(std::span<const std::uint64_t> ranks, std::span<std::uint64_t> keys,
                            const std::vector<Target>& targets, const std::vector<int>& of) {
    std::vector<Segment<K>> segments(targets.size());
    std::vector<std::uint32_t> start(targets.size() + 1, 0);
    for (std::size_t s = 0; s < targets.size(); ++s) {
      // base: the counting pass's bucket, for BlockPlaces.
      segments[s] = {targets[s].lo, targets[s].hi, targets[s].bucket, 0, 0};
      start[s + 1] = start[s] + static_cast<std::uint32_t>(targets[s].count);
    }
    const std::uint32_t held = start.back();
    const auto count = static_cast<std::uint32_t>(targets.size());
    TALLY_CUDA_TRY(Upload(targets, segments));
    TALLY_CUDA_TRY(cudaMemcpyAsync(at_.segment_start, start.data(), sizeof(std::uint32_t) * start.size(),
                                   cudaMemcpyHostToDevice, stream_));
    // Each block writes its own places when the counting pass's rows are
    // still there (the segments are its buckets) and its cursors leave room
    // for the counting pass's blocks per SM; else warps take places with
    // atomics.
    std::uint32_t* places = nullptr;
    bool fits = false;
    TALLY_CUDA_TRY(PlacesFit(count, &fits));
    if (!refined_ && fits) {
      places = at_.places;
      TALLY_CUDA_TRY(KeyPasses<K>::BlockPlaces(at_.block_counts, at_.grid, at_.segments, count, at_.segment_start,
                                               places, stream_));
    } else {
      TALLY_CUDA_TRY(cudaMemsetAsync(at_.segment_fill, 0, sizeof(std::uint32_t) * count, stream_));
    }
    TALLY_CUDA_TRY(ElementPasses<T>::Gather(data_, n_, mode_, at_.table, at_.map, at_.segments, count, places,
                                            at_.segment_start, at_.segment_fill, at_.candidates, at_.grid, stream_));
    TALLY_CUDA_TRY(SortAndPick(held, ranks, keys, of, [&](std::size_t i) {
      return start[of[i]] + static_cast<std::uint32_t>(ranks[i] - targets[of[i]].below);
    }));
    ++stats.full_passes;
    return cudaSuccess;
  }

  // Reads keys[i] at place(i) among candidates[0, count), sorted, for each
  // rank i that still has a target (of[i] >= 0): a rank selection of those
  // places when there are few enough (rank_select.cuh), else a sort.
  template <typename Place>
  cudaError_t SortAndPick(std::uint32_t count, std::span<const std::uint64_t> ranks, std::span<std::uint64_t> keys,
                          const std::vector<int>& of, Place place) {
    std::vector<std::uint32_t> pos;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (of[i] < 0) continue;
      pos.push_back(place(i));
      which.push_back(i);
    }
    std::vector<std::uint32_t> places = pos;
    std::sort(places.begin(), places.end());
    places.erase(std::unique(places.begin(), places.end()), places.end());
    if (places.size() <= static_cast<std::size_t>(kMaxRankSelect)) {
      RankArgs args;
      args.count = static_cast<std::uint32_t>(places.size());
      std::copy(places.begin(), places.end(), args.rank);
      TALLY_CUDA_TRY(KeyPasses<K>::SelectRanks(at_.candidates, count, args, at_.ranks, stream_));
      K found[kMaxRankSelect];
      std::uint32_t lost = 0;
      TALLY_CUDA_TRY(cudaMemcpyAsync(found, at_.ranks->key, sizeof(K) * places.size(), cudaMemcpyDeviceToHost,
                                     stream_));
      TALLY_CUDA_TRY(cudaMemcpyAsync(&lost, &at_.ranks->lost, sizeof lost, cudaMemcpyDeviceToHost, stream_));
      TALLY_CUDA_TRY(cudaStreamSynchronize(stream_));
      if (lost != 0) return TALLY_SELECT_INVALID("the rank selection lost a rank");
      for (std::size_t j = 0; j < which.size(); ++j) {
        keys[which[j]] = found[std::lower_bound(places.begin(), places.end(), pos[j]) - places.begin()];
      }
      return cudaSuccess;
    }
    K* sorted = nullptr;
    TALLY_CUDA_TRY(KeyPasses<K>::SortKeys(at_.sort_temp, at_.sort_bytes, at_.candidates, at_.candidates_alt, count,
                                          &sorted, stream_));
    TALLY_CUDA_TRY(cudaMemcpyAsync(at_.pos, pos.data(), sizeof(std::uint32_t) * pos.size(), cudaMemcpyHostToDevice,
                                   stream_));
    TALLY_CUDA_TRY(KeyPasses<K>::Pick(sorted, at_.pos, static_cast<std::uint32_t>(pos.size()), at_.picked, stream_));
    std::vector<K> picked(pos.size());
    TALLY_CUDA_TRY(cudaMemcpyAsync(picked.data(), at_.picked, sizeof(K) * picked.size(), cudaMemcpyDeviceToHost,
                                   stream_));
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream_));
    for (std::size_t j = 0; j < which.size(); ++j) keys[which[j]] = picked[j];
    return cudaSuccess;
  }

  const T* data_;
  std::uint64_t n_;
  KeyMode mode_;
  std::size_t max_ranks_;
  cudaStream_t stream_;
  SelectionLayout<K> at_;
  cudaError_t laid_out_ = cudaSuccess;
  bool counted_ = false;
  bool refined_ = false;  // a refining pass overwrote the counting pass's block rows
  std::uint64_t numbers_ = 0;  // non-NaN elements
  std::vector<Bin<K>> table_;
  std::vector<std::uint32_t> counts_;
  bool windowed_ = false;        // the window pass counted (and no counting pass since)
  Windows<K> windows_;           // its windows
  WindowCounts window_counts_;   // and its counts
};

}  // namespace

cudaError_t SelectionScratchBytes(const DeviceArray& array, std::size_t max_ranks, std::uint64_t room,
                                  std::size_t* bytes) {
  cudaError_t status = cudaSuccess;
  const bool known = VisitSelectable(array.dtype, [&](auto t) {
    using K = KeyOf<decltype(t)>;
    Carver c(nullptr);
    SelectionLayout<K> at;
    status = LayOut<K>(max_ranks, room, c, &at);
    *bytes = c.used();
  });
  if (!known) return TALLY_SELECT_INVALID("dtype not taken by the selection passes");
  return status;
}

std::unique_ptr<Selection> MakeSelection(const DeviceArray& array, KeyMode mode, std::size_t max_ranks,
                                         std::uint64_t room, void* scratch, cudaStream_t stream) {
  std::unique_ptr<Selection> out;
  VisitSelectable(array.dtype, [&](auto t) {
    out = std::make_unique<SelectionOf<decltype(t)>>(array, mode, max_ranks, room, scratch, stream);
  });
  return out;
}

namespace {

// Top-k's arrays in scratch: the sample and its guess's selection, the
// lists above and equal to the threshold (above's arrays have room for
// both, since equal ones are appended there to be ordered together), the
// k-th entry's selection and the sort's buffers, the
// tiles' tie counts, the answer's bits, and an exact selection's scratch
// for when the sample's guess misses.
template <typename K>
struct TopLayout {
  K* sample = nullptr;
  RankSelect<K>* guess = nullptr;  // the sample's key at the guess's rank
  K* threshold = nullptr;
  TopListsView<K> lists;
  // 32-bit keys: the answer's words (TopEntriesInOrder), then sorted.
  RankSelect<std::uint64_t>* kth = nullptr;
  std::uint64_t* words = nullptr;
  std::uint64_t* words_alt = nullptr;
  // 64-bit keys: the (key, index) pairs sorted (SortTop).
  K* keys_alt = nullptr;
  std::uint32_t* index_alt = nullptr;
  void* sort_temp = nullptr;
  std::size_t sort_bytes = 0;
  std::uint64_t* bits = nullptr;
  std::uint64_t* index = nullptr;  // the answer's indices, widened
  void* selection = nullptr;
  std::uint64_t tiles = 0;
  std::uint64_t tile = 0;
  int grid = 0;
};

template <typename T>
cudaError_t LayOutTop(const DeviceArray& a, std::uint32_t k, Carver& c, TopLayout<KeyOf<T>>* at) {
  using K = KeyOf<T>;
  int sms = 0;
  TALLY_CUDA_TRY(Sms(&sms));
  at->grid = sms * P::kBlocksPerSm;
  const auto room = static_cast<std::uint32_t>(P::TopCandidates(a.length, k));
  const auto want = static_cast<std::uint32_t>(std::min<std::uint64_t>(k, a.length));
  if constexpr (sizeof(K) == 4) {
    TALLY_CUDA_TRY(TopEntriesSortBytes(static_cast<std::uint32_t>(P::TopWordsRoom(want)), &at->sort_bytes));
  } else {
    TALLY_CUDA_TRY(KeyPasses<K>::SortPairsBytes(2 * room, &at->sort_bytes));
  }
  at->tile = P::TopTile(sizeof(T));
  at->tiles = (a.length + at->tile - 1) / at->tile;
  at->sample = c.Take<K>(P::kSample);
  at->guess = c.Take<RankSelect<K>>(1);
  at->threshold = c.Take<K>(1);
  at->lists.above_keys = c.Take<K>(2 * std::size_t{room});
  at->lists.above_index = c.Take<std::uint32_t>(2 * std::size_t{room});
  at->lists.above_room = room;
  at->lists.equal_keys = c.Take<K>(room);
  at->lists.equal_index = c.Take<std::uint32_t>(room);
  at->lists.equal_room = room;
  at->lists.counts = c.Take<std::uint32_t>(3);
  at->lists.tile_equal = c.Take<std::uint32_t>(at->tiles);
  if constexpr (sizeof(K) == 4) {
    at->kth = c.Take<RankSelect<std::uint64_t>>(1);
    at->words = c.Take<std::uint64_t>(P::TopWordsRoom(want));
    at->words_alt = c.Take<std::uint64_t>(P::TopWordsRoom(want));
  } else {
    at->keys_alt = c.Take<K>(2 * std::size_t{room});
    at->index_alt = c.Take<std::uint32_t>(2 * std::size_t{room});
  }
  at->sort_temp = c.Take<std::byte>(at->sort_bytes);
  at->bits = c.Take<std::uint64_t>(k);
  at->index = c.Take<std::uint64_t>(k);
  std::size_t selection = 0;
  TALLY_CUDA_TRY(SelectionScratchBytes(a, 1, P::OneRankCandidates(a.length), &selection));
  at->selection = c.Take<std::byte>(selection);
  return cudaSuccess;
}

// Top-k (select.h): the sample's guess at the k-th key, one pass gathering
// the elements above it and equal to it, then, as the counts say:
//   - at least k above (and room for them): the answer is among them;
//   - fewer than k above, at least k with the equal ones: the guess is the
//     k-th key itself; the equal ones all (if they fit) or the first by
//     index (the tiles' counts say how far to read for them);
//   - else the guess missed: an exact selection of the k-th key, and the
//     gathering pass again with it.
// Then the first k of the gathered pairs (key descending, index ascending)
// in that order with their elements' bytes: for 32-bit keys a rank
// selection of the k-th (key, index) word and a sort of the k taken
// (TopEntriesInOrder), for 64-bit keys a sort of all the pairs (SortTop).
// The entries stay in scratch (*bits_out and *index_out), written on the
// stream; *count_out how many.
template <typename T>
cudaError_t TopKOf(const DeviceArray& a, std::uint32_t k, bool largest, void* scratch, cudaStream_t stream,
                   const std::uint64_t** bits_out, const std::uint64_t** index_out, std::uint64_t* count_out,
                   PassStats* stats) {
  using K = KeyOf<T>;
  const T* data = static_cast<const T*>(a.data);
  const std::uint64_t n = a.length;
  const KeyMode mode = largest ? KeyMode::kNanHigh : KeyMode::kFlipped;
  Carver c(scratch);
  TopLayout<K> at;
  TALLY_CUDA_TRY(LayOutTop<T>(a, k, c, &at));
  const std::uint64_t want = std::min<std::uint64_t>(k, n);
  *count_out = 0;
  *bits_out = nullptr;
  *index_out = nullptr;
  if (want == 0) return cudaSuccess;

  // The guess: the sample's key of rank j from the top (exact when the
  // sample is the whole array), by a rank selection over the sample.
  const auto s = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, P::kSample));
  TALLY_CUDA_TRY(ElementPasses<T>::Sample(data, n, mode, at.sample, s, nullptr, stream));
  std::uint64_t j = want;
  if (n > P::kSample) {
    const double x = static_cast<double>(k) * s / static_cast<double>(n);
    j = std::min<std::uint64_t>(s, static_cast<std::uint64_t>(std::ceil(P::kGuessMargin * x +
                                                                        P::kGuessSigmas * std::sqrt(x) +
                                                                        P::kGuessExtra)));
  }
  RankArgs guess;
  guess.count = 1;
  guess.rank[0] = s - j;
  TALLY_CUDA_TRY(KeyPasses<K>::SelectRanks(at.sample, s, guess, at.guess, stream));
  const K* threshold = &at.guess->key[0];

  std::uint32_t counts[2] = {0, 0};
  const auto gather = [&](const K* t) -> cudaError_t {
    TALLY_CUDA_TRY(cudaMemsetAsync(at.lists.counts, 0, 3 * sizeof(std::uint32_t), stream));
    TALLY_CUDA_TRY(cudaMemsetAsync(at.lists.tile_equal, 0, sizeof(std::uint32_t) * at.tiles, stream));
    TALLY_CUDA_TRY(ElementPasses<T>::TopGather(data, n, mode, t, at.lists, at.grid, stream));
    TALLY_CUDA_TRY(cudaMemcpyAsync(counts, at.lists.counts, sizeof counts, cudaMemcpyDeviceToHost, stream));
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
    if (stats) ++stats->full_passes;
    return cudaSuccess;
  };
  TALLY_CUDA_TRY(gather(threshold));
  std::uint64_t above = counts[0], equal = counts[1];
  const bool enough_above = above >= want && above <= at.lists.above_room;
  const bool at_threshold = above < want && above + equal >= want;
  if (!enough_above && !at_threshold) {
    // The guess missed: the exact k-th key (rank n - k from the bottom).
    std::unique_ptr<Selection> exact =
        MakeSelection(a, mode, 1, P::OneRankCandidates(a.length), at.selection, stream);
    std::uint64_t nan = 0, key = 0;
    const std::uint64_t rank = n - want;
    TALLY_CUDA_TRY(exact->Count(&nan, {}));
    TALLY_CUDA_TRY(exact->SelectKeys({&rank, 1}, {&key, 1}));
    if (stats) {
      stats->full_passes += exact->stats.full_passes;
      stats->fell_back = true;
    }
    const K t = static_cast<K>(key);
    TALLY_CUDA_TRY(cudaMemcpyAsync(at.threshold, &t, sizeof t, cudaMemcpyHostToDevice, stream));
    threshold = at.threshold;
    TALLY_CUDA_TRY(gather(threshold));
    above = counts[0];
    equal = counts[1];
    if (!(above < want && above + equal >= want)) return TALLY_SELECT_INVALID("top-k: the exact threshold disagrees");
  }
  std::uint64_t held = above;
  if (above < want) {
    if (equal > at.lists.equal_room) {
      // Too many ties to gather: the tiles that hold the first `need` of
      // them by index, read again.
      const std::uint64_t need = want - above;
      std::vector<std::uint32_t> tile_equal(at.tiles);
      TALLY_CUDA_TRY(cudaMemcpyAsync(tile_equal.data(), at.lists.tile_equal, sizeof(std::uint32_t) * at.tiles,
                                     cudaMemcpyDeviceToHost, stream));
      TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
      std::uint64_t sum = 0, tiles = 0;
      while (tiles < at.tiles && sum < need) sum += tile_equal[tiles++];
      TALLY_CUDA_TRY(cudaMemsetAsync(at.lists.counts + 1, 0, sizeof(std::uint32_t), stream));
      TALLY_CUDA_TRY(ElementPasses<T>::TopTies(data, std::min(n, tiles * at.tile), mode, threshold, at.lists, at.grid,
                                               stream));
      TALLY_CUDA_TRY(cudaMemcpyAsync(counts, at.lists.counts, sizeof counts, cudaMemcpyDeviceToHost, stream));
      TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
      equal = counts[1];
      if (equal < need || equal > at.lists.equal_room) return TALLY_SELECT_INVALID("top-k: the ties' tiles disagree");
    }
    TALLY_CUDA_TRY(cudaMemcpyAsync(at.lists.above_keys + above, at.lists.equal_keys, sizeof(K) * equal,
                                   cudaMemcpyDeviceToDevice, stream));
    TALLY_CUDA_TRY(cudaMemcpyAsync(at.lists.above_index + above, at.lists.equal_index, sizeof(std::uint32_t) * equal,
                                   cudaMemcpyDeviceToDevice, stream));
    held += equal;
  }
  const auto out = static_cast<std::uint32_t>(want);
  if constexpr (sizeof(K) == 4) {
    // The k largest of the held entries: all of them sorted, or a rank
    // selection of the k-th and only those k sorted.
    std::uint64_t* words = nullptr;
    TALLY_CUDA_TRY(TopEntriesInOrder(at.lists.above_keys, at.lists.above_index, static_cast<std::uint32_t>(held), out,
                                     at.kth, at.lists.counts + 2, at.words, at.words_alt, at.sort_temp,
                                     at.sort_bytes, &words, stream));
    TALLY_CUDA_TRY(ElementPasses<T>::WordBits(data, words, out, at.bits, at.index, stream));
  } else {
    K* keys = nullptr;
    std::uint32_t* index = nullptr;
    TALLY_CUDA_TRY(KeyPasses<K>::SortTop(at.sort_temp, at.sort_bytes, at.lists.above_keys, at.keys_alt,
                                         at.lists.above_index, at.index_alt, static_cast<std::uint32_t>(held), &keys,
                                         &index, stream));
    TALLY_CUDA_TRY(ElementPasses<T>::ElementBits(data, index, out, at.bits, at.index, stream));
  }
  *bits_out = at.bits;
  *index_out = at.index;
  *count_out = out;
  return cudaSuccess;
}

}  // namespace
}  // namespace select

bool SelectSupports(rules::DType dtype) {
  return select::VisitSelectable(dtype, [](auto) {});
}

cudaError_t CheckSelectable(const DeviceArray& array) {
  if (!SelectSupports(array.dtype)) return TALLY_SELECT_INVALID("dtype not taken by the selection passes");
  if (array.length >= (std::uint64_t{1} << 32)) return TALLY_SELECT_INVALID("length must be below 2^32");
  if (reinterpret_cast<std::uintptr_t>(array.data) % rules::SizeOf(array.dtype) != 0) {
    return TALLY_SELECT_INVALID("data is not aligned to its element");
  }
  return cudaSuccess;
}

cudaError_t OrderStatistics::ScratchBytes(const DeviceArray& array, std::size_t max_ranks, std::size_t* bytes) {
  if (max_ranks == 0 || max_ranks > select::kMaxRanks) return TALLY_SELECT_INVALID("max_ranks must be 1 to 4096");
  return select::SelectionScratchBytes(array, max_ranks, select::SelectPolicy::Candidates(array.length), bytes);
}

OrderStatistics::OrderStatistics(const DeviceArray& array, std::size_t max_ranks, void* scratch,
                                 std::size_t scratch_bytes, cudaStream_t stream) {
  std::size_t need = 0;
  if (CheckSelectable(array) == cudaSuccess && ScratchBytes(array, max_ranks, &need) == cudaSuccess &&
      scratch_bytes >= need) {
    selection_ = select::MakeSelection(array, select::KeyMode::kNumbers, max_ranks,
                                       select::SelectPolicy::Candidates(array.length), scratch, stream);
  }
}

OrderStatistics::~OrderStatistics() = default;

cudaError_t OrderStatistics::Count(std::uint64_t* nan, std::span<const double> hints) {
  if (!selection_) return TALLY_SELECT_INVALID("OrderStatistics: unsupported array or too little scratch");
  return selection_->Count(nan, hints);
}

cudaError_t OrderStatistics::Select(std::span<const std::uint64_t> ranks, std::span<std::uint64_t> bits) {
  if (!selection_) return TALLY_SELECT_INVALID("OrderStatistics: unsupported array or too little scratch");
  if (bits.size() < ranks.size()) return TALLY_SELECT_INVALID("bits has fewer entries than ranks");
  TALLY_CUDA_TRY(selection_->SelectKeys(ranks, bits));
  for (std::size_t i = 0; i < ranks.size(); ++i) bits[i] = selection_->NumberBitsOf(bits[i]);
  return cudaSuccess;
}

const PassStats& OrderStatistics::stats() const {
  static const PassStats kNone;
  return selection_ ? selection_->stats : kNone;
}

cudaError_t TopKScratchBytes(const DeviceArray& array, std::uint32_t k, std::size_t* bytes) {
  if (k == 0) return TALLY_SELECT_INVALID("k must be at least 1");
  cudaError_t status = cudaSuccess;
  const bool known = select::VisitSelectable(array.dtype, [&](auto t) {
    select::Carver c(nullptr);
    select::TopLayout<select::KeyOf<decltype(t)>> at;
    status = select::LayOutTop<decltype(t)>(array, k, c, &at);
    *bytes = c.used();
  });
  if (!known) return TALLY_SELECT_INVALID("dtype not taken by the selection passes");
  return status;
}

cudaError_t TopKOnDevice(const DeviceArray& array, std::uint32_t k, bool largest, void* scratch,
                         std::size_t scratch_bytes, cudaStream_t stream, const std::uint64_t** bits,
                         const std::uint64_t** index, std::uint64_t* count, PassStats* stats) {
  TALLY_CUDA_TRY(CheckSelectable(array));
  std::size_t need = 0;
  TALLY_CUDA_TRY(TopKScratchBytes(array, k, &need));
  if (scratch_bytes < need) return TALLY_SELECT_INVALID("TopK: too little scratch");
  cudaError_t status = cudaSuccess;
  select::VisitSelectable(array.dtype, [&](auto t) {
    status = select::TopKOf<decltype(t)>(array, k, largest, scratch, stream, bits, index, count, stats);
  });
  return status;
}

cudaError_t TopK(const DeviceArray& array, std::uint32_t k, bool largest, void* scratch, std::size_t scratch_bytes,
                 cudaStream_t stream, std::uint64_t* bits, std::uint64_t* index, std::uint64_t* count,
                 PassStats* stats) {
  const std::uint64_t* d_bits = nullptr;
  const std::uint64_t* d_index = nullptr;
  std::uint64_t n = 0;
  *count = 0;
  TALLY_CUDA_TRY(TopKOnDevice(array, k, largest, scratch, scratch_bytes, stream, &d_bits, &d_index, &n, stats));
  if (n > 0) {
    TALLY_CUDA_TRY(cudaMemcpyAsync(bits, d_bits, sizeof(std::uint64_t) * n, cudaMemcpyDeviceToHost, stream));
    TALLY_CUDA_TRY(cudaMemcpyAsync(index, d_index, sizeof(std::uint64_t) * n, cudaMemcpyDeviceToHost, stream));
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  }
  *count = n;
  return cudaSuccess;
}

}  // namespace tally::kernels
