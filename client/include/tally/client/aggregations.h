// The --ops mini-language: "sum,min,var:1,hist:256:-1:1" -> Aggregations.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

// Comma-separated tokens, each NAME or NAME:ARGS:
//   sum  min  max  minmax  mean  count  argmin  argmax
//   sum_squares | sumsq
//   variance | var [:DDOF]      DDOF finite, >= 0 (default 0)
//   stddev   | std [:DDOF]
//   histogram | hist :BINS:LO:HI   1 <= BINS <= 65536, LO < HI, both finite
//   nansum  nanmean  nanmin  nanmax  nanargmin  nanargmax  nancount
//   nanvar [:DDOF]  nanstd [:DDOF]
//   prod | product  count_nonzero | nnz  any  all  ptp
// Spaces around tokens are ignored. An error names the offending token.
[[nodiscard]] absl::StatusOr<std::vector<v1::Aggregation>> ParseAggregations(absl::string_view text);

// A short label for an aggregation: "sum", "variance(ddof=1)",
// "histogram(bins=256, lo=-1, hi=1)".
std::string AggregationLabel(const v1::Aggregation& aggregation);

// The op's canonical name as in tally/rules/op.h ("sum_squares"), or
// "unknown(N)" for an op this client does not know.
std::string OpName(v1::Op op);

}  // namespace tally::client
