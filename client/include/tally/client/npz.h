// numpy's .npz files (numpy.savez and savez_compressed): a zip archive of
// .npy files, one per named array. Members stored as they are or deflated
// (zlib), zip64 included.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tally::client {

struct NpzMember {
  std::string name;  // the array's name: the member's name without ".npy"
  std::string npy;   // the member's bytes: a whole .npy file
};

// The arrays of the .npz file at `path`, in the archive's order. Errors
// name the file and the member at fault.
[[nodiscard]] absl::StatusOr<std::vector<NpzMember>> ReadNpz(const std::string& path);

}  // namespace tally::client
