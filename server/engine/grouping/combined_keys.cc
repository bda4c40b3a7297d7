#include "server/engine/grouping/combined_keys.h"

#include <algorithm>
#include <cstring>

#include "tally/rules/dtype.h"

namespace tally::grouping {

bool CombinableKeys(const GroupByPlan& plan) {
  return plan.keys.size() >= 2 && plan.sort && std::all_of(plan.keys.begin(), plan.keys.end(), [&](std::size_t k) {
           const GroupColumn& c = plan.columns[k];
           return c.validity == nullptr && !rules::IsFloat(c.dtype);
         });
}

std::vector<KeyValues> SplitCombinedKeys(const KeyValues& combined, const CombinedKeyColumn& how,
                                         std::span<const DType> dtypes) {
  const std::size_t columns = dtypes.size();
  const std::uint64_t groups = combined.data.size() / sizeof(std::uint64_t);
  std::vector<KeyValues> out(columns);
  for (std::size_t c = 0; c < columns; ++c) {
    out[c].dtype = dtypes[c];
    out[c].data.resize(groups * rules::SizeOf(dtypes[c]));
  }
  for (std::uint64_t g = 0; g < groups; ++g) {
    std::uint64_t rest = 0;
    std::memcpy(&rest, combined.data.data() + g * sizeof rest, sizeof rest);
    // The last column is the least significant digit.
    for (std::size_t c = columns; c-- > 0;) {
      const std::uint64_t range = how.range[c];  // never 0 here: the product fits 2^32
      const std::uint64_t key = how.lowest[c] + rest % range;
      rest /= range;
      // Little-endian: the key's element bytes are its low bytes (a bool's
      // 0 or 1, a signed key's two's complement truncated).
      const std::size_t size = rules::SizeOf(dtypes[c]);
      std::memcpy(out[c].data.data() + g * size, &key, size);
    }
  }
  return out;
}

}  // namespace tally::grouping
