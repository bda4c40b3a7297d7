// The tool's command lines, on CLI11: one CLI::App per command, flags of
// tally's kinds (texts, sizes, seconds, switches) declared once with their
// help and default, and the parse that refuses what it cannot read
// unambiguously, naming the flag.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tally::client::tool {

// A command's App. `description` heads its --help (the usage lines, then
// what it does); `notes` end it (output formats, exit status, examples).
// Flags are added with the functions below, in the order --help shows them,
// each in the group last named with StartGroup.
std::unique_ptr<CLI::App> MakeCommandApp(const std::string& name, const std::string& description,
                                         const std::string& notes);

// The heading --help lists the flags added next under ("Input", "Flags").
void StartGroup(CLI::App& app, const std::string& heading);

// In each of these, `value` names the flag's value in --help ("N", "BYTES",
// "LIST"), `text` says what the flag does and `default_text` is its default
// as the user would write it ("" for none).

// --name=VALUE or --name VALUE: the text as given.
CLI::Option* AddTextFlag(CLI::App& app, const std::string& name, std::optional<std::string>& out,
                         const std::string& value, const std::string& text, const std::string& default_text = "");
// --name=VALUE, repeatable: every value, in the order given.
CLI::Option* AddRepeatedTextFlag(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                                 const std::string& value, const std::string& text);
// A size or count with ParseSize's suffixes (64K = 64000, 64Ki = 65536).
CLI::Option* AddSizeFlag(CLI::App& app, const std::string& name, std::optional<std::uint64_t>& out,
                         const std::string& value, const std::string& text, const std::string& default_text = "");
// Seconds, fractions allowed; more than 0.
CLI::Option* AddSecondsFlag(CLI::App& app, const std::string& name, std::optional<absl::Duration>& out,
                            const std::string& text, const std::string& default_text = "");
// --name alone is true; --name=true and --name=false also work. The value
// is never taken from the next word, which is an argument of its own.
CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool& out, const std::string& text);
// Positional words (file names, dataset names), in the order given.
CLI::Option* AddArguments(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                          const std::string& text);

// Exit codes the parse can end with (the commands' own, see commands.h).
inline constexpr int kParseHelpShown = 0;
inline constexpr int kParseUsageError = 2;

// Parses `args` (the words after the command's name) into the flags
// declared on `app`, then runs `check` (the rules between flags, which
// returns INVALID_ARGUMENT naming them). Returns nullopt to go on, or the
// exit code to stop with once it has printed --help (0) or what is wrong
// (2, on stderr, as "tally COMMAND: message"). Refused, each with a
// message that names the flag: a flag the command does not have (with the
// flags it may have meant), a flag given twice, a flag that takes a value
// given none, a value that looks like a flag ("--ops --json": write
// --ops=--json if you mean it), a switch followed by true or false as a
// separate word ("--json false": ambiguous with a file named false), and a
// value its flag cannot read.
[[nodiscard]] std::optional<int> ParseCommandLine(CLI::App& app, const std::vector<std::string>& args,
                                                  const std::function<absl::Status()>& check);

}  // namespace tally::client::tool
