// The tool's subcommands. Each takes the words after its name and returns
// the process exit code: 0 success, 1 failure, 2 a bad command line.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tally::client::tool {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int RunAggregate(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunHealth(const std::vector<std::string>& args);

extern const absl::string_view kAggregateUsage;
extern const absl::string_view kBenchUsage;
extern const absl::string_view kHealthUsage;

}  // namespace tally::client::tool
