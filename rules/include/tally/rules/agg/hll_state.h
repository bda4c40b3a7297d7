// The state of hll: a HyperLogLog sketch of 2^p registers, exact while it
// has seen few distinct values. Both forms are functions of the set of
// values seen, never of the order or the split they came in, so merged
// states are bitwise the state of one stream.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
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

namespace hll_detail {

// A value's hash: MurmurHash3's 64-bit finaliser (fmix64) of its identity
// (IdOf: 32 bits for dtypes of 4 bytes and less, 64 for the others)
// xored with a constant. Every step is a bijection of 64-bit words, so
// distinct values give distinct hashes: the sparse form's count is exact,
// not an estimate. The constant keeps the common value 0 from hashing to 0
// (the largest rank in register 0). Cheap on a GPU, where 4-byte dtypes
// (a hash per 4 bytes read) are bound by the hash's instructions: shifts
// by 33 take two instructions where splitmix64's by 30, 27 and 31 took
// four, and a 32-bit identity makes the first shift nothing and the first
// product a 32-bit by 64-bit one (docs/performance.md, "hll's 4-byte
// dtypes").
constexpr std::uint64_t Mix(std::uint64_t x) {
  x ^= 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdull;
  x = (x ^ (x >> 33)) * 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Ertl (2017), "New cardinality estimation algorithms for HyperLogLog
// sketches", algorithm 6: sigma and tau sum their series until a term no
// longer changes the float64 sum.
inline double Sigma(double x) {
  if (x == 1.0) return std::numeric_limits<double>::infinity();
  double y = 1.0, z = x, before = 0.0;
  do {
    x *= x;
    before = z;
    z += x * y;
    y += y;
  } while (z != before);
  return z;
}

inline double Tau(double x) {
  if (x == 0.0 || x == 1.0) return 0.0;
  double y = 1.0, z = 1.0 - x, before = 0.0;
  do {
    x = std::sqrt(x);
    before = z;
    y *= 0.5;
    z -= (1.0 - x) * (1.0 - x) * y;
  } while (z != before);
  return z / 3.0;
}

// The improved raw estimate from the registers' histogram: c[k] registers
// hold k, k in 0..q+1 with q = 64 - p. No bias tables: the estimator is
// close to unbiased over the whole range of cardinalities.
inline double Estimate(const std::vector<std::uint64_t>& c, std::uint32_t p) {
  const std::uint32_t q = 64 - p;
  const double m = std::ldexp(1.0, static_cast<int>(p));
  double z = m * Tau(1.0 - static_cast<double>(c[q + 1]) / m);
  for (std::uint32_t k = q; k >= 1; --k) z = 0.5 * (z + static_cast<double>(c[k]));
  z += m * Sigma(static_cast<double>(c[0]) / m);
  const double alpha_inf = 1.0 / (2.0 * std::log(2.0));
  return alpha_inf * m * m / z;
}

// The serialized state's form. 0 and 1 were the forms of states whose
// values were hashed otherwise (splitmix64 of CanonicalBits, in earlier
// builds), whose hashes and registers would not merge with these: such a
// state is refused, by name.
inline constexpr std::uint8_t kSparse = 2;
inline constexpr std::uint8_t kDense = 3;
inline constexpr std::uint8_t kLastEarlierHashForm = 1;

template <typename T>
class HllState final : public State {
 public:
  HllState(const OpSpec& op, DType dtype, const Function& f)
      : op_(op), dtype_(dtype), wire_(f.wire), name_(f.name), p_(op.precision) {}

  std::uint64_t bytes() const override {
    return sizeof(*this) + hashes_.capacity() * sizeof(std::uint64_t) + registers_.capacity();
  }

  void Update(const Elements& e) override {
    for (std::uint64_t i = 0; i < e.count; ++i) {
      if (!e.Valid(i)) continue;
      const std::uint64_t h = Mix(IdOf(e.At<T>(i)));
      if (dense()) {
        Apply(h);
      } else {
        hashes_.push_back(h);
        if (hashes_.size() >= Pending()) Normalize();
      }
    }
  }

  void Combine(const State& later) override {
    const auto& o = static_cast<const HllState&>(later);
    if (o.dense()) {
      ToDense();
      for (std::size_t r = 0; r < registers_.size(); ++r) registers_[r] = std::max(registers_[r], o.registers_[r]);
    } else if (dense()) {
      for (const std::uint64_t h : o.hashes_) Apply(h);
    } else {
      hashes_.insert(hashes_.end(), o.hashes_.begin(), o.hashes_.end());
      if (hashes_.size() >= Pending()) Normalize();
    }
  }

  std::optional<std::string> Finalize(RowAnswer& out) override {
    Normalize();
    if (!dense()) {
      out.uint64s.push_back(hashes_.size());
      return std::nullopt;
    }
    std::vector<std::uint64_t> histogram(64 - p_ + 2, 0);
    for (const std::uint8_t r : registers_) ++histogram[r];
    out.uint64s.push_back(static_cast<std::uint64_t>(std::nearbyint(Estimate(histogram, p_))));
    return std::nullopt;
  }

  void Serialize(std::string& out) override {
    Normalize();
    Writer w(out);
    PutHeader(w, wire_, dtype_, op_);
    w.Put(dense() ? kDense : kSparse);
    if (dense()) {
      w.PutBytes(registers_.data(), registers_.size());
    } else {
      w.Put(static_cast<std::uint64_t>(hashes_.size()));
      w.PutBytes(hashes_.data(), hashes_.size() * sizeof(std::uint64_t));
    }
  }

  std::optional<std::string> Deserialize(std::string_view bytes) override {
    Reader r(bytes);
    if (auto bad = CheckHeader(r, wire_, name_, dtype_, op_)) return bad;
    std::uint8_t mode = 0;
    if (!r.Get(mode)) return Truncated(name_);
    if (mode <= kLastEarlierHashForm) {
      return "function_state: an " + std::string(name_) +
             " state of an earlier tally build, whose values were hashed otherwise; it cannot merge with this "
             "build's states: compute it again.";
    }
    hashes_.clear();
    registers_.clear();
    if (mode == kDense) {
      // A dense state holds more than the sparse limit's distinct values,
      // so it can never have every register at 0.
      registers_.resize(Registers());
      if (r.left() != registers_.size() || !r.GetBytes(registers_.data(), registers_.size()) ||
          std::any_of(registers_.begin(), registers_.end(), [&](std::uint8_t x) { return x > 64 - p_ + 1; }) ||
          std::all_of(registers_.begin(), registers_.end(), [](std::uint8_t x) { return x == 0; })) {
        registers_.clear();
        return Truncated(name_);
      }
      return std::nullopt;
    }
    std::uint64_t count = 0;
    if (mode != kSparse || !r.Get(count) || count > SparseLimit() || r.left() != count * sizeof(std::uint64_t)) {
      return Truncated(name_);
    }
    hashes_.resize(count);
    r.GetBytes(hashes_.data(), count * sizeof(std::uint64_t));
    if (std::adjacent_find(hashes_.begin(), hashes_.end(), std::greater_equal<>()) != hashes_.end()) {
      hashes_.clear();
      return Truncated(name_);
    }
    return std::nullopt;
  }

 private:
  std::size_t Registers() const { return std::size_t{1} << p_; }
  // The sparse form is kept while it holds at most 2^p / 4 distinct hashes
  // (8 bytes each: half the dense form's bytes at the limit). The switch
  // depends only on how many distinct values were seen, and a dense state
  // has seen more than the limit, so any union of it stays dense.
  std::size_t SparseLimit() const { return Registers() / 4; }
  // Hashes gathered before they are sorted and deduplicated: an update
  // costs O(log) amortised.
  std::size_t Pending() const { return std::max<std::size_t>(2 * SparseLimit(), 1024); }
  bool dense() const { return !registers_.empty(); }

  // Register = the hash's top p bits; rank = the leading zeros of the other
  // 64 - p bits, plus one (64 - p + 1 when they are all 0).
  void Apply(std::uint64_t h) {
    const std::uint64_t rest = h << p_;
    const auto rank = static_cast<std::uint8_t>(std::min<int>(std::countl_zero(rest), 64 - static_cast<int>(p_)) + 1);
    std::uint8_t& reg = registers_[h >> (64 - p_)];
    reg = std::max(reg, rank);
  }

  void ToDense() {
    if (dense()) return;
    registers_.assign(Registers(), 0);
    for (const std::uint64_t h : hashes_) Apply(h);
    hashes_.clear();
    hashes_.shrink_to_fit();
  }

  // Sorted and distinct, and dense when past the limit.
  void Normalize() {
    if (dense()) return;
    std::sort(hashes_.begin(), hashes_.end());
    hashes_.erase(std::unique(hashes_.begin(), hashes_.end()), hashes_.end());
    if (hashes_.size() > SparseLimit()) ToDense();
  }

  OpSpec op_;
  DType dtype_;
  int wire_;
  std::string_view name_;
  std::uint32_t p_;
  std::vector<std::uint64_t> hashes_;    // sparse: the hashes seen (sorted and distinct after Normalize)
  std::vector<std::uint8_t> registers_;  // dense: 2^p ranks, each at most 64 - p + 1; empty while sparse
};

}  // namespace hll_detail

}  // namespace tally::rules::agg
