// Group-by's direct pass on the host: sum, count and extremes of a float
// column per integer key, for keys in a small range, in one read of keys
// and values after a pass for the range, on the backend's host threads. The same
// integer arithmetic as the GPU's direct pass (tally/rules/keyed_sums.h),
// so the answers are bitwise the GPU's and do not depend on the number of
// threads or how the rows are split between them. Wider ranges take the
// same arithmetic over the rows partitioned by key (keyed_partitions.h).
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
// slots of 32 bytes (float32 values), 2 MiB per thread.
inline constexpr std::uint64_t kMaxHostDirectRange = 65536;

// The widest key range the partitioned pass takes (keyed_partitions.h):
// 2^24 slots, 512 MiB for float32 values, and no more than fit the
// memory admission counts for the rows (PartitionPolicy::kMostBytesPerRow:
// 3/8 of the rows for float32 values, 1/16 for float64).
inline constexpr std::uint64_t kMaxHostExactRange = std::uint64_t{1} << 24;

// Sums, counts, NaN counts, infinities and extremes per key of `values`
// (float32 or float64) keyed by `keys` (an integer dtype or bool), `rows`
// of each, in ascending key order; nullopt for dtypes or sizes the passes
// do not take (the caller takes another path). Runs on the participants
// of `workers` that are idle (every request shares them: a backend's
// HostWorkers()), or on this thread alone when it is null.
//
// Keys spanning at most `max_range` values take the direct pass, whose
// answers are the GPU direct pass's bits. Keys spanning more, up to
// `max_exact_range` (and the bound above), take the partitioned pass,
// whose answers are the general path's bits (exact sums, extremes that keep
// a zero's sign): nullopt where it cannot give them (an element whose
// fixed-point value is rounded, a key whose extreme is a zero and which
// holds zeros of both signs), and for wider keys.
std::optional<KeyedSums> SumByKeyOnHost(std::span<const std::byte> keys, DType key_dtype,
                                        std::span<const std::byte> values, DType dtype, std::uint64_t rows,
                                        std::uint64_t max_range, cpu::ThreadPool* workers,
                                        std::uint64_t max_exact_range = 0);

}  // namespace tally::grouping
