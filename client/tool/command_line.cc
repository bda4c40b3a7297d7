// Flag parsing for the tally tool.
#include "command_line.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {

absl::StatusOr<CommandLine> CommandLine::Parse(const std::vector<std::string>& args) {
  CommandLine cl;
  bool only_positional = false;
  for (const std::string& arg : args) {
    if (only_positional || arg.size() < 2 || arg[0] != '-') {
      cl.positional_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    if (arg[1] != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option ", arg, "; flags are spelled --name=value"));
    }
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::string value = eq == std::string::npos ? "true" : arg.substr(eq + 1);
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("bad flag ", arg));
    if (!cl.flags_.emplace(name, std::move(value)).second) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " given more than once"));
    }
  }
  return cl;
}

std::optional<std::string> CommandLine::TakeString(absl::string_view name) {
  const auto it = flags_.find(name);
  if (it == flags_.end()) return std::nullopt;
  std::string value = std::move(it->second);
  flags_.erase(it);
  return value;
}

absl::StatusOr<bool> CommandLine::TakeBool(absl::string_view name) {
  const std::optional<std::string> value = TakeString(name);
  if (!value) return false;
  bool b = false;
  if (!absl::SimpleAtob(*value, &b)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", *value, ": expected true or false"));
  }
  return b;
}

absl::StatusOr<std::optional<std::uint64_t>> CommandLine::TakeSize(absl::string_view name) {
  const std::optional<std::string> value = TakeString(name);
  if (!value) return std::optional<std::uint64_t>();
  absl::StatusOr<std::uint64_t> n = ParseSize(*value);
  if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", n.status().message()));
  return std::optional<std::uint64_t>(*n);
}

absl::StatusOr<std::optional<absl::Duration>> CommandLine::TakeSeconds(absl::string_view name) {
  const std::optional<std::string> value = TakeString(name);
  if (!value) return std::optional<absl::Duration>();
  double seconds = 0.0;
  if (!absl::SimpleAtod(*value, &seconds) || !std::isfinite(seconds) || seconds <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", *value, ": expected a number of seconds > 0"));
  }
  return std::optional<absl::Duration>(absl::Seconds(seconds));
}

absl::Status CommandLine::CheckAllUsed() const {
  if (flags_.empty()) return absl::OkStatus();
  std::vector<std::string> names;
  for (const auto& [name, value] : flags_) names.push_back(absl::StrCat("--", name));
  return absl::InvalidArgumentError(absl::StrCat("unknown flag", names.size() > 1 ? "s " : " ",
                                                 absl::StrJoin(names, ", ")));
}

absl::Status TakeChunkingFlags(CommandLine& cl, CallOptions& call) {
  absl::StatusOr<std::optional<std::uint64_t>> threshold = cl.TakeSize("stream-threshold");
  if (!threshold.ok()) return threshold.status();
  if (*threshold) call.stream_threshold_bytes = **threshold;
  absl::StatusOr<std::optional<std::uint64_t>> chunk = cl.TakeSize("chunk");
  if (!chunk.ok()) return chunk.status();
  if (*chunk) call.chunk_bytes = **chunk;
  return absl::OkStatus();
}

}  // namespace tally::client::tool
