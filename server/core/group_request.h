// A validated group-by request, independent of the wire format: a table of
// equal-length columns, the key columns, and per value column the plan of
// the aggregations asked of it. The grouping is a property of the plan:
// the engine finds the groups, lays each value column out group after
// group, and runs that column's plan over the groups as segments, through
// the same backends, functions and validity rules as any segmented request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/core/column_facts.h"
#include "server/core/request.h"
#include "server/engine/source.h"

namespace tally {

// Most key columns in one request (GROUP BY a, b, ... h).
inline constexpr std::size_t kMaxKeyColumns = 8;

// More groups than the server's limit (--max_groups), wherever they are
// counted.
inline absl::Status TooManyGroups(std::uint64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat("the keys make more than ", limit,
                                                   " groups (the server's --max_groups)."));
}

struct GroupColumn {
  std::string name;
  DType dtype = DType::kFloat64;
  std::span<const std::byte> data;  // `rows` elements, owned by the request
  Validity validity;                // null: every element is present
  // Where `data` lies: a resident dataset's column may be in GPU memory
  // (never read on the host; the engine groups there, or copies it out).
  Placement placement = Placement::PageableHost();
  // What earlier requests found of this column (a resident dataset's
  // ColumnFacts), and where this one leaves what it finds; null for
  // columns that hold none (inline, regions, copies).
  ColumnFacts* facts = nullptr;
};

// The aggregations asked of one value column, as one plan over the whole
// column (validated; its array's offsets are set per request once the
// groups are known), and where each sits among the request's aggregations.
struct ColumnAggregations {
  std::size_t column = 0;
  AggregationPlan plan;
  std::vector<std::size_t> positions;  // plan aggregation i is the request's positions[i]
};

struct GroupByPlan {
  std::uint64_t rows = 0;
  std::vector<GroupColumn> columns;
  std::vector<std::size_t> keys;  // indices into columns; empty: one group of every row
  std::vector<ColumnAggregations> values;
  std::size_t aggregations = 0;   // in the request, over every column
  bool sort = true;               // pandas' sort=True: ascending keys; false: first-seen order
  bool dropna = true;             // pandas' dropna=True: rows with an NA key are dropped
};

}  // namespace tally
