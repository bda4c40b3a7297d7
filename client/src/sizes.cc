// The one parser of sizes and counts, its inverse, and byte formatting.
#include "tally/client/sizes.h"

#include <cctype>
#include <optional>

#include "absl/numeric/int128.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace tally::client {
namespace {

struct Suffix {
  absl::string_view name;  // upper case, without B
  std::uint64_t factor;
};

// Largest letter first, decimal before binary: SizeText takes the first
// that divides, so 256000 is "256K" (as typed), not "250Ki".
constexpr Suffix kSuffixes[] = {
    {"T", 1'000'000'000'000}, {"TI", std::uint64_t{1} << 40}, {"G", 1'000'000'000}, {"GI", std::uint64_t{1} << 30},
    {"M", 1'000'000},         {"MI", std::uint64_t{1} << 20}, {"K", 1'000},         {"KI", std::uint64_t{1} << 10},
};

constexpr absl::string_view kRule = "use K, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024)";

// The suffix's factor: "" and "B" are 1; "K", "KB", "KI", "KIB" and so on.
std::optional<std::uint64_t> FactorOf(absl::string_view upper) {
  absl::ConsumeSuffix(&upper, "B");
  if (upper.empty()) return 1;
  for (const Suffix& s : kSuffixes) {
    if (upper == s.name) return s.factor;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size \"", text, "\": ", why, " (e.g. 4096, 64K, 64Ki, 1.5G)"));
  };
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t number_end = 0;
  while (number_end < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[number_end])) || s[number_end] == '.')) {
    ++number_end;
  }
  const absl::string_view number = s.substr(0, number_end);
  const std::string suffix = absl::AsciiStrToUpper(s.substr(number_end));
  if (number.empty() || number == ".") return bad("expected a number");
  const std::optional<std::uint64_t> factor = FactorOf(suffix);
  if (!factor) return bad(absl::StrCat("unknown suffix \"", s.substr(number_end), "\"; ", kRule));

  // Whole part and fraction in integers, so that "4.1K" is 4100 exactly.
  const size_t point = number.find('.');
  const absl::string_view whole = number.substr(0, point);
  const absl::string_view fraction = point == absl::string_view::npos ? "" : number.substr(point + 1);
  if (fraction.find('.') != absl::string_view::npos) return bad("expected a number");
  if (point != absl::string_view::npos && *factor == 1) return bad("a fraction needs a suffix");
  if (fraction.size() > 18) return bad("too many decimals");
  std::uint64_t w = 0;
  if (!whole.empty() && !absl::SimpleAtoi(whole, &w)) return bad("too large");
  std::uint64_t f = 0, scale = 1;
  for (char c : fraction) {
    f = f * 10 + static_cast<std::uint64_t>(c - '0');
    scale *= 10;
  }
  const absl::uint128 scaled_fraction = absl::uint128(f) * *factor;
  if (scaled_fraction % scale != 0) {
    return bad(absl::StrCat("not a whole number (", whole.empty() ? "0" : whole, ".", fraction, " x ",
                            *factor, ")"));
  }
  const absl::uint128 value = absl::uint128(w) * *factor + scaled_fraction / scale;
  if (value > absl::uint128(~std::uint64_t{0})) return bad("too large");
  return static_cast<std::uint64_t>(value);
}

std::string SizeText(std::uint64_t n) {
  if (n != 0) {
    for (const Suffix& s : kSuffixes) {
      if (n % s.factor == 0) {
        return absl::StrCat(n / s.factor, s.name.substr(0, 1), s.name.size() > 1 ? "i" : "");
      }
    }
  }
  return absl::StrCat(n);
}

std::string FormatBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  // Three significant digits whatever the magnitude.
  if (v < 10.0) return absl::StrFormat("%.2f %s", v, kUnits[unit]);
  if (v < 100.0) return absl::StrFormat("%.1f %s", v, kUnits[unit]);
  return absl::StrFormat("%.0f %s", v, kUnits[unit]);
}

}  // namespace tally::client
