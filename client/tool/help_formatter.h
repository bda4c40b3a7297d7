// How `tally COMMAND --help` lays out a command's flags: the command's own
// text first, then each group of flags as "--name=VALUE  what it does
// (default ...)", wrapped to 80 columns, then the command's notes.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace tally::client::tool {

class HelpFormatter final : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
};

// `text` wrapped at word boundaries to lines of at most `width` columns,
// for a place that starts at column `indent` (the first line's indent is
// the caller's; the others get `indent` spaces). Its own line breaks are
// kept; a word longer than a line stands alone.
std::string WrapText(const std::string& text, std::size_t indent, std::size_t width);

}  // namespace tally::client::tool
