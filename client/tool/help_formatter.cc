// The layout of each command's --help.
#include "help_formatter.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tally::client::tool {
namespace {

constexpr std::size_t kWidth = 80;
// The flag column: the longest common names ("--stream-threshold=BYTES")
// fit; longer ones put their text on the next line.
constexpr std::size_t kFlagColumn = 26;

}  // namespace

std::string WrapText(const std::string& text, std::size_t indent, std::size_t width) {
  std::string out;
  std::size_t column = indent;
  bool first_line = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!first_line) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      column = indent;
    }
    const std::size_t line_start = column;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      if (column > line_start && column + 1 + word.size() > width) {
        absl::StrAppend(&out, "\n", std::string(indent, ' '));
        column = indent;
      } else if (column > line_start) {
        out += ' ';
        ++column;
      }
      absl::StrAppend(&out, word);
      column += word.size();
    }
    first_line = false;
  }
  return out;
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  std::string name = is_positional ? opt->get_name(true, false) : opt->get_name(false, true);
  if (!is_positional && opt->get_expected_max() != 0) absl::StrAppend(&name, "=", opt->get_type_name());
  std::string text = opt->get_description();
  if (!opt->get_default_str().empty()) absl::StrAppend(&text, " (default ", opt->get_default_str(), ")");
  std::string out = absl::StrCat("  ", name);
  if (out.size() + 2 > kFlagColumn) {
    absl::StrAppend(&out, "\n", std::string(kFlagColumn, ' '));
  } else {
    out.resize(kFlagColumn, ' ');
  }
  absl::StrAppend(&out, WrapText(text, kFlagColumn, kWidth), "\n");
  return out;
}

std::string HelpFormatter::make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const {
  std::string out = app->get_description();
  for (const std::string& group : app->get_groups()) {
    const std::vector<const CLI::Option*> options =
        app->get_options([&](const CLI::Option* o) { return o->get_group() == group; });
    if (group.empty() || options.empty()) continue;
    absl::StrAppend(&out, "\n", group, ":\n");
    for (const CLI::Option* o : options) absl::StrAppend(&out, make_option(o, o->get_positional()));
  }
  if (!app->get_footer().empty()) absl::StrAppend(&out, "\n", app->get_footer());
  return out;
}

}  // namespace tally::client::tool
