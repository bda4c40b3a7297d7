// Checks a request against the wire contract's rules and the server's
// limits, before any backend sees it. Every error is INVALID_ARGUMENT (or
// RESOURCE_EXHAUSTED for size limits) with a sentence naming the field.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "server/core/request.h"

namespace tally {

struct RequestLimits {
  // Most aggregations in one request.
  std::uint32_t max_aggregations = 64;
  // Most result values in one response (rows x values per row, a histogram
  // counting its bins): bounds the response and the per-row state.
  std::uint64_t max_result_values = std::uint64_t{1} << 24;
};

// Values a partial state takes beyond its op's value, for the result-size
// limit: at most count, mean and m2, or count, extreme and index.
inline constexpr std::uint64_t kPartialStateExtraValues = 3;

// Values one row's results take in a response, for the result-size limit.
std::uint64_t ResultValuesPerRow(const AggregationPlan& plan);

// Bytes a request's results hold on the server while it runs: every value
// as computed and again serialized in the response, 8 bytes each. A 1 KiB
// request may ask for 2^24 values (256 MiB), so the results, not the
// request, are what its memory is.
std::uint64_t ResultBytes(const AggregationPlan& plan);

// numpy 2's rule for histogram ranges: the bin edges, numpy.linspace(lo, hi,
// bins + 1) in the edge dtype (float32 for float32 input, float64 otherwise),
// must be strictly increasing; numpy.histogram raises "Too many bins for data
// range" when they are not. Takes a spec whose other checks have passed
// (1 to 65536 bins, finite lo < hi, finite hi - lo).
bool HistogramEdgesIncrease(const HistogramSpec& h, DType dtype);

// Checks ops, histogram specs, ddof, row length and result size. The array's
// byte length is checked by the front end, which sees the bytes.
[[nodiscard]] absl::Status ValidatePlan(const AggregationPlan& plan, const RequestLimits& limits);

}  // namespace tally
