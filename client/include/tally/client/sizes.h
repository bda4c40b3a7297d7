// Sizes and counts written by people ("4096", "64K", "64Ki", "1.5G") and
// read back, for every flag that takes one.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally::client {

// A whole number with an optional suffix: K, M, G, T are powers of 1000
// (SI), Ki, Mi, Gi, Ti powers of 1024 (IEC), as disks and networks on one
// side and memory on the other count. Suffixes may be written in either
// case and may end in B ("4KB" = 4000, "4KiB" = 4096, "512B" = 512). A
// fraction needs a suffix and must come out whole ("1.5K" = 1500, "0.5Ki"
// = 512; "1.0001K" is refused). Anything else is INVALID_ARGUMENT naming
// the text and the rule.
[[nodiscard]] absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text);

// A text ParseSize reads back as `n`, with the largest suffix letter that
// divides it, decimal before binary: "4K" (4000), "64Ki" (65536), "256K"
// (256000, which is also 250Ki), "1000001".
std::string SizeText(std::uint64_t n);

// What --help says about the suffixes, once for every command.
inline constexpr absl::string_view kSizeSuffixHelp =
    "Sizes and counts (N, BYTES) are whole numbers with an optional suffix: "
    "K, M, G, T are powers of 1000; Ki, Mi, Gi, Ti powers of 1024; either "
    "case, optionally followed by B. 64K = 64000, 64Ki = 65536, 1.5M = "
    "1500000, 4GiB = 4294967296.";

// "512 B", "4.00 KiB", "64.0 MiB", "256 MiB".
std::string FormatBytes(std::uint64_t bytes);

}  // namespace tally::client
