// Group-by's partitioned pass on the host, for integer keys spread wider
// than the direct pass's slots: the rows are first moved into buckets of
// 2^kBucketBits consecutive keys (a counting pass, then one write of each
// row's key offset and value), and each bucket is then accumulated into
// its own run of slots, which stays in the core's cache while it fills.
// Slots updated straight from the table's order land on a random line of
// a table of tens of MiB (1M keys, in a standalone loop on one core of
// this 2-core VM: 14.6 ns a row, against 4.0 for the two steps;
// docs/performance.md, "Group-by").
//
// The arithmetic is the direct pass's (keyed_slots.h), so the sums are
// integer ones whatever the rows' order, and its answers are the general
// path's bits: it takes only columns whose every finite value is exact on
// the fixed-point grid (ExactOnGrid, from the range pass: then the one
// rounding of a total is the exact sum's), and it keeps the zeros' signs
// as the general path does (WriteGroups<true>), but for a key whose
// extreme is a zero and which holds zeros of both signs: there it does
// not answer.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "server/engine/cpu/thread_pool.h"
#include "server/engine/grouping/keyed_slots.h"
#include "server/engine/huge_pages.h"

namespace tally::grouping::keyed_host {

struct PartitionPolicy {
  // Keys per bucket: 4,096 slots of 32 bytes (float32 values), 128 KiB,
  // inside a core's L2. 4M rows over 1M keys, float32, two threads, best
  // of 7 on this 2-core VM (moving the rows / accumulating them, ms):
  // 2^11 5.5 / 8.6, 2^12 5.9 / 8.4, 2^13 12.5 / 11.2, 2^14 9.9 / 14.9,
  // 2^15 15.6 / 16.5, 2^16 11.0 / 31.1.
  static constexpr int kBucketBits = 12;
  // Rows one task accumulates at most: a bucket with more (skewed keys:
  // Zipf(1.1) puts three quarters of the rows in the first 4,096 keys of
  // 1M) is split between tasks whose slots are added up after. 4M rows
  // make at least 16 tasks, so two threads share even a skewed column.
  static constexpr std::uint64_t kRowsPerTask = std::uint64_t{1} << 18;
  // Most bytes a row the pass holds (the rows moved, and the slots of the
  // key range): what admission counts for a one-key group-by
  // (GroupByWorkingBytes, server/frontend/group_by_call.cc), which the
  // general path stays within. float32 values: key ranges up to 3/8 of the
  // rows; float64: 1/16.
  static constexpr std::uint64_t kMostBytesPerRow = 20;
};

// A row in its bucket: its key's offset within the bucket, and its value.
template <typename V>
struct BucketRow {
  std::uint32_t key;
  V value;
};

// Room for n T's, made by no constructor, whole huge pages advised before
// their first touch where it spans several. The slots are made by the
// tasks that fill them, on their cores (made here, on one thread, 32 MiB
// of slots for 1M keys took a tenth of the request, perf). Aligned to a
// huge page: a buffer this large is mapped afresh for each request, and
// the 4 KiB pages at the edges of an unaligned one cost most of its first
// touch on this VM (32 MiB: 8.9 ms unaligned, 2.7 ms aligned; 4 KiB pages
// throughout: 100 ms).
template <typename T>
class Room {
 public:
  explicit Room(std::uint64_t n)
      : align_(n * sizeof(T) >= 2 * kHugePageBytes ? kHugePageBytes : 64),
        bytes_((n * sizeof(T) + align_ - 1) / align_ * align_),
        p_(::operator new(std::max<std::size_t>(bytes_, 1), std::align_val_t{align_})) {
    if (align_ == kHugePageBytes) AdviseHugePages(p_, bytes_);
  }
  ~Room() { ::operator delete(p_, std::align_val_t{align_}); }
  Room(const Room&) = delete;
  Room& operator=(const Room&) = delete;
  T* get() const { return static_cast<T*>(p_); }

 private:
  static_assert(alignof(T) <= 64);
  std::size_t align_, bytes_;
  void* p_;
};

// Whether the pass over `rows` rows of V's keyed over `range` keys holds
// at most PartitionPolicy::kMostBytesPerRow a row.
template <typename V>
bool PartitionsFit(std::uint64_t range, std::uint64_t rows) {
  constexpr std::uint64_t kBucketKeys = std::uint64_t{1} << PartitionPolicy::kBucketBits;
  const std::uint64_t slots = (range + kBucketKeys - 1) / kBucketKeys * kBucketKeys;
  return rows * sizeof(BucketRow<V>) + slots * sizeof(Slot<V>) <= rows * PartitionPolicy::kMostBytesPerRow;
}

template <typename K, typename V>
std::optional<KeyedSums> SumByPartitions(const K* keys, const V* values, std::uint64_t rows, const Extremes& all,
                                         int scale, bool signed_key, cpu::ThreadPool* workers) {
  constexpr int kBits = PartitionPolicy::kBucketBits;
  constexpr std::uint64_t kBucketKeys = std::uint64_t{1} << kBits;
  const std::uint64_t base = all.lo, range = all.hi - all.lo + 1;
  const std::uint64_t buckets = (range + kBucketKeys - 1) >> kBits;
  const keyed::FixedUnit unit = keyed::FixedUnit::Of(scale);

  // Rows per (part, bucket), then where each part's rows of each bucket go:
  // bucket after bucket, each bucket's rows part after part. In the same
  // read, the lowest bit set in any value: values that round on the grid
  // (float64's of many binades) take the general path without the pass.
  // (In the range pass, which the direct pass shares, it cost 10% at 16
  // keys.)
  const std::size_t parts = cpu::RowParts(workers, rows, kRowsPerPart);
  std::vector<std::uint64_t> at(parts * buckets, 0);
  std::vector<int> lowest(parts);
  cpu::ForRowParts(workers, rows, parts, [&](std::size_t p, int, std::uint64_t b, std::uint64_t e) {
    std::uint64_t* const count = at.data() + p * buckets;
    for (std::uint64_t i = b; i < e; ++i) ++count[(Ordered(keys[i]) - base) >> kBits];
    lowest[p] = LowestBit(values, b, e);
  });
  if (!ExactOnGrid(*std::min_element(lowest.begin(), lowest.end()), scale)) return std::nullopt;
  std::vector<std::uint64_t> start(buckets + 1, 0);
  for (std::uint64_t k = 0, sum = 0; k < buckets; ++k) {
    start[k] = sum;
    for (std::size_t p = 0; p < parts; ++p) {
      const std::uint64_t n = at[p * buckets + k];
      at[p * buckets + k] = sum;
      sum += n;
    }
  }
  start[buckets] = rows;
  const Room<BucketRow<V>> moved(rows);
  cpu::ForRowParts(workers, rows, parts, [&](std::size_t p, int, std::uint64_t b, std::uint64_t e) {
    std::uint64_t* const next = at.data() + p * buckets;
    BucketRow<V>* const to = moved.get();
    for (std::uint64_t i = b; i < e; ++i) {
      const std::uint64_t o = Ordered(keys[i]) - base;
      to[next[o >> kBits]++] = BucketRow<V>{static_cast<std::uint32_t>(o & (kBucketKeys - 1)), values[i]};
    }
  });

  // Tasks: each bucket's rows in runs of at most kRowsPerTask. A bucket's
  // first run fills its slots of the table; the others fill slots of their
  // own, added to the table's after.
  struct Task {
    std::uint64_t bucket, begin, end;
    std::size_t scratch;  // 0: the table's slots; else 1 + its own
  };
  std::vector<Task> tasks;
  std::size_t scratches = 0;
  for (std::uint64_t k = 0; k < buckets; ++k) {
    for (std::uint64_t b = start[k], first = 1; b < start[k + 1] || first != 0; b += PartitionPolicy::kRowsPerTask) {
      const std::uint64_t e = std::min(start[k + 1], b + PartitionPolicy::kRowsPerTask);
      tasks.push_back(Task{k, b, e, first != 0 ? 0 : ++scratches});
      first = 0;
    }
  }
  const Room<Slot<V>> slots(buckets * kBucketKeys);
  const bool marked = all.infinity || all.zero;
  std::vector<std::uint8_t> marks(marked ? buckets * kBucketKeys : 0, 0);
  std::vector<std::vector<Slot<V>>> scratch(scratches);
  std::vector<std::vector<std::uint8_t>> scratch_marks(scratches);
  const auto run = [&](std::size_t t) {
    const Task& task = tasks[t];
    Table<V> table;
    if (task.scratch == 0) {
      table.slots = slots.get() + task.bucket * kBucketKeys;
      std::uninitialized_value_construct_n(table.slots, kBucketKeys);
      if (marked) table.marks = marks.data() + task.bucket * kBucketKeys;
    } else {
      scratch[task.scratch - 1].resize(kBucketKeys);
      table.slots = scratch[task.scratch - 1].data();
      if (marked) {
        scratch_marks[task.scratch - 1].assign(kBucketKeys, 0);
        table.marks = scratch_marks[task.scratch - 1].data();
      }
    }
    const BucketRow<V>* const from = moved.get();
    Accumulate<true>([&](std::uint64_t i) { return KeyedValue<V>{from[i].key, from[i].value}; }, task.begin, task.end,
                     unit, table);
  };
  if (workers != nullptr) {
    workers->ParallelFor(tasks.size(), [&](std::size_t t, int) { run(t); });
  } else {
    for (std::size_t t = 0; t < tasks.size(); ++t) run(t);
  }
  for (const Task& task : tasks) {
    if (task.scratch == 0) continue;
    const std::size_t i = task.scratch - 1;
    const Table<V> into{slots.get() + task.bucket * kBucketKeys,
                        marked ? marks.data() + task.bucket * kBucketKeys : nullptr};
    into.Add(Table<V>{scratch[i].data(), marked ? scratch_marks[i].data() : nullptr}, kBucketKeys);
  }
  // The answers, each bucket's written by the thread that takes it (from
  // one thread, 1M keys' answers were a tenth of the request, perf), after
  // the buckets' groups are counted. The vectors have room for a group per
  // key or row, as many as there can be: the allocator maps a buffer that
  // large afresh and it is advised for huge pages, where one of the
  // groups' size, when below 7 MiB and not one the request's thread freed
  // before, faulted in 4 KiB pages (Zipf(1.1), 352,012 groups of 1M keys:
  // 35-68 ms a request against 76-100, the same bench alternately).
  const auto for_buckets = [&](const std::function<void(std::uint64_t)>& fn) {
    if (workers != nullptr) {
      workers->ParallelFor(buckets, [&](std::size_t k, int) { fn(k); });
    } else {
      for (std::uint64_t k = 0; k < buckets; ++k) fn(k);
    }
  };
  const auto slice = [&](std::uint64_t k) {
    return Table<V>{slots.get() + k * kBucketKeys, marked ? marks.data() + k * kBucketKeys : nullptr};
  };
  const auto keys_in = [&](std::uint64_t k) { return std::min(kBucketKeys, range - k * kBucketKeys); };
  std::vector<std::uint64_t> first_group(buckets + 1, 0);
  for_buckets([&](std::uint64_t k) { first_group[k + 1] = GroupsIn(slice(k), keys_in(k)); });
  for (std::uint64_t k = 0; k < buckets; ++k) first_group[k + 1] += first_group[k];
  KeyedSums out;
  SizeGroups(first_group[buckets], std::min(range, rows), sizeof(K), all, out);
  std::vector<std::uint8_t> answered(buckets, 0);
  for_buckets([&](std::uint64_t k) {
    answered[k] =
        WriteGroups<true, K>(slice(k), keys_in(k), base + k * kBucketKeys, signed_key, scale, first_group[k], out);
  });
  if (std::find(answered.begin(), answered.end(), 0) != answered.end()) return std::nullopt;
  // A sum below float64's normal range was rounded twice (FixedSum scales
  // its one rounding to 53 bits), where the general path rounds it once.
  if (std::any_of(out.sum.begin(), out.sum.end(), [](double s) { return s != 0 && std::fabs(s) < DBL_MIN; })) {
    return std::nullopt;
  }
  return out;
}

}  // namespace tally::grouping::keyed_host
