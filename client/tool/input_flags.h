// The input flags `tally aggregate` and `tally put` share: a .npy file, a raw
// file of --dtype, or --random elements of --dtype with --seed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "command_line.h"
#include "tally/client/input.h"

namespace tally::client::tool {

// Where an array comes from, as the command line says.
struct InputSpec {
  std::optional<std::string> npy_path;
  std::optional<std::string> raw_path;
  std::optional<std::uint64_t> random_length;
  DType dtype = DType::kFloat32;
  std::uint64_t seed = 1;

  // Whether the command line named an input at all.
  bool given() const { return npy_path || raw_path || random_length; }
};

// Takes --raw, --random, --dtype and --seed from `cl`; `files` are the
// positional words that name .npy files (at most one is allowed). When an
// input is given, checks that it is exactly one and that --dtype and --seed
// fit it; when none is, that --dtype and --seed are absent too (the caller
// decides whether no input is an error). Opens nothing, so every error is a
// usage error.
[[nodiscard]] absl::StatusOr<InputSpec> TakeInputFlags(CommandLine& cl,
                                                       const std::vector<std::string>& files);

// Opens (maps) the file or generates the array.
[[nodiscard]] absl::StatusOr<InputArray> LoadInput(const InputSpec& spec);

}  // namespace tally::client::tool
