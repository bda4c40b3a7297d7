#include "server/engine/grouping/combined_keys.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "tally/rules/dtype.h"

namespace tally::grouping {

bool CombinableKeys(const GroupByPlan& plan) {
  return plan.keys.size() >= 2 && plan.sort && std::all_of(plan.keys.begin(), plan.keys.end(), [&](std::size_t k) {
           const GroupColumn& c = plan.columns[k];
           return c.validity == nullptr && !rules::IsFloat(c.dtype);
         });
}

namespace {

// f(i, key) for each key of a host key column, the key as a 64-bit integer
// (sign-extended for signed dtypes, 0 or 1 for bool), and whether the
// dtype is signed (how its keys compare).
template <typename F>
void ForEachKey(const GroupColumn& c, std::uint64_t rows, F&& f) {
  const bool boolean = c.dtype == DType::kBool;  // stored as a byte; any nonzero byte is true, as on the device
  rules::VisitDType(c.dtype, [&](auto d) {
    using T = typename rules::Traits<decltype(d)::value>::value;
    if constexpr (std::is_integral_v<T>) {
      const auto* keys = reinterpret_cast<const T*>(c.data.data());
      for (std::uint64_t i = 0; i < rows; ++i) {
        if constexpr (std::is_signed_v<T>) {
          f(i, static_cast<std::uint64_t>(static_cast<std::int64_t>(keys[i])));
        } else {
          f(i, boolean ? std::uint64_t{keys[i] != 0} : static_cast<std::uint64_t>(keys[i]));
        }
      }
    }
  });
}

}  // namespace

bool CombineKeysOnHost(const GroupByPlan& plan, std::vector<std::uint64_t>& combined,
                       std::vector<std::uint64_t>& lowest, std::vector<std::uint64_t>& range) {
  const std::size_t columns = plan.keys.size();
  if (plan.rows == 0) return false;
  std::vector<std::uint64_t> lo(columns), span(columns);
  unsigned __int128 product = 1;
  for (std::size_t c = 0; c < columns; ++c) {
    const GroupColumn& column = plan.columns[plan.keys[c]];
    // Extremes compared as the dtype orders its keys: as signed numbers
    // with the sign bit flipped to compare unsigned.
    const std::uint64_t flip = rules::IsSigned(column.dtype) ? std::uint64_t{1} << 63 : 0;
    std::uint64_t least = ~std::uint64_t{0}, most = 0;
    ForEachKey(column, plan.rows, [&](std::uint64_t, std::uint64_t k) {
      least = std::min(least, k ^ flip);
      most = std::max(most, k ^ flip);
    });
    lo[c] = least ^ flip;
    span[c] = most - least + 1;  // 0 for 2^64: then past the limit below
    product *= span[c] == 0 ? (static_cast<unsigned __int128>(1) << 64) : span[c];
    if (product > kMaxCombinedRange) return false;
  }
  combined.resize(plan.rows);
  std::uint64_t stride = 1;
  for (std::size_t c = columns; c-- > 0;) {
    const bool first = c + 1 == columns;  // the last column writes, the others add
    ForEachKey(plan.columns[plan.keys[c]], plan.rows, [&](std::uint64_t i, std::uint64_t k) {
      combined[i] = (first ? 0 : combined[i]) + (k - lo[c]) * stride;
    });
    stride *= span[c];
  }
  lowest = std::move(lo);
  range = std::move(span);
  return true;
}

GroupByPlan WithCombinedKey(const GroupByPlan& plan, const Extent& combined) {
  GroupByPlan one = plan;
  one.columns.push_back(GroupColumn{
      .name = "combined key", .dtype = DType::kUInt64, .data = combined.bytes, .placement = combined.placement});
  one.keys = {one.columns.size() - 1};
  return one;
}

void SplitCombinedKeys(const GroupByPlan& plan, std::span<const std::uint64_t> lowest,
                       std::span<const std::uint64_t> range, GroupedResult& result) {
  const std::size_t columns = plan.keys.size();
  const std::vector<std::byte>& combined = result.keys[0].data;
  const std::uint64_t groups = combined.size() / sizeof(std::uint64_t);
  std::vector<KeyValues> out(columns);
  for (std::size_t c = 0; c < columns; ++c) {
    out[c].dtype = plan.columns[plan.keys[c]].dtype;
    out[c].data.resize(groups * rules::SizeOf(out[c].dtype));
  }
  for (std::uint64_t g = 0; g < groups; ++g) {
    std::uint64_t rest = 0;
    std::memcpy(&rest, combined.data() + g * sizeof rest, sizeof rest);
    // The last column is the least significant digit.
    for (std::size_t c = columns; c-- > 0;) {
      const std::uint64_t r = range[c];  // never 0 here: the product fits 2^32
      const std::uint64_t key = lowest[c] + rest % r;
      rest /= r;
      // Little-endian: the key's element bytes are its low bytes (a bool's
      // 0 or 1, a signed key's two's complement truncated).
      const std::size_t size = rules::SizeOf(out[c].dtype);
      std::memcpy(out[c].data.data() + g * size, &key, size);
    }
  }
  result.keys = std::move(out);
}

}  // namespace tally::grouping
