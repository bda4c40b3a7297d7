// The inputs the tool sends: a .npy file, a raw binary file (both mapped,
// never read whole) or generated random data.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "tally/client/array.h"
#include "tally/client/mapped_file.h"
#include "tally/client/random_data.h"

namespace tally::client {

// An array and whatever keeps its bytes alive. Moving it keeps array().data
// valid (the mapping and the heap buffer do not move).
class InputArray {
 public:
  // A .npy file; a 2-D array sets row_length to its second dimension.
  [[nodiscard]] static absl::StatusOr<InputArray> OpenNpy(const std::string& path);
  // A file of raw little-endian elements; its size must be a multiple of
  // the dtype's size.
  [[nodiscard]] static absl::StatusOr<InputArray> OpenRaw(const std::string& path, DType dtype);
  // `length` random elements (see FillRandom, which calls `progress`).
  static InputArray Random(std::uint64_t length, DType dtype, std::uint64_t seed,
                           const FillProgress& progress = {});

  const ArrayRef& array() const { return array_; }
  // Segments the array into rows of `row_length` elements (0: whole array).
  // The server checks that it divides the length.
  void set_row_length(std::uint64_t row_length) { array_.row_length = row_length; }
  // Cuts the array into variable-length segments at `offsets` (kept here).
  void set_offsets(std::vector<std::int64_t> offsets) {
    offsets_ = std::move(offsets);
    array_.offsets = offsets_;
  }
  // Skips the elements whose bit in `validity` (Arrow's bitmap, kept here)
  // is 0.
  void set_validity(std::vector<std::uint8_t> validity) {
    validity_ = std::move(validity);
    array_.validity = validity_;
  }
  // e.g. "data.npy (float32, shape 1000x256)", for messages.
  const std::string& description() const { return description_; }

 private:
  std::variant<std::monostate, MappedFile, HostBuffer> storage_;
  ArrayRef array_;
  std::vector<std::int64_t> offsets_;
  std::vector<std::uint8_t> validity_;
  std::string description_;
};

}  // namespace tally::client
