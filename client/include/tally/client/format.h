// Turning an AggregateResponse into text for people or JSON for programs.
#pragma once

#include <optional>
#include <string>

#include "tally/v1/tally.pb.h"

namespace tally::client {

struct FormatOptions {
  // Text: every row and every histogram count, not a summary.
  bool full = false;
  // Text: rows shown before "... (N more)" when not `full`.
  int max_rows = 6;
  // Text: histograms with at most this many bins show their counts.
  int max_bins_shown = 16;
  // Client-side facts added to "execution" when known.
  std::optional<double> client_seconds;
  std::optional<std::string> transport;  // "unary" or "stream"
};

// One line per aggregation ("sum = 12.5"; rows as "[1, 2, 3, ... (997 more)]";
// histograms summarised: bins, range, total in range, below/above/nan), then
// an execution line. Ends with a newline.
std::string FormatText(const v1::AggregateResponse& response, const FormatOptions& options = {});

// JSON, one object, schema (stable; fields are only ever added):
//   {"results": [
//      {"op": "sum", "type": "float64"|"int64"|"uint64", "values": [..]},
//      {"op": "variance", "ddof": 1, "type": "float64", "values": [..]},
//      {"op": "histogram", "bins": 256, "lo": -1, "hi": 1,
//       "histograms": [{"counts": [..], "below": 0, "above": 0, "nan": 0}]}],
//    "execution": {"elements": N, "bytes": N, "rows": N, "backend": "cpu",
//                  "device": "...", "server_seconds": 0.01,
//                  "client_seconds": 0.02, "transport": "unary"}}
// "op" is the name from tally/ops/op.h. "values" and "histograms" hold one
// entry per row (one for an unsegmented array). "ddof" appears for variance
// and stddev only; client_seconds and transport only when known.
// Integers (int64, uint64, counts) are printed exactly as JSON integers.
// Floats use the shortest text that reads back to the same double;
// NaN, +inf and -inf, which JSON lacks, are the strings "nan", "inf", "-inf".
// Histogram counts are always complete. Ends with a newline.
std::string FormatJson(const v1::AggregateResponse& response, const FormatOptions& options = {});

}  // namespace tally::client
