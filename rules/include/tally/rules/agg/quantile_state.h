// The state of quantile, nanquantile, median and nanmedian: the row's
// elements themselves (holistic), NaN elements counted apart. Finalize
// selects the order statistics the answers need (a multi-select, as numpy's
// partition does) and computes each answer as numpy 1.24 does:
//   - quantile's virtual index per method (_QuantileMethods), the methods
//     that pick an element take it, the others interpolate by numpy's _lerp
//     (the difference of the two neighbours in the dtype's arithmetic, as
//     numpy subtracts them, then the rest in float64);
//   - median is the middle element, or the mean of the middle two in
//     numpy.mean's arithmetic for the dtype (float32 for float32 and the
//     16-bit floats, rounded back to those; float64 otherwise);
//   - a NaN in the row makes every answer NaN (quantile, median); the
//     NaN-skipping forms leave NaN out and answer NaN for a row without
//     other elements. quantile of an empty row has no value (numpy raises).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tally/rules/agg/function.h"
#include "tally/rules/agg/state.h"
#include "tally/rules/dtype.h"
#include "tally/rules/half.h"
#include "tally/rules/op.h"
#include "tally/rules/order_key.h"

namespace tally::rules::agg {

namespace quantile_detail {

// How an element is kept: the 16-bit floats as float (exact), the rest as
// they are.
template <typename T>
using Stored = std::conditional_t<std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>, float, T>;

// The order statistics at `ranks` (sorted, distinct, each < v.size()) put
// in place, as std::nth_element would put each: divide and conquer on the
// middle rank, so r ranks cost about n log r comparisons.
template <typename S>
void SelectRanks(std::vector<S>& v, std::span<const std::uint64_t> ranks, std::uint64_t lo, std::uint64_t hi) {
  if (ranks.empty() || lo >= hi) return;
  const std::size_t mid = ranks.size() / 2;
  const std::uint64_t r = ranks[mid];
  std::nth_element(v.begin() + static_cast<std::ptrdiff_t>(lo), v.begin() + static_cast<std::ptrdiff_t>(r),
                   v.begin() + static_cast<std::ptrdiff_t>(hi));
  SelectRanks(v, ranks.first(mid), lo, r);
  SelectRanks(v, ranks.subspan(mid + 1), r + 1, hi);
}

// Rows from this length take the radix selection (ValuesAtRanks); shorter
// ones SelectRanks in place.
inline constexpr std::size_t kRadixSelectMinElements = std::size_t{1} << 16;
// The keys' top bits that pick a bucket: 12 for a few ranks, so that the
// counts stay in the first-level cache, else 16. With 12 bits the 64
// ranks of 64 quantiles of normal data fell in buckets holding over a
// quarter of the row, which is then selected in place: 550-575 ms for
// 2^24 float32 against 144 with 16 bits (2-core EPYC VM).
inline int RadixSelectBits(std::size_t ranks) { return ranks <= 4 ? 12 : 16; }

// The values at `ranks` (sorted, distinct, each < v.size()) as a sort of v
// by NumberKey places them, a zero answering 0.0 as the GPU's selection
// does (numpy compares -0.0 and 0.0 equal, so either is its element; this
// way the bits do not depend on the elements' order). Long rows of 4- and
// 8-byte numbers by a radix selection: one read counting the keys' top
// bits (RadixSelectBits), one gathering the keys of the buckets that hold
// a rank, and SelectRanks within each (numpy's partition, as SelectRanks,
// reads the row several times: docs/performance.md); elsewhere
// SelectRanks in place.
template <typename S>
std::vector<S> ValuesAtRanks(std::vector<S>& v, std::span<const std::uint64_t> ranks) {
  std::vector<S> out;
  out.reserve(ranks.size());
  const auto canonical = [](S x) {
    if constexpr (std::is_floating_point_v<S>) {
      if (x == 0) return S{0};
    }
    return x;
  };
  if constexpr (std::is_arithmetic_v<S> && !std::is_same_v<S, bool> && (sizeof(S) == 4 || sizeof(S) == 8)) {
    if (v.size() >= kRadixSelectMinElements && !ranks.empty()) {
      using K = KeyOf<S>;
      const int bits = RadixSelectBits(ranks.size());
      const int shift = kKeyBits<K> - bits;
      const std::size_t buckets = std::size_t{1} << bits;
      std::vector<std::uint64_t> below(buckets + 1, 0);  // below[b]: elements in buckets before b
      for (const S x : v) ++below[(NumberKey(x) >> shift) + 1];
      for (std::size_t b = 0; b < buckets; ++b) below[b + 1] += below[b];
      std::vector<std::uint32_t> bucket(ranks.size());  // each rank's bucket
      std::vector<std::int32_t> list_of(buckets, -1);  // the gather list of a bucket holding a rank
      std::vector<std::vector<K>> lists;
      std::uint64_t gathered = 0;
      for (std::size_t i = 0; i < ranks.size(); ++i) {
        const auto b = static_cast<std::uint32_t>(std::upper_bound(below.begin(), below.end(), ranks[i]) -
                                                  below.begin() - 1);
        bucket[i] = b;
        if (list_of[b] < 0) {
          list_of[b] = static_cast<std::int32_t>(lists.size());
          lists.emplace_back();
          gathered += below[b + 1] - below[b];
        }
      }
      // Buckets holding most of the row (few distinct top bits: small
      // integers, a narrow spread) would copy it: selected in place then.
      if (gathered <= v.size() / 4) {
        for (std::size_t b = 0; b < buckets; ++b) {
          if (list_of[b] >= 0) lists[static_cast<std::size_t>(list_of[b])].reserve(below[b + 1] - below[b]);
        }
        for (const S x : v) {
          const K k = NumberKey(x);
          const std::int32_t l = list_of[k >> shift];
          if (l >= 0) lists[static_cast<std::size_t>(l)].push_back(k);
        }
        for (std::size_t i = 0; i < ranks.size();) {
          std::size_t j = i;  // ranks i..j-1 share a bucket
          std::vector<std::uint64_t> local;
          while (j < ranks.size() && bucket[j] == bucket[i]) local.push_back(ranks[j++] - below[bucket[i]]);
          std::vector<K>& keys = lists[static_cast<std::size_t>(list_of[bucket[i]])];
          SelectRanks(keys, local, 0, keys.size());
          for (const std::uint64_t r : local) out.push_back(NumberOfKey<S>(keys[r]));
          i = j;
        }
        return out;
      }
    }
  }
  SelectRanks(v, ranks, 0, v.size());
  for (const std::uint64_t r : ranks) out.push_back(canonical(v[r]));
  return out;
}

// numpy's virtual index of q among n sorted elements: an integer index
// for the methods that pick an element (is_index), else a float64 one.
struct Virtual {
  bool is_index = false;
  std::int64_t index = 0;
  double value = 0.0;
};

inline double RoundHalfToEven(double x) { return std::nearbyint(x); }  // the default rounding mode: numpy.around

inline Virtual VirtualIndex(QuantileMethod m, std::uint64_t count, double q) {
  const double n = static_cast<double>(count);
  const auto at = [](double alpha, double beta, double n, double q) {
    return n * q + (alpha + q * (1 - alpha - beta)) - 1;
  };
  // numpy's _discret_interpolation_to_boundaries: floor, or floor + 1
  // unless `take_previous`, then clipped at 0.
  const auto boundary = [](double index, auto take_previous) {
    const double previous = std::floor(index);
    const double gamma = index - previous;
    double res = take_previous(gamma, index) ? previous : previous + 1;
    auto i = static_cast<std::int64_t>(res);
    if (i < 0) i = 0;
    return Virtual{.is_index = true, .index = i};
  };
  switch (m) {
    case QuantileMethod::kInvertedCdf:
      return boundary(n * q - 1, [](double gamma, double) { return gamma == 0; });
    case QuantileMethod::kClosestObservation:
      return boundary(n * q - 1 - 0.5, [](double gamma, double index) {
        return gamma == 0 && std::fmod(std::floor(index), 2.0) == 0;
      });
    case QuantileMethod::kAveragedInvertedCdf: return {.value = n * q - 1};
    case QuantileMethod::kInterpolatedInvertedCdf: return {.value = at(0, 1, n, q)};
    case QuantileMethod::kHazen: return {.value = at(0.5, 0.5, n, q)};
    case QuantileMethod::kWeibull: return {.value = at(0, 0, n, q)};
    case QuantileMethod::kLinear: return {.value = (n - 1) * q};
    case QuantileMethod::kMedianUnbiased: return {.value = at(1 / 3.0, 1 / 3.0, n, q)};
    case QuantileMethod::kNormalUnbiased: return {.value = at(3 / 8.0, 3 / 8.0, n, q)};
    case QuantileMethod::kLower:
      return {.is_index = true, .index = static_cast<std::int64_t>(std::floor((n - 1) * q))};
    case QuantileMethod::kHigher:
      return {.is_index = true, .index = static_cast<std::int64_t>(std::ceil((n - 1) * q))};
    case QuantileMethod::kMidpoint:
      return {.value = 0.5 * (std::floor((n - 1) * q) + std::ceil((n - 1) * q))};
    case QuantileMethod::kNearest:
      return {.is_index = true, .index = static_cast<std::int64_t>(RoundHalfToEven((n - 1) * q))};
  }
  return {};
}

// numpy's gamma after fix_gamma, from the virtual index and the previous
// index as _get_indexes left it (clipped to -1 or 0 at the bounds).
inline double Gamma(QuantileMethod m, double virtual_index, std::int64_t previous) {
  const double gamma = virtual_index - static_cast<double>(previous);
  switch (m) {
    case QuantileMethod::kAveragedInvertedCdf: return gamma == 0 ? 0.5 : 1.0;
    case QuantileMethod::kMidpoint: return std::fmod(virtual_index, 1.0) == 0 ? 0.0 : 0.5;
    default: return gamma;
  }
}

// b - a as numpy subtracts two elements of the dtype: in the dtype (an
// integer difference wraps, a 16-bit float one rounds to 16 bits), then
// widened to float64.
template <typename T>
double Difference(Stored<T> b, Stored<T> a) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(T(static_cast<double>(b - a))));
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(static_cast<T>(b - a));
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<double>(static_cast<T>(static_cast<U>(static_cast<U>(b) - static_cast<U>(a))));
  }
}

// numpy.mean of the two middle elements, as numpy computes it for the dtype.
template <typename T>
double MeanOfTwo(Stored<T> a, Stored<T> b) {
  if constexpr (std::is_same_v<T, float>) {
    const float s = a + b;
    return static_cast<double>(s / 2.0f);
  } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    const float s = a + b;
    return static_cast<double>(static_cast<float>(T(static_cast<double>(s / 2.0f))));
  } else {
    return (static_cast<double>(a) + static_cast<double>(b)) / 2.0;
  }
}

// Which order statistics a row's answers read, and how the answers follow
// from them: the one rule whether the elements are here (QuantileState) or
// selected elsewhere (a GPU's radix select). `n` counts the non-NaN
// elements, `nan` the NaN ones; `skips_nan` for the NaN-skipping forms.
class QuantilePicks {
 public:
  QuantilePicks(const OpSpec& op, std::uint64_t n, std::uint64_t nan, bool skips_nan) : op_(op), n_(n) {
    median_ = op.kind == OpKind::kMedian || op.kind == OpKind::kNanMedian;
    answers_ = median_ ? 1 : op.q.size();
    if ((nan > 0 && !skips_nan) || (n == 0 && nan > 0)) {
      nan_ = true;  // any NaN poisons quantile and median; all-NaN rows are NaN
      return;
    }
    if (n == 0) {
      empty_ = true;
      return;
    }
    if (median_) {
      if (n % 2 == 0) ranks_.push_back(n / 2 - 1);
      ranks_.push_back(n / 2);
      return;
    }
    picks_.resize(answers_);
    for (std::size_t j = 0; j < answers_; ++j) {
      Pick& p = picks_[j];
      p.v = VirtualIndex(op.method, n, op.q[j]);
      if (p.v.is_index) {
        p.previous = p.next = std::min<std::int64_t>(p.v.index, static_cast<std::int64_t>(n) - 1);
      } else {
        // numpy's _get_indexes: past the last element, both are the last
        // (index -1); before the first, both are the first.
        p.previous = static_cast<std::int64_t>(std::floor(p.v.value));
        p.next = p.previous + 1;
        if (p.v.value >= static_cast<double>(n) - 1) p.previous = p.next = -1;
        if (p.v.value < 0) p.previous = p.next = 0;
      }
      ranks_.push_back(RankOf(p.previous));
      ranks_.push_back(RankOf(p.next));
    }
    std::sort(ranks_.begin(), ranks_.end());
    ranks_.erase(std::unique(ranks_.begin(), ranks_.end()), ranks_.end());
  }

  // The ranks (0 = the smallest non-NaN element) to select: sorted, distinct.
  const std::vector<std::uint64_t>& ranks() const { return ranks_; }

  // The answers, `at(rank)` giving the element of that rank for each of
  // ranks(); a sentence when there is none (quantile of no element).
  template <typename T, typename At>
  std::optional<std::string> Answer(At at, RowAnswer& out) const {
    constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
    if (nan_) {
      out.doubles.assign(answers_, kNan);
      return std::nullopt;
    }
    if (empty_) {
      if (op_.kind == OpKind::kQuantile) return std::string("quantile of an empty array has no value (numpy raises).");
      out.doubles.assign(answers_, kNan);
      return std::nullopt;
    }
    if (median_) {
      const std::uint64_t hi = n_ / 2;
      out.doubles.push_back(n_ % 2 == 0 ? MeanOfTwo<T>(at(hi - 1), at(hi)) : static_cast<double>(at(hi)));
      return std::nullopt;
    }
    for (const Pick& p : picks_) {
      const Stored<T> a = at(RankOf(p.previous));
      if (p.v.is_index) {
        out.doubles.push_back(static_cast<double>(a));
        continue;
      }
      const Stored<T> b = at(RankOf(p.next));
      const double t = Gamma(op_.method, p.v.value, p.previous);
      const double diff = Difference<T>(b, a);
      // numpy's _lerp: a + diff * t, or b - diff * (1 - t) where t >= 0.5.
      out.doubles.push_back(t >= 0.5 ? static_cast<double>(b) - diff * (1 - t)
                                     : static_cast<double>(a) + diff * t);
    }
    return std::nullopt;
  }

 private:
  struct Pick {
    Virtual v;
    std::int64_t previous = 0, next = 0;
  };
  std::uint64_t RankOf(std::int64_t i) const {
    return static_cast<std::uint64_t>(i < 0 ? i + static_cast<std::int64_t>(n_) : i);
  }

  OpSpec op_;
  std::uint64_t n_;
  bool median_ = false, nan_ = false, empty_ = false;
  std::size_t answers_ = 0;
  std::vector<Pick> picks_;
  std::vector<std::uint64_t> ranks_;
};

template <typename T>
class QuantileState final : public State {
 public:
  using S = Stored<T>;

  QuantileState(const OpSpec& op, DType dtype, const Function& f)
      : op_(op), dtype_(dtype), wire_(f.wire), name_(f.name), skips_nan_(f.skips_nan) {}

  std::uint64_t bytes() const override { return sizeof(*this) + values_.capacity() * sizeof(S); }

  void Update(const Elements& e) override {
    // Geometric growth: an exact reserve per block would copy the row once
    // per block.
    if (values_.capacity() < values_.size() + e.count) {
      values_.reserve(std::max(values_.size() + e.count, 2 * values_.capacity()));
    }
    for (std::uint64_t i = 0; i < e.count; ++i) {
      if (!e.Valid(i)) continue;
      const S v = static_cast<S>(e.At<T>(i));
      if constexpr (kFloatElement<T>) {
        if (v != v) {
          ++nan_;
          continue;
        }
      }
      values_.push_back(v);
    }
  }

  void Combine(const State& later) override {
    const auto& o = static_cast<const QuantileState&>(later);
    values_.insert(values_.end(), o.values_.begin(), o.values_.end());
    nan_ += o.nan_;
  }

  std::optional<std::string> Finalize(RowAnswer& out) override {
    const QuantilePicks picks(op_, values_.size(), nan_, skips_nan_);
    const std::vector<std::uint64_t>& ranks = picks.ranks();
    const std::vector<S> at = ValuesAtRanks(values_, ranks);
    return picks.Answer<T>(
        [&](std::uint64_t rank) { return at[std::lower_bound(ranks.begin(), ranks.end(), rank) - ranks.begin()]; },
        out);
  }

  void Serialize(std::string& out) override {
    std::sort(values_.begin(), values_.end());
    Writer w(out);
    PutHeader(w, wire_, dtype_, op_);
    w.Put(nan_);
    w.Put(static_cast<std::uint64_t>(values_.size()));
    w.PutBytes(values_.data(), values_.size() * sizeof(S));
  }

  std::optional<std::string> Deserialize(std::string_view bytes) override {
    Reader r(bytes);
    if (auto bad = CheckHeader(r, wire_, name_, dtype_, op_)) return bad;
    std::uint64_t count = 0;
    if (!r.Get(nan_) || !r.Get(count) || count != r.left() / sizeof(S) || r.left() % sizeof(S) != 0) {
      return Truncated(name_);
    }
    values_.resize(count);
    r.GetBytes(values_.data(), count * sizeof(S));
    return std::nullopt;
  }

 private:
  OpSpec op_;
  DType dtype_;
  int wire_;
  std::string_view name_;
  bool skips_nan_;
  std::vector<S> values_;  // the valid, non-NaN elements, in no order
  std::uint64_t nan_ = 0;  // valid NaN elements
};

}  // namespace quantile_detail

}  // namespace tally::rules::agg
