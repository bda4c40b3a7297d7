// GroupBy from C++: the request from named columns, and the answer's
// messages (each a page of groups) merged into one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tally/client/array.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

// A column of a group-by table: its name and its elements (and validity,
// when the array has one). Copies the bytes into the message.
v1::Column ColumnOf(const std::string& name, const ArrayRef& array);

// Bytes the request carries in its columns (data and validity), which
// decide whether Client::GroupBy streams them.
std::uint64_t InlineColumnBytes(const v1::GroupByRequest& request);

// GroupByStream's header for `request`: the request without its inline
// columns' bytes (those with neither a dataset nor a region: the streamed
// ones), their rows, and which of them send validity. INVALID_ARGUMENT
// naming the columns when two streamed ones differ in length.
[[nodiscard]] absl::StatusOr<v1::GroupByStreamRequest> GroupByStreamHeader(const v1::GroupByRequest& request);

// Groups in one page: the first key column's elements (no key column: the
// one group, if any).
std::uint64_t PageGroups(const v1::GroupByResponse& page);

// Appends `page`'s groups to `into` (the first page is taken whole): key
// bytes and validity bits concatenated, each aggregation's values appended.
// INVALID_ARGUMENT when the page does not follow `into`.
[[nodiscard]] absl::Status MergeGroupPage(v1::GroupByResponse& into, v1::GroupByResponse page);

}  // namespace tally::client
