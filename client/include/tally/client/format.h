// Turning an AggregateResponse, and what the server says about its resident
// datasets, into text for people or JSON for programs.
#pragma once

#include <optional>
#include <string>

#include "absl/time/time.h"
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
  std::optional<std::string> transport;  // "unary", "stream", "dataset" or "shm"
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
// ("transport" is "dataset" for a query of a resident dataset, "shm" for a
// shared-memory region.)
// "op" is the name from tally/rules/op.h. "values" and "histograms" hold one
// entry per row (one for an unsegmented array; minmax: two per row, min
// then max). "ddof" appears for variance, stddev, nanvar and nanstd only;
// client_seconds and transport only when known.
// Integers (int64, uint64, counts) are printed exactly as JSON integers.
// Floats use the shortest text that reads back to the same double;
// NaN, +inf and -inf, which JSON lacks, are the strings "nan", "inf", "-inf".
// Histogram counts are always complete. Ends with a newline.
std::string FormatJson(const v1::AggregateResponse& response, const FormatOptions& options = {});

// One dataset on one line, e.g. "temps: float32, 1000000 elements (3.81 MiB)
// on cuda:0, version 7, expires in 9m59s, 12 queries". The time left is
// taken against `now` (the client's clock). No newline.
std::string FormatDatasetText(const v1::DatasetInfo& dataset, absl::Time now);

// ListDatasets as two tables: the datasets (name, dtype, length, bytes,
// place, version, expiry, queries), then each place's datasets, bytes and
// limit. Ends with a newline.
std::string FormatDatasetsText(const v1::ListDatasetsResponse& list, absl::Time now);

// One dataset as a JSON object, no newline. Schema (fields only ever added):
//   {"name": "temps", "dtype": "float32", "length": N, "bytes": N,
//    "place": "cuda:0", "version": N, "created_unix_seconds": S,
//    "expires_unix_seconds": S, "queries": N, "shards": N}
// expires_unix_seconds is 0 for a dataset without a TTL; shards is at
// least 1.
std::string DatasetJson(const v1::DatasetInfo& dataset);

// ListDatasets as JSON: {"datasets": [DatasetJson, ...],
//   "places": [{"place": "host", "datasets": N, "bytes": N, "limit_bytes": N}]}
// limit_bytes 0 means no limit. Ends with a newline.
std::string FormatDatasetsJson(const v1::ListDatasetsResponse& list);

}  // namespace tally::client
