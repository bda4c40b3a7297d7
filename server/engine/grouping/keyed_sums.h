// Group-by's direct pass on the host: sum, count and extremes of a float
// column per integer key, for keys in a small range, in one read of keys
// and values after a pass for the range, on the backend's host threads. The same
// integer arithmetic as the GPU's direct pass (tally/rules/keyed_sums.h),
// so the answers are bitwise the GPU's and do not depend on the number of
// threads or how the rows are split between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "server/core/request.h"
#include "server/engine/device_grouping.h"

namespace tally::cpu {
class ThreadPool;
}

namespace tally::grouping {

// The widest key range the host's direct pass keeps slots for: 65,536
// slots of one 64-byte line, 4 MiB per thread.
inline constexpr std::uint64_t kMaxHostDirectRange = 65536;

// Sums, counts, NaN counts, infinities and extremes per key of `values`
// (float32 or float64) keyed by `keys` (an integer dtype or bool), `rows`
// of each, in ascending key order; nullopt when the keys span more than
// `max_range` values, or for dtypes or sizes the pass does not take (the
// caller takes another path). Runs on the participants of `workers` that
// are idle (every request shares them: a backend's HostWorkers()), or on
// this thread alone when it is null.
std::optional<KeyedSums> SumByKeyOnHost(std::span<const std::byte> keys, DType key_dtype,
                                        std::span<const std::byte> values, DType dtype, std::uint64_t rows,
                                        std::uint64_t max_range, cpu::ThreadPool* workers);

}  // namespace tally::grouping
