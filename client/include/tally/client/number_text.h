// Numbers as text, shared by the text and JSON formats.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

namespace tally::client {

// The shortest decimal that reads back as the same double ("0.1", "1e+300"),
// or "nan", "inf", "-inf".
std::string DoubleText(double value);

// A string as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view text);

}  // namespace tally::client
