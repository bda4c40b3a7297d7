// The --ops mini-language: "sum,min,var:1,hist:256:-1:1" -> Aggregations.
#pragma once

#include <cstddef>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

// Comma-separated tokens, each NAME or NAME:ARGS, NAME being any spelling
// of a function in the registry of aggregate functions (tally/rules/agg;
// any case) and ARGS its parameters in order (var:1, hist:256:-1:1),
// checked by the registry's rules (DDOF finite and >= 0, 1 <= BINS <= 65536,
// LO < HI, both finite). Spaces around tokens are ignored. An error names
// the offending token.
[[nodiscard]] absl::StatusOr<std::vector<v1::Aggregation>> ParseAggregations(absl::string_view text);

// A short label for an aggregation: "sum", "variance(ddof=1)",
// "histogram(bins=256, lo=-1, hi=1)".
std::string AggregationLabel(const v1::Aggregation& aggregation);

// The op's canonical name in the registry of aggregate functions
// (tally/rules/agg: "sum_squares"), or "unknown(N)" for an op this client
// does not know.
std::string OpName(v1::Op op);

// Whether two aggregations are the same question: the same op and the
// same values of the parameters its function takes (a NaN-skipping
// function's ddof as its plain one's); the partial request and base
// index aside.
bool SameAggregation(const v1::Aggregation& a, const v1::Aggregation& b);

// The ops and their syntax for --help, from the registry: one group of
// lines for the ops the GPU kernels run, one for the NaN-skipping ones, one
// for those that run on the CPU only; each line starts with `indent`
// spaces and stays within `width` columns where the words allow.
std::string OpsHelp(std::size_t indent, std::size_t width);

}  // namespace tally::client
