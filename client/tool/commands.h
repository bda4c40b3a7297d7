// The tool's subcommands. Each takes the words after its name (its flags,
// --help among them) and returns the process exit code: 0 success, 1
// failure, 2 a bad command line.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tally::client::tool {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Where the subcommands look for a server without --target.
inline constexpr absl::string_view kDefaultTarget = "127.0.0.1:50051";

int RunAggregate(const std::vector<std::string>& args);
int RunGroupBy(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunHealth(const std::vector<std::string>& args);
int RunPut(const std::vector<std::string>& args);
int RunDatasets(const std::vector<std::string>& args);
int RunRm(const std::vector<std::string>& args);
int RunRegions(const std::vector<std::string>& args);

}  // namespace tally::client::tool
