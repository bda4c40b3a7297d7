#include "server/engine/grouping/keyed_sums.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "server/engine/cpu/thread_pool.h"
#include "server/engine/grouping/keyed_partitions.h"
#include "server/engine/grouping/keyed_slots.h"
#include "tally/rules/dtype.h"
#include "tally/rules/keyed_sums.h"

namespace tally::grouping {
namespace {

namespace keyed = rules::keyed;
using keyed_host::Accumulate;
using keyed_host::BoolByte;
using keyed_host::Extremes;
using keyed_host::KeyedValue;
using keyed_host::Ordered;
using keyed_host::Slot;
using keyed_host::Table;

// A participant's slots for the direct pass, one per key of the range,
// made on its thread by the first part it takes. A line of spare slots at
// either end, so that two participants' slots never share a cache line
// (when they did, each update waited on the other core: 12 ns a row on
// two threads at 16 keys).
template <typename V>
struct OwnSlots {
  static constexpr std::uint64_t kPad = 64 / sizeof(Slot<V>) + 1;
  std::vector<Slot<V>> storage;
  std::vector<std::uint8_t> marks;  // infinities

  bool empty() const { return storage.empty(); }
  void Make(std::uint64_t range, bool infinity) {
    storage.resize(range + 2 * kPad);
    if (infinity) marks.assign(range, 0);
  }
  Table<V> table() { return {storage.data() + kPad, marks.empty() ? nullptr : marks.data()}; }
};

template <typename K, typename V>
std::optional<KeyedSums> Sum(const K* keys, const V* values, std::uint64_t rows, std::uint64_t max_range,
                             std::uint64_t max_exact_range, cpu::ThreadPool* workers, bool signed_key) {
  const int participants = workers != nullptr ? workers->participants() : 1;
  const std::size_t parts = cpu::RowParts(workers, rows, keyed_host::kRowsPerPart);
  std::vector<Extremes> extremes(parts);
  cpu::ForRowParts(workers, rows, parts, [&](std::size_t p, int, std::uint64_t b, std::uint64_t e) {
    extremes[p] = keyed_host::RangeAndMagnitude(keys, values, b, e);
  });
  Extremes all;
  for (const Extremes& e : extremes) all.Add(e);
  const std::uint64_t range = all.hi - all.lo + 1;
  if (range == 0) return std::nullopt;
  const int scale = keyed::FixedScale(all.magnitude, rows);
  if (range > max_range) {
    if (range > std::min(max_exact_range, kMaxHostExactRange) || !keyed_host::PartitionsFit<V>(range, rows)) {
      return std::nullopt;
    }
    return keyed_host::SumByPartitions(keys, values, rows, all, scale, signed_key, workers);
  }
  const keyed::FixedUnit unit = keyed::FixedUnit::Of(scale);
  // A participant's slots; every sum is an integer one, so which rows each
  // holds changes no bit.
  std::vector<OwnSlots<V>> slots(static_cast<std::size_t>(participants));
  cpu::ForRowParts(workers, rows, parts, [&](std::size_t, int slot, std::uint64_t b, std::uint64_t e) {
    OwnSlots<V>& mine = slots[static_cast<std::size_t>(slot)];
    if (mine.empty()) mine.Make(range, all.infinity);
    const auto row_at = [&](std::uint64_t i) { return KeyedValue<V>{Ordered(keys[i]) - all.lo, values[i]}; };
    Accumulate<false>(row_at, b, e, unit, mine.table());
  });
  // Into the first participant's slots that took a part.
  const auto first = std::find_if(slots.begin(), slots.end(), [](const OwnSlots<V>& p) { return !p.empty(); });
  const Table<V> total = first->table();
  for (auto other = first + 1; other != slots.end(); ++other) {
    if (!other->empty()) total.Add(other->table(), range);
  }
  KeyedSums out;
  const std::uint64_t groups = keyed_host::GroupsIn(total, range);
  keyed_host::SizeGroups(groups, groups, sizeof(K), all, out);
  (void)keyed_host::WriteGroups<false, K>(total, range, all.lo, signed_key, scale, 0, out);
  return out;
}

template <typename V>
std::optional<KeyedSums> WithKeys(const void* keys, DType key_dtype, const V* values, std::uint64_t rows,
                                  std::uint64_t max_range, std::uint64_t max_exact_range, cpu::ThreadPool* workers) {
  return rules::VisitDType(key_dtype, [&](auto d) -> std::optional<KeyedSums> {
    constexpr DType kD = decltype(d)::value;
    if constexpr (rules::IsFloat(kD)) {
      return std::nullopt;  // float keys: NaN, -0.0 and 0.0 take the general path
    } else {
      using K = std::conditional_t<kD == DType::kBool, BoolByte, typename rules::Traits<kD>::value>;
      return Sum(static_cast<const K*>(keys), values, rows, max_range, max_exact_range, workers, std::is_signed_v<K>);
    }
  });
}

}  // namespace

std::optional<KeyedSums> SumByKeyOnHost(std::span<const std::byte> keys, DType key_dtype,
                                        std::span<const std::byte> values, DType dtype, std::uint64_t rows,
                                        std::uint64_t max_range, cpu::ThreadPool* workers,
                                        std::uint64_t max_exact_range) {
  // The fixed-point words hold up to 2^31 rows (as on the GPU).
  if (rows == 0 || rows >= (std::uint64_t{1} << 31)) return std::nullopt;
  if (keys.size() < rows * rules::SizeOf(key_dtype) || values.size() < rows * rules::SizeOf(dtype)) return std::nullopt;
  switch (dtype) {
    case DType::kFloat32:
      return WithKeys(keys.data(), key_dtype, reinterpret_cast<const float*>(values.data()), rows, max_range,
                      max_exact_range, workers);
    case DType::kFloat64:
      return WithKeys(keys.data(), key_dtype, reinterpret_cast<const double*>(values.data()), rows, max_range,
                      max_exact_range, workers);
    default: return std::nullopt;
  }
}

}  // namespace tally::grouping
