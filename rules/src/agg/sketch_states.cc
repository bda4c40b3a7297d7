// hll, ddsketch, count_distinct and mode's states, compiled once.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "tally/rules/agg/ddsketch_state.h"
#include "tally/rules/agg/distinct_state.h"
#include "tally/rules/agg/hll_state.h"
#include "tally/rules/agg/make_state.h"
#include "tally/rules/agg/sketches.h"

namespace tally::rules::agg {

std::unique_ptr<State> MakeHllState(const OpSpec& op, DType dtype) {
  return MakeStateOf<hll_detail::HllState>(op, dtype);
}

std::unique_ptr<State> MakeDdSketchState(const OpSpec& op, DType dtype) {
  return MakeStateOf<ddsketch_detail::DdSketchState>(op, dtype);
}

std::unique_ptr<State> MakeCountDistinctState(const OpSpec& op, DType dtype) {
  return MakeStateOf<distinct_detail::DistinctState>(op, dtype);
}

namespace {

// mode's state: each distinct value with how often it came, by a key that
// sorts as the values do (floats widened to float64, -0.0 as 0.0; NaN is
// counted apart), so the smallest of the most frequent values is the first
// of them in key order. Values are appended and folded into the sorted
// counts when the pending ones outnumber them (at least 1024): O(log n) a
// value amortised, memory within twice the distinct values plus a block.
// Holistic, as count_distinct.
template <typename T>
class ModeState final : public State {
 public:
  ModeState(const OpSpec& op, DType dtype, const Function& f) : op_(op), dtype_(dtype), wire_(f.wire), name_(f.name) {}

  std::uint64_t bytes() const override {
    return sizeof(*this) + pending_.capacity() * sizeof(std::uint64_t) + counts_.capacity() * sizeof(Count);
  }

  void Update(const Elements& e) override {
    for (std::uint64_t i = 0; i < e.count; ++i) {
      if (!e.Valid(i)) continue;
      const T v = e.At<T>(i);
      if constexpr (kFloatElement<T>) {
        const double d = Widen(v);
        if (d != d) {
          ++nans_;
          continue;
        }
      }
      pending_.push_back(KeyOf(v));
      if (pending_.size() >= std::max<std::size_t>(counts_.size(), 1024)) Fold();
    }
  }

  void Combine(const State& later) override {
    const auto& o = static_cast<const ModeState&>(later);
    pending_.insert(pending_.end(), o.pending_.begin(), o.pending_.end());
    Fold();
    MergeCounts(o.counts_);
    nans_ += o.nans_;
  }

  std::optional<std::string> Finalize(RowAnswer& out) override {
    Fold();
    if (counts_.empty() && nans_ == 0) {
      return std::string("mode of no elements has no value (pandas answers an empty Series).");
    }
    if (counts_.empty()) {  // only NaN: pandas' mode(dropna=True) has none; NaN stands for it
      out.doubles.push_back(std::numeric_limits<double>::quiet_NaN());
      return std::nullopt;
    }
    const Count* best = &counts_.front();
    for (const Count& c : counts_) {
      if (c.n > best->n) best = &c;  // the first of equals: the smallest value
    }
    Put(best->key, out);
    return std::nullopt;
  }

  void Serialize(std::string& out) override {
    Fold();
    Writer w(out);
    PutHeader(w, wire_, dtype_, op_);
    w.Put(nans_);
    w.Put(static_cast<std::uint64_t>(counts_.size()));
    for (const Count& c : counts_) {
      w.Put(c.key);
      w.Put(c.n);
    }
  }

  std::optional<std::string> Deserialize(std::string_view bytes) override {
    Reader r(bytes);
    if (auto bad = CheckHeader(r, wire_, name_, dtype_, op_)) return bad;
    std::uint64_t n = 0;
    if (!r.Get(nans_) || !r.Get(n) || r.left() != n * 2 * sizeof(std::uint64_t)) return Truncated(name_);
    counts_.resize(n);
    pending_.clear();
    for (Count& c : counts_) {
      r.Get(c.key);
      r.Get(c.n);
    }
    // Serialize writes keys ascending and distinct with counts of at least
    // one; anything else was not written by it.
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i].n == 0 || (i > 0 && counts_[i - 1].key >= counts_[i].key)) {
        counts_.clear();
        return Truncated(name_);
      }
    }
    return std::nullopt;
  }

 private:
  struct Count {
    std::uint64_t key;
    std::uint64_t n;
  };
  static constexpr std::uint64_t kTop = std::uint64_t{1} << 63;

  // A key whose unsigned order is the values' order.
  static std::uint64_t KeyOf(T v) {
    if constexpr (kFloatElement<T>) {
      const std::uint64_t bits = CanonicalBits(v);
      return (bits & kTop) != 0 ? ~bits : bits | kTop;
    } else if constexpr (std::is_signed_v<T>) {
      return static_cast<std::uint64_t>(static_cast<std::int64_t>(v)) ^ kTop;
    } else {
      return static_cast<std::uint64_t>(v);
    }
  }
  // The value of `key`, in the result type of the dtype (ResultRule::kLikeInput).
  static void Put(std::uint64_t key, RowAnswer& out) {
    if constexpr (kFloatElement<T>) {
      out.doubles.push_back(std::bit_cast<double>((key & kTop) != 0 ? key & ~kTop : ~key));
    } else if constexpr (std::is_signed_v<T>) {
      out.int64s.push_back(static_cast<std::int64_t>(key ^ kTop));
    } else {
      out.uint64s.push_back(key);
    }
  }

  // Sorts the pending keys, counts their runs and merges them into counts_.
  void Fold() {
    if (pending_.empty()) return;
    std::sort(pending_.begin(), pending_.end());
    std::vector<Count> runs;
    for (std::size_t i = 0; i < pending_.size();) {
      std::size_t j = i + 1;
      while (j < pending_.size() && pending_[j] == pending_[i]) ++j;
      runs.push_back({pending_[i], j - i});
      i = j;
    }
    pending_.clear();
    MergeCounts(runs);
  }
  void MergeCounts(const std::vector<Count>& more) {
    std::vector<Count> merged;
    merged.reserve(counts_.size() + more.size());
    std::size_t a = 0, b = 0;
    while (a < counts_.size() || b < more.size()) {
      if (b == more.size() || (a < counts_.size() && counts_[a].key < more[b].key)) {
        merged.push_back(counts_[a++]);
      } else if (a == counts_.size() || more[b].key < counts_[a].key) {
        merged.push_back(more[b++]);
      } else {
        merged.push_back({counts_[a].key, counts_[a].n + more[b].n});
        ++a;
        ++b;
      }
    }
    counts_ = std::move(merged);
  }

  OpSpec op_;
  DType dtype_;
  int wire_;
  std::string_view name_;
  std::vector<std::uint64_t> pending_;  // keys not yet counted
  std::vector<Count> counts_;           // ascending by key, distinct
  std::uint64_t nans_ = 0;
};

}  // namespace

std::unique_ptr<State> MakeModeState(const OpSpec& op, DType dtype) { return MakeStateOf<ModeState>(op, dtype); }

}  // namespace tally::rules::agg
