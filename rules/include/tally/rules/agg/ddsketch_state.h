// The state of ddsketch: a DDSketch (Masson, Rim and Lee, 2019) of relative
// accuracy alpha. Each value's bucket is a function of the value alone and
// buckets only add counts, never collapse, so a merged state is bitwise the
// state of one stream, whatever the split and the merge order.
//
// Contract: for q, let x be the element at sorted position floor(q * (n-1))
// of the row's n non-NaN elements (numpy.quantile's method="lower"). The
// answer is within alpha * |x| of x, for every dtype (integers are widened
// to float64 first: the bound keeps room for that rounding); it is 0 when
// |x| < 2^-1000 and exactly x when x is +-inf. NaN elements are left out
// (as nanquantile), and a row of none answers NaN for each q. No q means
// the median, q = 0.5.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tally/rules/agg/function.h"
#include "tally/rules/agg/state.h"
#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::rules::agg {

namespace ddsketch_detail {

// Magnitudes below this (and +-0) are counted as 0: the bucket count stays
// bounded by the normal range of float64, and subnormals need no mapping.
inline constexpr double kZeroBelow = 0x1p-1000;

// The mapping from a magnitude to its bucket, in operations IEEE 754 rounds
// correctly (no log), so a GPU that follows it gets the same buckets.
//
// With x = m * 2^e, m in [1, 2), f(x) = e + (m - 1) is log2(x) linearly
// interpolated between powers of two: continuous and increasing. Bucket i
// holds the x with (i - 1) / M < f(x) <= i / M, index = ceil(f(x) * M).
// For a bucket's bounds lo < hi and L = 1 / M <= 1, hi / lo <= 1 + L:
// inside one binade hi / lo = (1 + t + L) / (1 + t) <= 1 + L, and across a
// power of two (t + L >= 1) hi / lo = 2 (t + L) / (1 + t), which grows with
// t up to 1 + L at t = 1.
//
// The answer for a bucket, v = 2 lo hi / (lo + hi) (their harmonic mean),
// is off from any x in [lo, hi] by at most (hi - lo) / (hi + lo) * x: the
// relative error |v - x| / x is largest at the ends, where it is
// (v - lo) / lo = (hi - v) / hi = (r - 1) / (r + 1) with r = hi / lo. That
// is at most alpha when r <= gamma = (1 + alpha) / (1 - alpha), so
// M = 1 / (gamma - 1) = (1 - alpha) / (2 alpha) would do. M is taken larger
// by a factor 1 + 2^-20: the rounding of f, of f * M and of the bounds moves
// a bucket's edges by about 1e-13 relative, far less than the 2^-20 * alpha
// of room this leaves. M is at least 1 (alpha > 1/3), so L <= 1 holds.
class Mapping {
 public:
  explicit Mapping(double alpha)
      : multiplier_(std::max(1.0, (1.0 - alpha) / (2.0 * alpha) * (1.0 + 0x1p-20))) {}

  // |x| in [kZeroBelow, DBL_MAX]: a normal number, so its bits give m and e.
  std::int32_t Index(double magnitude) const {
    const auto bits = std::bit_cast<std::uint64_t>(magnitude);
    const int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    // (m - 1) is the mantissa's bits times 2^-52, exactly; one rounding in
    // the sum, one in the product.
    const double f = static_cast<double>(e) + static_cast<double>(bits & ((std::uint64_t{1} << 52) - 1)) * 0x1p-52;
    return static_cast<std::int32_t>(std::ceil(f * multiplier_));
  }

  // The value that answers for bucket i (see above).
  double Value(std::int32_t i) const {
    const double lo = Bound(i - 1);
    const double hi = std::min(Bound(i), std::numeric_limits<double>::max());  // the top bucket ends at DBL_MAX
    const double r = hi / lo;
    return lo * (2.0 * r / (1.0 + r));  // the harmonic mean, without overflowing lo * hi
  }

  std::int32_t MinIndex() const { return Index(kZeroBelow); }
  // M: a GPU pass computes Index with it, in the same operations.
  double multiplier() const { return multiplier_; }
  std::int32_t MaxIndex() const { return Index(std::numeric_limits<double>::max()); }

 private:
  // f^-1(i / M): the edge between buckets i and i + 1.
  double Bound(std::int32_t i) const {
    const double f = static_cast<double>(i) / multiplier_;
    const double e = std::floor(f);
    return std::ldexp(1.0 + (f - e), static_cast<int>(e));
  }

  double multiplier_;
};

struct Bucket {
  std::int32_t index;
  std::uint64_t count;
};

// Sorted buckets of one sign, and a dense window of counts that elements
// land in first (one increment each: the window covers the indices seen,
// grown by doubling), folded into the buckets when asked. Memory follows
// the indices in use, at most twice MaxIndex - MinIndex + 1 (about
// 2024 * M: the range of float64).
class Store {
 public:
  void Add(std::int32_t index, std::uint64_t count = 1) {
    if (window_.empty()) {
      low_ = index;
      window_.assign(64, 0);
    } else if (index < low_ || index >= low_ + static_cast<std::int64_t>(window_.size())) {
      Widen(index);
    }
    window_[static_cast<std::size_t>(index - low_)] += count;
  }

  void Absorb(const Store& o) {
    buckets_ = Merged(buckets_, o.buckets_);
    for (std::size_t i = 0; i < o.window_.size(); ++i) {
      if (o.window_[i] != 0) Add(static_cast<std::int32_t>(o.low_ + static_cast<std::int64_t>(i)), o.window_[i]);
    }
  }

  // Counts the window into the buckets.
  void Flush() {
    if (window_.empty()) return;
    std::vector<Bucket> runs;
    for (std::size_t i = 0; i < window_.size(); ++i) {
      if (window_[i] != 0) runs.push_back({static_cast<std::int32_t>(low_ + static_cast<std::int64_t>(i)), window_[i]});
    }
    window_.clear();
    buckets_ = Merged(buckets_, runs);
  }

  // After Flush.
  const std::vector<Bucket>& buckets() const { return buckets_; }
  std::vector<Bucket>& buckets() { return buckets_; }

  std::uint64_t bytes() const {
    return window_.capacity() * sizeof(std::uint64_t) + buckets_.capacity() * sizeof(Bucket);
  }

 private:
  // Grows the window to cover `index`, at least doubling it.
  void Widen(std::int32_t index) {
    const std::int64_t size = static_cast<std::int64_t>(window_.size());
    const std::int64_t lo = std::min<std::int64_t>(low_, index);
    const std::int64_t hi = std::max<std::int64_t>(low_ + size - 1, index);
    const std::int64_t grown = std::max(hi - lo + 1, 2 * size);
    const std::int64_t new_low = index < low_ ? hi - grown + 1 : low_;
    std::vector<std::uint64_t> w(static_cast<std::size_t>(grown), 0);
    std::copy(window_.begin(), window_.end(), w.begin() + (low_ - new_low));
    window_.swap(w);
    low_ = new_low;
  }

  static std::vector<Bucket> Merged(const std::vector<Bucket>& a, const std::vector<Bucket>& b) {
    std::vector<Bucket> out;
    out.reserve(a.size() + b.size());
    std::size_t i = 0, j = 0;
    while (i < a.size() || j < b.size()) {
      if (j == b.size() || (i < a.size() && a[i].index < b[j].index)) {
        out.push_back(a[i++]);
      } else if (i == a.size() || b[j].index < a[i].index) {
        out.push_back(b[j++]);
      } else {
        out.push_back({a[i].index, a[i].count + b[j].count});
        ++i, ++j;
      }
    }
    return out;
  }

  std::vector<std::uint64_t> window_;  // window_[i]: the count of index low_ + i not yet in buckets_
  std::int64_t low_ = 0;
  std::vector<Bucket> buckets_;  // by index, each count > 0
};

template <typename T>
class DdSketchState final : public State {
 public:
  DdSketchState(const OpSpec& op, DType dtype, const Function& f)
      : op_(op), dtype_(dtype), wire_(f.wire), name_(f.name), mapping_(op.relative_accuracy) {}

  std::uint64_t bytes() const override { return sizeof(*this) + negative_.bytes() + positive_.bytes(); }

  void Update(const Elements& e) override {
    for (std::uint64_t i = 0; i < e.count; ++i) {
      if (!e.Valid(i)) continue;
      double x;
      if constexpr (kFloatElement<T>) {
        x = Widen(e.At<T>(i));
      } else {
        x = static_cast<double>(e.At<T>(i));
      }
      if (x != x) continue;  // NaN: left out, as nanquantile does
      const double magnitude = std::fabs(x);
      if (magnitude < kZeroBelow) {
        ++zero_;
      } else if (magnitude == std::numeric_limits<double>::infinity()) {
        ++(x > 0 ? positive_inf_ : negative_inf_);  // exact answers, no bucket
      } else {
        (x > 0 ? positive_ : negative_).Add(mapping_.Index(magnitude));
      }
    }
  }

  void Combine(const State& later) override {
    const auto& o = static_cast<const DdSketchState&>(later);
    negative_.Absorb(o.negative_);
    positive_.Absorb(o.positive_);
    zero_ += o.zero_;
    negative_inf_ += o.negative_inf_;
    positive_inf_ += o.positive_inf_;
  }

  std::optional<std::string> Finalize(RowAnswer& out) override {
    negative_.Flush();
    positive_.Flush();
    // The row in sorted order, as runs of equal answers: -inf, the negative
    // buckets from the largest magnitude down, 0, the positive buckets up,
    // +inf. ends[k] is the sorted position just past run k.
    constexpr double kInf = std::numeric_limits<double>::infinity();
    std::vector<std::uint64_t> ends;
    std::vector<double> values;
    std::uint64_t n = 0;
    const auto run = [&](std::uint64_t count, double value) {
      if (count == 0) return;
      n += count;
      ends.push_back(n);
      values.push_back(value);
    };
    run(negative_inf_, -kInf);
    const std::vector<Bucket>& neg = negative_.buckets();
    for (auto b = neg.rbegin(); b != neg.rend(); ++b) run(b->count, -mapping_.Value(b->index));
    run(zero_, 0.0);
    for (const Bucket& b : positive_.buckets()) run(b.count, mapping_.Value(b.index));
    run(positive_inf_, kInf);

    const std::vector<double> median{0.5};
    for (const double q : op_.q.empty() ? median : op_.q) {
      if (n == 0) {
        out.doubles.push_back(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      // numpy's method="lower" index, computed as quantile_state.h does.
      const auto rank = static_cast<std::uint64_t>(std::floor(static_cast<double>(n - 1) * q));
      const auto k = std::upper_bound(ends.begin(), ends.end(), rank) - ends.begin();
      out.doubles.push_back(values[static_cast<std::size_t>(k)]);
    }
    return std::nullopt;
  }

  void Serialize(std::string& out) override {
    negative_.Flush();
    positive_.Flush();
    Writer w(out);
    PutHeader(w, wire_, dtype_, op_);
    w.Put(zero_);
    w.Put(negative_inf_);
    w.Put(positive_inf_);
    for (const Store* s : {&negative_, &positive_}) {
      w.Put(static_cast<std::uint64_t>(s->buckets().size()));
      for (const Bucket& b : s->buckets()) {
        w.Put(b.index);
        w.Put(b.count);
      }
    }
  }

  std::optional<std::string> Deserialize(std::string_view bytes) override {
    Reader r(bytes);
    if (auto bad = CheckHeader(r, wire_, name_, dtype_, op_)) return bad;
    negative_ = Store();
    positive_ = Store();
    std::uint64_t total = 0;
    if (!r.Get(zero_) || !r.Get(negative_inf_) || !r.Get(positive_inf_) || !Read(r, negative_, total) ||
        !Read(r, positive_, total) || r.left() != 0 || !Add(total, zero_) || !Add(total, negative_inf_) ||
        !Add(total, positive_inf_)) {
      negative_ = Store();
      positive_ = Store();
      zero_ = negative_inf_ = positive_inf_ = 0;
      return Truncated(name_);
    }
    return std::nullopt;
  }

 private:
  // Whether total + count fits: the counts of a state sum to its n.
  static bool Add(std::uint64_t& total, std::uint64_t count) {
    if (count > std::numeric_limits<std::uint64_t>::max() - total) return false;
    total += count;
    return true;
  }

  // A store as Serialize wrote it: indices increasing within the mapping's
  // range, counts positive.
  bool Read(Reader& r, Store& s, std::uint64_t& total) const {
    constexpr std::size_t kBucketBytes = sizeof(std::int32_t) + sizeof(std::uint64_t);
    std::uint64_t count = 0;
    if (!r.Get(count) || count > r.left() / kBucketBytes) return false;
    std::vector<Bucket>& buckets = s.buckets();
    buckets.resize(count);
    for (Bucket& b : buckets) {
      r.Get(b.index);
      r.Get(b.count);
      if (b.index < mapping_.MinIndex() || b.index > mapping_.MaxIndex() || b.count == 0 || !Add(total, b.count)) {
        return false;
      }
      if (&b != buckets.data() && (&b - 1)->index >= b.index) return false;
    }
    return true;
  }

  OpSpec op_;
  DType dtype_;
  int wire_;
  std::string_view name_;
  Mapping mapping_;
  Store negative_, positive_;  // by magnitude
  std::uint64_t zero_ = 0;     // |x| < 2^-1000, +-0 included
  std::uint64_t negative_inf_ = 0, positive_inf_ = 0;
};

}  // namespace ddsketch_detail

}  // namespace tally::rules::agg
