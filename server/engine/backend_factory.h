// Builds the backend the server was asked for: cpu, cuda, null, or auto
// (cuda when a GPU is present, else cpu).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/backend.h"

namespace tally {

struct BackendOptions {
  std::string kind = "auto";  // auto | cpu | cuda | null
  int cpu_threads = 0;        // 0: one per hardware thread
};

// The backend kinds this build can run, for --help and error messages.
std::vector<std::string> AvailableBackendKinds();

[[nodiscard]] absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const BackendOptions& options);

}  // namespace tally
