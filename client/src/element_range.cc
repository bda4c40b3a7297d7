// Parsing --range.
#include "tally/client/element_range.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tally/client/sizes.h"

namespace tally::client {

absl::StatusOr<RangeText> ParseElementRange(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad range \"", text, "\": ", why, " (e.g. 0:1000, 1M:2M, 4096:)"));
  };
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  const size_t colon = s.find(':');
  if (colon == absl::string_view::npos) return bad("expected BEGIN:END");
  const absl::string_view first = absl::StripAsciiWhitespace(s.substr(0, colon));
  const absl::string_view second = absl::StripAsciiWhitespace(s.substr(colon + 1));
  if (second.find(':') != absl::string_view::npos) return bad("steps are not supported");
  if (first.empty() && second.empty()) return bad("give BEGIN, END or both");
  // ParseSize's own message names the bad part; a minus sign reaches it as
  // "expected a number", which is unhelpful for the likely Python habit.
  if (absl::StartsWith(first, "-") || absl::StartsWith(second, "-")) {
    return bad("indices count from 0; negative indices are not supported");
  }
  RangeText range;
  if (!first.empty()) {
    absl::StatusOr<std::uint64_t> begin = ParseSize(first);
    if (!begin.ok()) return bad(begin.status().message());
    range.begin = *begin;
  }
  if (!second.empty()) {
    absl::StatusOr<std::uint64_t> end = ParseSize(second);
    if (!end.ok()) return bad(end.status().message());
    if (*end < range.begin) return bad("BEGIN is after END");
    range.end = *end;
  }
  return range;
}

}  // namespace tally::client
