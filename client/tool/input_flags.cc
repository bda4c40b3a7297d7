// Parsing the input flags shared by aggregate and put.
#include "input_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tally::client::tool {

absl::StatusOr<InputSpec> TakeInputFlags(CommandLine& cl, const std::vector<std::string>& files) {
  InputSpec in;
  const std::optional<std::string> dtype_flag = cl.TakeString("dtype");
  in.raw_path = cl.TakeString("raw");
  absl::StatusOr<std::optional<std::uint64_t>> random = cl.TakeSize("random");
  if (!random.ok()) return random.status();
  in.random_length = *random;
  const std::optional<std::string> seed_flag = cl.TakeString("seed");

  if (files.size() > 1) return absl::InvalidArgumentError("more than one input file given");
  if (files.size() == 1) in.npy_path = files[0];
  const int inputs = int(in.npy_path.has_value()) + int(in.raw_path.has_value()) +
                     int(in.random_length.has_value());
  if (inputs > 1) {
    return absl::InvalidArgumentError(
        "give exactly one input: FILE.npy, --raw=FILE --dtype=T or --random=N");
  }
  if (in.npy_path && dtype_flag) {
    return absl::InvalidArgumentError("--dtype is for --raw and --random; a .npy file names its dtype");
  }
  if (inputs == 0 && dtype_flag) return absl::InvalidArgumentError("--dtype is for --raw and --random");
  // Raw bytes say nothing about their type, so guessing would be silent garbage.
  if (in.raw_path && !dtype_flag) return absl::InvalidArgumentError("--raw needs --dtype");
  if (seed_flag && !in.random_length) return absl::InvalidArgumentError("--seed is for --random");
  if (dtype_flag) {
    absl::StatusOr<DType> d = ParseDType(*dtype_flag);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("--dtype: ", d.status().message()));
    in.dtype = *d;
  }
  if (seed_flag && !absl::SimpleAtoi(*seed_flag, &in.seed)) {
    return absl::InvalidArgumentError(absl::StrCat("--seed=", *seed_flag, ": expected an integer"));
  }
  return in;
}

absl::StatusOr<InputArray> LoadInput(const InputSpec& spec) {
  if (spec.npy_path) return InputArray::OpenNpy(*spec.npy_path);
  if (spec.raw_path) return InputArray::OpenRaw(*spec.raw_path, spec.dtype);
  return InputArray::Random(*spec.random_length, spec.dtype, spec.seed);
}

}  // namespace tally::client::tool
