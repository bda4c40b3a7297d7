// The .npy header (numpy's format, versions 1.0, 2.0 and 3.0): what the
// array holds and where its bytes start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "tally/rules/dtype.h"

namespace tally::client {

struct NpyHeader {
  rules::DType dtype = rules::DType::kFloat32;
  std::vector<std::uint64_t> shape;  // 1 or 2 dimensions
  std::uint64_t data_offset = 0;     // from the start of the file

  std::uint64_t elements() const;
  // The length of a row: the second dimension of a 2-D array, else 0.
  std::uint64_t row_length() const { return shape.size() == 2 ? shape[1] : 0; }
};

// Parses and checks the header at the start of `file` (the whole file, or at
// least its header), and that the file holds exactly the bytes the header
// promises. Accepts the dtypes tally aggregates that .npy can hold (<f2 <f4
// <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1, with '<' or '|' where the byte
// order does not matter; .npy has no bfloat16), C order, 1-D or 2-D.
[[nodiscard]] absl::StatusOr<NpyHeader> ParseNpyHeader(std::span<const std::byte> file);

}  // namespace tally::client
