#include "server/engine/grouping/keyed_sums.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "server/engine/cpu/thread_pool.h"
#include "tally/rules/dtype.h"
#include "tally/rules/keyed_sums.h"

namespace tally::grouping {
namespace {

namespace keyed = rules::keyed;

// A key's slot: one cache line, so that an element updates one line and
// two threads' slots never share one (with seven arrays of 16 slots each,
// the threads' arrays sat side by side in the same lines and each update
// waited on the other core: 12 ns a row on two threads). The fixed-point
// sum is one 128-bit integer here, where the GPU adds a high and a low
// word with 64-bit atomics: the same exact total (FixedSum reads either
// split of it), in fewer instructions. The extremes as doubles with -0.0
// read as +0.0: what the GPU's order-preserving integers give.
struct alignas(64) Slot {
  __int128 sum = 0;
  std::uint64_t count = 0, nan = 0;
  double low = std::numeric_limits<double>::infinity(), high = -std::numeric_limits<double>::infinity();
  std::uint8_t infinities = 0;  // bit 0: +inf seen, bit 1: -inf seen

  void Add(const Slot& o) {
    sum += o.sum;
    count += o.count;
    nan += o.nan;
    low = std::min(low, o.low);
    high = std::max(high, o.high);
    infinities |= o.infinities;
  }
};
using Slots = std::vector<Slot>;  // a thread's, one per key of the range

// A bool key's byte: any nonzero byte is True (as the GPU reads it).
struct BoolByte {
  std::uint8_t byte;
};

template <typename K>
std::uint64_t Ordered(K k) {
  if constexpr (std::is_same_v<K, BoolByte>) {
    return k.byte != 0 ? 1 : 0;
  } else {
    return keyed::OrderedKey(k);
  }
}

// Rows [begin, end): the smallest and largest ordered key, and the bits of
// the largest finite |value|.
struct Extremes {
  std::uint64_t lo = ~std::uint64_t{0}, hi = 0, magnitude = 0;
};
template <typename K, typename V>
Extremes RangeAndMagnitude(const K* keys, const V* values, std::uint64_t begin, std::uint64_t end) {
  Extremes e;
  for (std::uint64_t i = begin; i < end; ++i) {
    const std::uint64_t k = Ordered(keys[i]);
    e.lo = std::min(e.lo, k);
    e.hi = std::max(e.hi, k);
    const double v = std::fabs(static_cast<double>(values[i]));
    if (std::isfinite(v)) {
      std::uint64_t b;
      std::memcpy(&b, &v, 8);
      e.magnitude = std::max(e.magnitude, b);
    }
  }
  return e;
}

// Rows [begin, end) into `slots`, as the GPU's AddTo adds them.
template <typename K, typename V>
void Accumulate(const K* keys, const V* values, std::uint64_t begin, std::uint64_t end, std::uint64_t base,
                int scale, Slots& slots) {
  Slot* const s = slots.data();
  for (std::uint64_t i = begin; i < end; ++i) {
    Slot& slot = s[Ordered(keys[i]) - base];
    double v = static_cast<double>(values[i]);
    ++slot.count;
    if (std::isnan(v)) {
      ++slot.nan;
      continue;
    }
    if (std::isinf(v)) {
      slot.infinities |= v > 0 ? 1 : 2;
    } else {
      slot.sum += keyed::ToFixed128(v, scale);
    }
    if (v == 0) v = 0.0;
    slot.low = std::min(slot.low, v);
    slot.high = std::max(slot.high, v);
  }
}

// Rows a part holds at least: below that, handing parts out costs more
// than it saves.
constexpr std::uint64_t kRowsPerPart = std::uint64_t{1} << 20;

template <typename K, typename V>
std::optional<KeyedSums> Sum(const K* keys, const V* values, std::uint64_t rows, std::uint64_t max_range,
                             cpu::ThreadPool* workers, bool signed_key) {
  const int participants = workers != nullptr ? workers->participants() : 1;
  const std::size_t parts = cpu::RowParts(workers, rows, kRowsPerPart);
  std::vector<Extremes> extremes(parts);
  cpu::ForRowParts(workers, rows, parts, [&](std::size_t p, int, std::uint64_t b, std::uint64_t e) {
    extremes[p] = RangeAndMagnitude(keys, values, b, e);
  });
  Extremes all;
  for (const Extremes& e : extremes) {
    all.lo = std::min(all.lo, e.lo);
    all.hi = std::max(all.hi, e.hi);
    all.magnitude = std::max(all.magnitude, e.magnitude);
  }
  const std::uint64_t range = all.hi - all.lo + 1;
  if (range == 0 || range > max_range) return std::nullopt;
  const int scale = keyed::FixedScale(all.magnitude, rows);
  // A participant's slots, made by the first part it takes (on its thread);
  // every sum is an integer one, so which rows each holds changes no bit.
  std::vector<Slots> slots(static_cast<std::size_t>(participants));
  cpu::ForRowParts(workers, rows, parts, [&](std::size_t, int slot, std::uint64_t b, std::uint64_t e) {
    Slots& mine = slots[static_cast<std::size_t>(slot)];
    if (mine.empty()) mine.resize(range);
    Accumulate(keys, values, b, e, all.lo, scale, mine);
  });
  // Into the first participant's slots that took a part.
  const auto first = std::find_if(slots.begin(), slots.end(), [](const Slots& p) { return !p.empty(); });
  Slots& total = *first;
  for (auto other = first + 1; other != slots.end(); ++other) {
    if (other->empty()) continue;
    for (std::uint64_t j = 0; j < range; ++j) total[j].Add((*other)[j]);
  }
  KeyedSums out;
  for (std::uint64_t j = 0; j < range; ++j) {
    const Slot& s = total[j];
    if (s.count == 0) continue;
    std::uint64_t key = all.lo + j;
    if (signed_key) key ^= std::uint64_t{1} << 63;  // back from the ordered form
    out.keys.push_back(key);
    out.count.push_back(s.count);
    out.nan.push_back(s.nan);
    out.infinities.push_back(s.infinities);
    // The finite elements' sum, from the words the GPU keeps.
    out.sum.push_back(keyed::FixedSum(static_cast<std::uint64_t>(static_cast<std::int64_t>(s.sum >> 32)),
                                      static_cast<std::uint64_t>(s.sum) & 0xffffffffull, scale));
    // A key of only NaN: the GPU's untouched extremes.
    const bool some = s.count > s.nan;
    out.min.push_back(some ? s.low : keyed::FromOrdered(keyed::kNoLow));
    out.max.push_back(some ? s.high : keyed::FromOrdered(keyed::kNoHigh));
  }
  out.groups = out.keys.size();
  return out;
}

template <typename V>
std::optional<KeyedSums> WithKeys(const void* keys, DType key_dtype, const V* values, std::uint64_t rows,
                                  std::uint64_t max_range, cpu::ThreadPool* workers) {
  switch (key_dtype) {
    case DType::kBool: return Sum(static_cast<const BoolByte*>(keys), values, rows, max_range, workers, false);
    case DType::kInt8: return Sum(static_cast<const std::int8_t*>(keys), values, rows, max_range, workers, true);
    case DType::kInt16: return Sum(static_cast<const std::int16_t*>(keys), values, rows, max_range, workers, true);
    case DType::kInt32: return Sum(static_cast<const std::int32_t*>(keys), values, rows, max_range, workers, true);
    case DType::kInt64: return Sum(static_cast<const std::int64_t*>(keys), values, rows, max_range, workers, true);
    case DType::kUInt8: return Sum(static_cast<const std::uint8_t*>(keys), values, rows, max_range, workers, false);
    case DType::kUInt16: return Sum(static_cast<const std::uint16_t*>(keys), values, rows, max_range, workers, false);
    case DType::kUInt32: return Sum(static_cast<const std::uint32_t*>(keys), values, rows, max_range, workers, false);
    case DType::kUInt64: return Sum(static_cast<const std::uint64_t*>(keys), values, rows, max_range, workers, false);
    default: return std::nullopt;  // float keys: NaN, -0.0 and 0.0 take the general path
  }
}

}  // namespace

std::optional<KeyedSums> SumByKeyOnHost(std::span<const std::byte> keys, DType key_dtype,
                                        std::span<const std::byte> values, DType dtype, std::uint64_t rows,
                                        std::uint64_t max_range, cpu::ThreadPool* workers) {
  // The fixed-point words hold up to 2^31 rows (as on the GPU).
  if (rows == 0 || rows >= (std::uint64_t{1} << 31)) return std::nullopt;
  if (keys.size() < rows * rules::SizeOf(key_dtype) || values.size() < rows * rules::SizeOf(dtype)) return std::nullopt;
  switch (dtype) {
    case DType::kFloat32:
      return WithKeys(keys.data(), key_dtype, reinterpret_cast<const float*>(values.data()), rows, max_range, workers);
    case DType::kFloat64:
      return WithKeys(keys.data(), key_dtype, reinterpret_cast<const double*>(values.data()), rows, max_range, workers);
    default: return std::nullopt;
  }
}

}  // namespace tally::grouping
