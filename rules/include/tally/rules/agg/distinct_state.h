// The state of count_distinct: the set of the row's distinct values, by
// their identity (CanonicalBits: -0.0 is 0.0, every NaN one value, as
// numpy.unique counts them). Holistic: it grows with the distinct values,
// within the server's budget for such states. Dtypes of 4 bytes and less
// keep 32-bit identities (half the memory and the passes' bytes) and write
// the 64-bit ones, so the serialized state is the same for every width.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
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

namespace distinct_detail {

// CanonicalBits of the value whose identity is `id`.
template <typename T>
std::uint64_t Wide(Id<T> id) {
  if constexpr (sizeof(T) > 4) {
    return id;
  } else if constexpr (kFloatElement<T>) {
    return std::bit_cast<std::uint64_t>(static_cast<double>(std::bit_cast<float>(id)));
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int32_t>(id)));
  } else {
    return id;
  }
}

// The identity whose CanonicalBits are `bits`; nullopt when no value of T
// has them (a state not written for this dtype).
template <typename T>
std::optional<Id<T>> Narrow(std::uint64_t bits) {
  Id<T> id;
  if constexpr (sizeof(T) > 4) {
    id = bits;
  } else if constexpr (kFloatElement<T>) {
    const double d = std::bit_cast<double>(bits);
    id = d != d ? 0x7fc00000u : std::bit_cast<std::uint32_t>(static_cast<float>(d));
  } else {
    id = static_cast<Id<T>>(bits);
  }
  if (Wide<T>(id) != bits) return std::nullopt;
  return id;
}

template <typename T>
class DistinctState final : public State {
 public:
  DistinctState(const OpSpec& op, DType dtype, const Function& f)
      : op_(op), dtype_(dtype), wire_(f.wire), name_(f.name) {}

  // What the vector holds, duplicates waiting to be removed included: the
  // budget sees the memory, not the count.
  std::uint64_t bytes() const override { return sizeof(*this) + bits_.capacity() * sizeof(Id<T>); }

  // The block appended whole, then deduplicated if the set has doubled: a
  // row that arrives in one block is sorted once, with no merges (2^24
  // float32 from a dataset: 251-256 -> 143-144 ms, docs/performance.md).
  // The state holds at most twice the set plus a block, as before.
  void Update(const Elements& e) override {
    if (bits_.capacity() < bits_.size() + e.count) {  // geometric: an exact reserve per block copies the set per block
      bits_.reserve(std::max<std::size_t>(bits_.size() + e.count, 2 * bits_.capacity()));
    }
    for (std::uint64_t i = 0; i < e.count; ++i) {
      if (e.Valid(i)) bits_.push_back(IdOf(e.At<T>(i)));
    }
    if (bits_.size() >= Pending()) Unique();
  }

  void Combine(const State& later) override {
    const auto& o = static_cast<const DistinctState&>(later);
    bits_.insert(bits_.end(), o.bits_.begin(), o.bits_.end());
    if (bits_.size() >= Pending()) Unique();
  }

  std::optional<std::string> Finalize(RowAnswer& out) override {
    Unique();
    out.uint64s.push_back(bits_.size());
    return std::nullopt;
  }

  void Serialize(std::string& out) override {
    Unique();
    Writer w(out);
    PutHeader(w, wire_, dtype_, op_);
    w.Put(static_cast<std::uint64_t>(bits_.size()));
    if constexpr (sizeof(Id<T>) == sizeof(std::uint64_t)) {
      w.PutBytes(bits_.data(), bits_.size() * sizeof(std::uint64_t));
    } else {
      for (const Id<T> id : bits_) w.Put(Wide<T>(id));
    }
  }

  std::optional<std::string> Deserialize(std::string_view bytes) override {
    Reader r(bytes);
    if (auto bad = CheckHeader(r, wire_, name_, dtype_, op_)) return bad;
    std::uint64_t count = 0;
    if (!r.Get(count) || count != r.left() / sizeof(std::uint64_t) || r.left() % sizeof(std::uint64_t) != 0) {
      return Truncated(name_);
    }
    bits_.resize(count);
    if constexpr (sizeof(Id<T>) == sizeof(std::uint64_t)) {
      r.GetBytes(bits_.data(), count * sizeof(std::uint64_t));
    } else {
      for (Id<T>& id : bits_) {
        std::uint64_t bits = 0;
        std::optional<Id<T>> narrow = r.Get(bits) ? Narrow<T>(bits) : std::nullopt;
        if (!narrow.has_value()) {
          bits_.clear();
          return Truncated(name_);
        }
        id = *narrow;
      }
    }
    // Serialize writes the set sorted and distinct; anything else was not
    // written by it.
    if (std::adjacent_find(bits_.begin(), bits_.end(), std::greater_equal<>()) != bits_.end()) {
      bits_.clear();
      return Truncated(name_);
    }
    unique_ = bits_.size();
    return std::nullopt;
  }

 private:
  // Values are appended and the vector deduplicated when it has doubled
  // since the last time (at least 1024 entries): O(log n) per value
  // amortised, and never more than twice the set's memory plus a block.
  std::size_t Pending() const { return std::max<std::size_t>(2 * unique_, 1024); }

  // The tail sorted, then set and tail merged into a new vector with the
  // duplicates dropped on the way: one pass where std::inplace_merge and
  // std::unique took two and a buffer of their own. Branch-free: which
  // side comes next is a coin toss on spread values, and mispredicting it
  // was half the merge's time (perf annotate; docs/performance.md).
  void Unique() {
    if (bits_.size() == unique_) return;
    std::vector<Id<T>> merged(bits_.size());
    SortTail(merged.data());
    const Id<T>* a = bits_.data();
    const Id<T>* const a_end = a + unique_;
    const Id<T>* b = a_end;
    const Id<T>* const b_end = bits_.data() + bits_.size();
    Id<T>* out = merged.data();
    // The first value, then each one kept when it differs from the last.
    Id<T> last = a != a_end && *a <= *b ? *a++ : *b++;
    *out++ = last;
    const auto put = [&](Id<T> v) {
      *out = v;
      out += v != last;
      last = v;
    };
    while (a != a_end && b != b_end) {
      const Id<T> va = *a;
      const Id<T> vb = *b;
      const bool from_b = vb < va;
      a += !from_b;
      b += from_b;
      put(from_b ? vb : va);
    }
    while (a != a_end) put(*a++);
    while (b != b_end) put(*b++);
    merged.resize(static_cast<std::size_t>(out - merged.data()));
    bits_.swap(merged);
    unique_ = bits_.size();
  }

  // Sorts bits_ past unique_ (`spare`: room for as many): a least-
  // significant-digit radix sort in 16-bit digits for a long tail, every
  // digit's counts taken in one read, a digit every key shares skipped
  // (float32's widened bits end in 29 zeros); std::sort for a short one.
  void SortTail(Id<T>* spare) {
    const std::size_t n = bits_.size() - unique_;
    Id<T>* a = bits_.data() + unique_;
    if (n < (std::size_t{1} << 16)) {
      std::sort(a, a + n);
      return;
    }
    constexpr int kDigits = sizeof(Id<T>) / 2;
    constexpr std::size_t kBuckets = std::size_t{1} << 16;
    std::vector<std::size_t> at(kDigits * kBuckets, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const Id<T> v = a[i];
      for (int d = 0; d < kDigits; ++d) ++at[d * kBuckets + ((v >> (16 * d)) & 0xffff)];
    }
    Id<T>* b = spare;
    for (int d = 0; d < kDigits; ++d) {
      std::size_t* count = at.data() + d * kBuckets;
      if (std::find(count, count + kBuckets, n) != count + kBuckets) continue;
      std::size_t sum = 0;
      for (std::size_t k = 0; k < kBuckets; ++k) {
        const std::size_t c = count[k];
        count[k] = sum;
        sum += c;
      }
      const int shift = 16 * d;
      for (std::size_t i = 0; i < n; ++i) b[count[(a[i] >> shift) & 0xffff]++] = a[i];
      std::swap(a, b);
    }
    if (a != bits_.data() + unique_) std::copy(a, a + n, bits_.data() + unique_);
  }

  OpSpec op_;
  DType dtype_;
  int wire_;
  std::string_view name_;
  std::vector<Id<T>> bits_;  // the values' identities (IdOf): sorted and distinct up to unique_, then appended
  std::size_t unique_ = 0;
};

}  // namespace distinct_detail

}  // namespace tally::rules::agg
