// The input flags `tally aggregate` and `tally put` share: a .npy file, a raw
// file of --dtype, or --random elements of --dtype with --seed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flags.h"
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

// --raw, --random, --dtype and --seed as given.
struct InputFlags {
  std::optional<std::string> raw, dtype, seed;
  std::optional<std::uint64_t> random;

  // Checks that there is at most one input (`files` are the positional
  // words that name .npy files) and that --dtype and --seed fit it; when
  // there is none, that --dtype and --seed are absent too (the caller
  // decides whether no input is an error). Opens nothing, so every error is
  // a usage error.
  [[nodiscard]] absl::StatusOr<InputSpec> Resolve(const std::vector<std::string>& files) const;
};

// Declares --raw, --random, --dtype and --seed on `app` (after the caller's
// FILE.npy argument, in the caller's group).
void AddInputFlags(CLI::App& app, InputFlags& flags);

// --dtype's help, for bench too.
inline constexpr char kDTypesHelp[] =
    "float16 bfloat16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool";

// Opens (maps) the file or generates the array, showing a progress bar on
// stderr while a large random array is generated.
[[nodiscard]] absl::StatusOr<InputArray> LoadInput(const InputSpec& spec);

}  // namespace tally::client::tool
