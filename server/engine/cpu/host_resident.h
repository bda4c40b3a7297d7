// The cpu backend's resident memory: an anonymous host mapping, so that a
// dataset's bytes go back to the system the moment it is deleted (a freed
// malloc block of gigabytes may stay in the process).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "server/engine/resident.h"

namespace tally::cpu {

// RESOURCE_EXHAUSTED when the system will not map `bytes`.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateHostResident(std::uint64_t bytes);

}  // namespace tally::cpu
