#include "tally/client/group_by.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tally/client/wire.h"

namespace tally::client {
namespace {

bool Bit(const std::string& bits, std::uint64_t i) {
  return (static_cast<unsigned char>(bits[i / 8]) >> (i % 8)) & 1u;
}

// `bits` (for `have` groups, all present when empty) followed by `more`'s
// bits for `added` groups.
std::string AppendBits(const std::string& bits, std::uint64_t have, const std::string& more, std::uint64_t added) {
  std::string out((have + added + 7) / 8, '\0');
  for (std::uint64_t i = 0; i < have + added; ++i) {
    const bool present = i < have ? (bits.empty() || Bit(bits, i)) : (more.empty() || Bit(more, i - have));
    if (present) out[i / 8] = static_cast<char>(out[i / 8] | (1 << (i % 8)));
  }
  return out;
}

}  // namespace

std::uint64_t InlineColumnBytes(const v1::GroupByRequest& request) {
  std::uint64_t bytes = 0;
  for (const v1::Column& c : request.columns()) bytes += c.data().size() + c.validity().size();
  return bytes;
}

absl::StatusOr<v1::GroupByStreamRequest> GroupByStreamHeader(const v1::GroupByRequest& request) {
  v1::GroupByStreamRequest out;
  v1::GroupByStreamRequest::Header& header = *out.mutable_header();
  v1::GroupByRequest& bare = *header.mutable_request();
  bare = request;
  std::optional<int> first;
  for (int i = 0; i < bare.columns_size(); ++i) {
    v1::Column& c = *bare.mutable_columns(i);
    if (!c.dataset().empty() || c.has_region()) continue;
    const std::optional<rules::DType> dtype = FromWire(c.dtype());
    // An unknown dtype is the server's to name.
    const std::uint64_t rows = dtype ? c.data().size() / rules::SizeOf(*dtype) : 0;
    if (!first) {
      first = i;
      header.set_rows(rows);
    } else if (dtype && rows != header.rows()) {
      return absl::InvalidArgumentError(absl::StrCat("columns[", i, "] '", c.name(), "': ", rows,
                                                     " rows, but columns[", *first, "] '",
                                                     request.columns(*first).name(), "' has ", header.rows(),
                                                     "; every column must have the same length."));
    }
    if (!c.validity().empty()) header.add_masked_columns(static_cast<std::uint32_t>(i));
    c.clear_data();
    c.clear_validity();
  }
  return out;
}

v1::Column ColumnOf(const std::string& name, const ArrayRef& array) {
  v1::Column c;
  c.set_name(name);
  c.set_dtype(ToWire(array.dtype));
  c.set_data(reinterpret_cast<const char*>(array.data), array.size_bytes());
  if (!array.validity.empty()) {
    c.set_validity(reinterpret_cast<const char*>(array.validity.data()), array.validity.size());
  }
  return c;
}

std::uint64_t PageGroups(const v1::GroupByResponse& page) {
  if (page.keys_size() == 0) return page.groups() == 0 ? 0 : 1;  // no key: one group at most
  const std::optional<rules::DType> dtype = FromWire(page.keys(0).dtype());
  return dtype ? page.keys(0).data().size() / rules::SizeOf(*dtype) : 0;
}

absl::Status MergeGroupPage(v1::GroupByResponse& into, v1::GroupByResponse page) {
  if (into.keys_size() == 0 && into.results_size() == 0) {
    into = std::move(page);
    return absl::OkStatus();
  }
  const std::uint64_t have = into.first_group() + PageGroups(into);
  if (page.first_group() != have || page.keys_size() != into.keys_size() ||
      page.results_size() != into.results_size()) {
    return absl::InvalidArgumentError(absl::StrCat("GroupBy: a page of groups from ", page.first_group(),
                                                   " does not follow the ", have, " groups received"));
  }
  const std::uint64_t added = PageGroups(page);
  for (int k = 0; k < page.keys_size(); ++k) {
    v1::Column* key = into.mutable_keys(k);
    const v1::Column& more = page.keys(k);
    if (!key->validity().empty() || !more.validity().empty()) {
      key->set_validity(AppendBits(key->validity(), have, more.validity(), added));
    }
    key->mutable_data()->append(more.data());
  }
  for (int r = 0; r < page.results_size(); ++r) {
    v1::AggregationResult* result = page.mutable_results(r);
    result->clear_aggregation();  // its repeated fields (q) would be appended twice
    into.mutable_results(r)->MergeFrom(*result);
  }
  if (page.has_execution()) *into.mutable_execution() = page.execution();
  return absl::OkStatus();
}

}  // namespace tally::client
