// The state of topk and bottomk: at most k (value, index) entries, the
// best of the elements seen. The order is numpy's sort order (NaN after
// every number, -0.0 equal to 0.0) with ties to the smaller index: topk
// takes from its end (NaN first), bottomk from its start. The entries a
// state keeps depend only on the elements it has seen, so chunks, shards
// and merges give the same state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "tally/rules/agg/quantile_state.h"
#include "tally/rules/agg/function.h"
#include "tally/rules/agg/state.h"
#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::rules::agg {

namespace topk_detail {

using quantile_detail::Stored;

template <typename S>
struct Entry {
  S value;
  std::int64_t index;
};

template <typename S>
bool IsNan(S v) {
  if constexpr (std::is_floating_point_v<S>) return v != v;
  return false;
}

// Whether a comes before b in the answer: topk (largest) puts NaN first,
// then larger values; bottomk smaller values first, NaN last; equal values
// (and NaN with NaN) by the smaller index.
template <typename S>
bool Before(bool largest, const Entry<S>& a, const Entry<S>& b) {
  const bool an = IsNan(a.value), bn = IsNan(b.value);
  if (an != bn) return largest ? an : bn;
  if (!an && a.value != b.value) return largest ? a.value > b.value : a.value < b.value;
  return a.index < b.index;
}

template <typename T>
class TopKState final : public State {
 public:
  using S = Stored<T>;

  TopKState(const OpSpec& op, DType dtype, const Function& f)
      : op_(op), dtype_(dtype), wire_(f.wire), name_(f.name), largest_(op.kind == OpKind::kTopK) {}

  std::uint64_t bytes() const override { return sizeof(*this) + entries_.capacity() * sizeof(Entry<S>); }

  void Update(const Elements& e) override {
    // Room for what may come before the next compaction, at once: a
    // group's state sees one segment of a few rows, whose pushes would
    // otherwise grow the vector several times.
    if (!full_) entries_.reserve(std::min<std::uint64_t>(Bound(), entries_.size() + e.count));
    for (std::uint64_t i = 0; i < e.count; ++i) {
      if (!e.Valid(i)) continue;
      const Entry<S> x{static_cast<S>(e.At<T>(i)), static_cast<std::int64_t>(op_.base_index + e.first + i)};
      // Once k entries are kept, an element that does not beat the worst
      // of them cannot enter: most elements stop here.
      if (full_ && !Before(largest_, x, worst_)) continue;
      entries_.push_back(x);
      if (entries_.size() >= Bound()) Compact();
    }
  }

  void Combine(const State& later) override {
    const auto& o = static_cast<const TopKState&>(later);
    entries_.insert(entries_.end(), o.entries_.begin(), o.entries_.end());
    if (entries_.size() >= Bound()) Compact();
  }

  std::optional<std::string> Finalize(RowAnswer& out) override {
    Sort();
    for (const Entry<S>& x : entries_) {
      if constexpr (kFloatElement<T>) {
        out.doubles.push_back(static_cast<double>(x.value));
      } else if constexpr (std::is_signed_v<T>) {
        out.int64s.push_back(static_cast<std::int64_t>(x.value));
      } else {
        out.uint64s.push_back(static_cast<std::uint64_t>(x.value));
      }
      out.indices.push_back(x.index);
    }
    return std::nullopt;
  }

  void Serialize(std::string& out) override {
    Sort();
    Writer w(out);
    PutHeader(w, wire_, dtype_, op_);
    w.Put(static_cast<std::uint64_t>(entries_.size()));
    for (const Entry<S>& x : entries_) {
      w.Put(x.value);
      w.Put(x.index);
    }
  }

  std::optional<std::string> Deserialize(std::string_view bytes) override {
    Reader r(bytes);
    if (auto bad = CheckHeader(r, wire_, name_, dtype_, op_)) return bad;
    std::uint64_t count = 0;
    constexpr std::size_t kEntryBytes = sizeof(S) + sizeof(std::int64_t);
    if (!r.Get(count) || count > op_.k || r.left() != count * kEntryBytes) return Truncated(name_);
    full_ = false;
    entries_.resize(count);
    for (Entry<S>& x : entries_) {
      r.Get(x.value);
      r.Get(x.index);
    }
    return std::nullopt;
  }

 private:
  // Entries are gathered up to twice k (at least 64) before the worst are
  // dropped, so an update costs O(1) amortised; after the first drop most
  // elements stop at one comparison with the worst kept. (A floor of 1024
  // made a group's state of a few hundred rows keep every row and select
  // among them at the end: h2o's q8, 1e7 rows in 100,000 groups, k = 2.)
  std::size_t Bound() const { return std::max<std::size_t>(2 * std::size_t{op_.k}, 64); }
  void Compact() {
    if (entries_.size() < op_.k) return;
    const auto before = [&](const Entry<S>& a, const Entry<S>& b) { return Before(largest_, a, b); };
    if (entries_.size() > op_.k) {
      std::nth_element(entries_.begin(), entries_.begin() + op_.k, entries_.end(), before);
      entries_.resize(op_.k);
    }
    worst_ = *std::max_element(entries_.begin(), entries_.end(), before);
    full_ = true;
  }
  void Sort() {
    Compact();
    std::sort(entries_.begin(), entries_.end(),
              [&](const Entry<S>& a, const Entry<S>& b) { return Before(largest_, a, b); });
  }

  OpSpec op_;
  DType dtype_;
  int wire_;
  std::string_view name_;
  bool largest_;
  std::vector<Entry<S>> entries_;
  bool full_ = false;  // k entries were kept at the last compaction; worst_ is the last of them
  Entry<S> worst_{};
};

}  // namespace topk_detail

}  // namespace tally::rules::agg
