// The tool's flag parsing: --name=value, bare --name for booleans, and
// positional arguments. Hand-written rather than absl flags because each
// subcommand has its own flags and its own --help.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tally/client/client.h"

namespace tally::client::tool {

class CommandLine {
 public:
  // Parses args (the words after the subcommand). Values are only taken from
  // "--name=value"; "--name" alone means "--name=true". A word after "--"
  // is positional even if it starts with "-".
  [[nodiscard]] static absl::StatusOr<CommandLine> Parse(const std::vector<std::string>& args);

  // Each Take* consumes its flag, so CheckAllUsed can name the flags no one
  // asked for (usually a typo).
  std::optional<std::string> TakeString(absl::string_view name);
  [[nodiscard]] absl::StatusOr<bool> TakeBool(absl::string_view name);
  // Plain integers or sizes with a K/M/G/T suffix (see ParseSize).
  [[nodiscard]] absl::StatusOr<std::optional<std::uint64_t>> TakeSize(absl::string_view name);
  // Seconds, fractions allowed; must be > 0.
  [[nodiscard]] absl::StatusOr<std::optional<absl::Duration>> TakeSeconds(absl::string_view name);
  [[nodiscard]] absl::Status CheckAllUsed() const;

  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string, std::less<>> flags_;
  std::vector<std::string> positional_;
};

// --stream-threshold and --chunk, which aggregate and bench share: sets the
// fields of `call` that were given.
[[nodiscard]] absl::Status TakeChunkingFlags(CommandLine& cl, CallOptions& call);

}  // namespace tally::client::tool
