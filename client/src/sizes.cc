// Size suffix parsing and byte formatting.
#include "tally/client/sizes.h"

#include <cctype>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace tally::client {

absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size \"", text, "\": ", why, " (e.g. 4096, 4K, 64M, 1G)"));
  };
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits_end = 0;
  while (digits_end < s.size() && (std::isdigit(static_cast<unsigned char>(s[digits_end])) ||
                                   s[digits_end] == '.')) {
    ++digits_end;
  }
  const absl::string_view number = s.substr(0, digits_end);
  std::string suffix = absl::AsciiStrToUpper(s.substr(digits_end));
  if (number.empty()) return bad("expected a number");

  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      case 'B': shift = 0; break;
      default: return bad("unknown suffix; use K, M, G or T (powers of 1024)");
    }
    absl::string_view rest = absl::string_view(suffix).substr(suffix[0] == 'B' ? 0 : 1);
    if (absl::ConsumePrefix(&rest, "I") && rest.empty()) return bad("\"i\" must be followed by B");
    if (!rest.empty() && rest != "B") return bad("unknown suffix; use K, M, G or T (powers of 1024)");
  }

  if (number.find('.') == absl::string_view::npos) {
    std::uint64_t n = 0;
    if (!absl::SimpleAtoi(number, &n)) return bad("number out of range");
    if (shift > 0 && (n >> (64 - shift)) != 0) return bad("too large");
    return n << shift;
  }
  // "1.5G": a fraction only makes sense with a suffix.
  if (shift == 0) return bad("a fraction needs a suffix");
  double v = 0.0;
  if (!absl::SimpleAtod(number, &v)) return bad("expected a number");
  const double bytes = std::ldexp(v, shift);
  if (!(bytes < 0x1p64)) return bad("too large");
  return static_cast<std::uint64_t>(bytes);
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
