// The input flags shared by aggregate and put.
#include "input_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "progress_bar.h"
#include "tally/rules/dtype.h"

namespace tally::client::tool {

void AddInputFlags(CLI::App& app, InputFlags& f) {
  AddTextFlag(app, "--raw", f.raw, "FILE", "raw little-endian elements of --dtype (mapped, not read)");
  AddSizeFlag(app, "--random", f.random, "N",
              "N random elements of --dtype (a count: 1M is a million elements, 1Mi 2^20): floats uniform in "
              "[-1, 1), integers spread over a range; a progress bar shows while a large one is generated");
  AddTextFlag(app, "--dtype", f.dtype, "T",
              absl::StrCat("the elements' type, for --raw (required) and --random: ", kDTypesHelp,
                           ". A .npy file names its own"),
              "float32 for --random");
  AddTextFlag(app, "--seed", f.seed, "S", "seed for --random: the same seed gives the same array everywhere", "1");
}

absl::StatusOr<InputSpec> InputFlags::Resolve(const std::vector<std::string>& files) const {
  InputSpec in;
  in.raw_path = raw;
  in.random_length = random;
  if (files.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("more than one input file given: ", files[0], " and ", files[1]));
  }
  if (files.size() == 1) in.npy_path = files[0];
  const int inputs = int(in.npy_path.has_value()) + int(in.raw_path.has_value()) +
                     int(in.random_length.has_value());
  if (inputs > 1) {
    return absl::InvalidArgumentError(
        "give exactly one input: FILE.npy, --raw=FILE --dtype=T or --random=N");
  }
  if (in.npy_path && dtype) {
    return absl::InvalidArgumentError("--dtype is for --raw and --random; a .npy file names its dtype");
  }
  if (inputs == 0 && dtype) return absl::InvalidArgumentError("--dtype is for --raw and --random");
  // Raw bytes say nothing about their type, so guessing would be silent garbage.
  if (in.raw_path && !dtype) return absl::InvalidArgumentError("--raw needs --dtype");
  if (seed && !in.random_length) return absl::InvalidArgumentError("--seed is for --random");
  if (dtype) {
    absl::StatusOr<DType> d = ParseDType(*dtype);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("--dtype: ", d.status().message()));
    in.dtype = *d;
  }
  if (seed && !absl::SimpleAtoi(*seed, &in.seed)) {
    return absl::InvalidArgumentError(absl::StrCat("--seed=", *seed, ": expected an integer"));
  }
  return in;
}

absl::StatusOr<InputArray> LoadInput(const InputSpec& spec) {
  if (spec.npy_path) return InputArray::OpenNpy(*spec.npy_path);
  if (spec.raw_path) return InputArray::OpenRaw(*spec.raw_path, spec.dtype);
  // GiB take seconds to generate: the bar says so instead of silence.
  ProgressBar progress("generating");
  const std::uint64_t element = rules::SizeOf(spec.dtype);
  return InputArray::Random(*spec.random_length, spec.dtype, spec.seed,
                            [&progress, element](std::uint64_t filled, std::uint64_t length) {
                              progress.Update(filled * element, length * element);
                            });
}

}  // namespace tally::client::tool
