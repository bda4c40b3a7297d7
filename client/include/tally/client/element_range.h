// A range of a dataset's elements, and --range's text for one ("A:B").
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally::client {

// Elements [begin, end) of a dataset.
struct ElementRange {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  std::uint64_t length() const { return end - begin; }
};

// A range as a person writes it, before the dataset's length is known: the
// end may be left open.
struct RangeText {
  std::uint64_t begin = 0;
  std::optional<std::uint64_t> end;  // nullopt: to the end of the dataset

  // The range over a dataset of `length` elements. Does not check that it
  // lies within the dataset: the server does, and says so in its own words.
  ElementRange Resolve(std::uint64_t length) const { return {begin, end.value_or(length)}; }
};

// "A:B" (elements A to B-1, as Python's x[A:B]), "A:" (A to the end), ":B"
// (0 to B-1). A and B are element indices, plain or with a suffix as
// ParseSize reads them (1M is a million, 1Mi 2^20). A must not be larger than B;
// negative indices, steps and anything else are INVALID_ARGUMENT naming the
// text.
[[nodiscard]] absl::StatusOr<RangeText> ParseElementRange(absl::string_view text);

}  // namespace tally::client
