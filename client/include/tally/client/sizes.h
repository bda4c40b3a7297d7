// Sizes written by people: "4096", "4K", "64M", "1G", "1.5G".
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace tally::client {

// A count with an optional binary suffix: K, M, G, T (powers of 1024), in
// either case, optionally followed by "B" or "iB" ("4K", "4k", "4KB" and
// "4KiB" all mean 4096; a lone "B" is allowed: "512B"). A fraction needs a
// suffix and is rounded down ("1.5K" = 1536).
[[nodiscard]] absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text);

// "512 B", "4.00 KiB", "64.0 MiB", "256 MiB".
std::string FormatBytes(std::uint64_t bytes);

}  // namespace tally::client
