// Declaring and parsing the tool's flags on CLI11.
#include "flags.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "help_formatter.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {
namespace {

// A flag that takes a value. CLI11 keeps every occurrence (TakeAll) so that
// a second one is refused here, in the same words as every other mistake,
// and `read` turns the text into the flag's value or throws
// CLI::ValidationError naming the flag.
CLI::Option* AddValueFlag(CLI::App& app, const std::string& name, const std::string& value,
                          const std::string& text, const std::string& default_text,
                          std::function<void(const std::string&)> read) {
  CLI::Option* opt = app.add_option(
      name,
      [name, read = std::move(read)](const CLI::results_t& values) {
        if (values.size() > 1) {
          // Without the values: one may be a --token.
          throw CLI::ValidationError(name, "given more than once");
        }
        read(values.front());
        return true;
      },
      text);
  opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  opt->type_name(value);
  if (!default_text.empty()) opt->default_str(default_text);
  return opt;
}

// The long names of the app's flags, "--ops".
std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back(absl::StrCat("--", l));
  }
  return names;
}

// Edits (insert, delete, replace, swap two neighbours) from a to b: the
// optimal string alignment distance, which counts "--jsno" one from "--json".
std::size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// "unknown flag --str (did you mean --stream or --stream-threshold?)": the
// flags the word begins, or is a typo of. Abbreviations are never taken
// as the flag they begin, since a later flag could make them ambiguous.
std::string UnknownFlag(const CLI::App& app, absl::string_view flag) {
  std::vector<std::string> close;
  // Two typos in a long name, one in a short one ("--ca" is not "--x").
  const std::size_t typos = flag.size() > 6 ? 2 : 1;
  for (const std::string& name : FlagNames(app)) {
    if (absl::StartsWith(name, flag) || EditDistance(name, flag) <= typos) close.push_back(name);
  }
  std::string message = absl::StrCat("unknown flag ", flag);
  if (close.size() == 1) absl::StrAppend(&message, " (did you mean ", close[0], "?)");
  if (close.size() > 1) {
    const std::string last = close.back();
    close.pop_back();
    absl::StrAppend(&message, " (did you mean ", absl::StrJoin(close, ", "), " or ", last, "?)");
  }
  return message;
}

bool IsBoolWord(absl::string_view word) {
  const std::string w = absl::AsciiStrToLower(word);
  return w == "true" || w == "false" || w == "yes" || w == "no" || w == "on" || w == "off";
}

// Checks the words before CLI11 sees them, for what CLI11 would read
// silently one way when the user may have meant another, and writes every
// "--name=value" as "--name" "value" (CLI11 reads "--name=" as a flag
// still waiting for its value, and would take the next word).
absl::StatusOr<std::vector<std::string>> Normalize(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.insert(out.end(), args.begin() + i, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      out.push_back(arg);
      continue;
    }
    if (arg[1] != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option ", arg, "; flags are spelled --name=value or --name value"));
    }
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const CLI::Option* opt = app.get_option_no_throw(name);
    if (opt == nullptr || opt->get_positional()) return absl::InvalidArgumentError(UnknownFlag(app, name));
    const bool is_switch = opt->get_expected_max() == 0;
    if (is_switch) {
      if (eq != std::string::npos && !IsBoolWord(arg.substr(eq + 1)) && arg.substr(eq + 1) != "1" &&
          arg.substr(eq + 1) != "0") {
        return absl::InvalidArgumentError(absl::StrCat(arg, ": expected ", name, ", ", name, "=true or ", name,
                                                       "=false"));
      }
      if (eq == std::string::npos && i + 1 < args.size() && IsBoolWord(args[i + 1])) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " takes no separate value: write ", name, " or ", name, "=", args[i + 1],
                         " (\"", args[i + 1], "\" after a space is read as an argument)"));
      }
      out.push_back(arg);
      continue;
    }
    out.push_back(name);
    if (eq != std::string::npos) {
      out.push_back(arg.substr(eq + 1));
      continue;
    }
    if (i + 1 == args.size()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
    const std::string& value = args[++i];
    if (value.size() > 1 && value[0] == '-') {
      return absl::InvalidArgumentError(absl::StrCat(name, " needs a value, and ", value,
                                                     " looks like a flag (write ", name,
                                                     "=VALUE for a value that starts with -)"));
    }
    out.push_back(value);
  }
  return out;
}

}  // namespace

std::unique_ptr<CLI::App> MakeCommandApp(const std::string& name, const std::string& description,
                                         const std::string& notes) {
  auto app = std::make_unique<CLI::App>(description, name);
  app->formatter(std::make_shared<HelpFormatter>());
  app->footer(notes);
  // --help is answered before parsing (ParseCommandLine), so that it works
  // whatever else is on the line.
  app->set_help_flag();
  // Words no argument takes are refused by ParseCommandLine, in its words.
  app->allow_extras();
  return app;
}

void StartGroup(CLI::App& app, const std::string& heading) { app.option_defaults()->group(heading); }

CLI::Option* AddTextFlag(CLI::App& app, const std::string& name, std::optional<std::string>& out,
                         const std::string& value, const std::string& text, const std::string& default_text) {
  return AddValueFlag(app, name, value, text, default_text, [&out](const std::string& v) { out = v; });
}

CLI::Option* AddRepeatedTextFlag(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                                 const std::string& value, const std::string& text) {
  CLI::Option* opt = app.add_option(
      name,
      [&out](const CLI::results_t& values) {
        out.insert(out.end(), values.begin(), values.end());
        return true;
      },
      text);
  opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  opt->type_name(value);
  return opt;
}

CLI::Option* AddSizeFlag(CLI::App& app, const std::string& name, std::optional<std::uint64_t>& out,
                         const std::string& value, const std::string& text, const std::string& default_text) {
  return AddValueFlag(app, name, value, text, default_text, [&out, name](const std::string& v) {
    absl::StatusOr<std::uint64_t> n = ParseSize(v);
    if (!n.ok()) throw CLI::ValidationError(name, std::string(n.status().message()));
    out = *n;
  });
}

CLI::Option* AddSecondsFlag(CLI::App& app, const std::string& name, std::optional<absl::Duration>& out,
                            const std::string& text, const std::string& default_text) {
  return AddValueFlag(app, name, "SECONDS", text, default_text, [&out, name](const std::string& v) {
    double seconds = 0.0;
    if (!absl::SimpleAtod(v, &seconds) || !std::isfinite(seconds) || seconds <= 0.0) {
      throw CLI::ValidationError(name, absl::StrCat("\"", v, "\": expected a number of seconds > 0"));
    }
    out = absl::Seconds(seconds);
  });
}

CLI::Option* AddSwitch(CLI::App& app, const std::string& name, bool& out, const std::string& text) {
  return app.add_flag(name, out, text);
}

CLI::Option* AddArguments(CLI::App& app, const std::string& name, std::vector<std::string>& out,
                          const std::string& text) {
  return app.add_option(name, out, text);
}

std::optional<int> ParseCommandLine(CLI::App& app, const std::vector<std::string>& args,
                                    const std::function<absl::Status()>& check) {
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::fputs(app.help().c_str(), stdout);
      return kParseHelpShown;
    }
  }
  const auto usage_error = [&](absl::string_view message) {
    absl::FPrintF(stderr, "%s: %s\n(see %s --help)\n", app.get_name(), message, app.get_name());
    return kParseUsageError;
  };
  absl::StatusOr<std::vector<std::string>> words = Normalize(app, args);
  if (!words.ok()) return usage_error(words.status().message());
  std::reverse(words->begin(), words->end());  // CLI11 takes its words from the back
  try {
    app.parse(*words);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }
  std::vector<std::string> extra = app.remaining();
  // CLI11 keeps the "--" that ends the flags among the words it did not use.
  extra.erase(std::remove(extra.begin(), extra.end(), "--"), extra.end());
  if (!extra.empty()) {
    return usage_error(absl::StrCat("unexpected argument", extra.size() > 1 ? "s " : " ", absl::StrJoin(extra, " ")));
  }
  if (absl::Status s = check(); !s.ok()) return usage_error(s.message());
  return std::nullopt;
}

}  // namespace tally::client::tool
