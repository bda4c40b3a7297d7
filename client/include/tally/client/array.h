// A borrowed view of the array a client sends, and the dtype names the
// command line accepts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "tally/rules/dtype.h"

namespace tally::client {

using rules::DType;

// Does not own `data`: the caller keeps it alive (and unchanged) for the
// whole call. Sizes are 64-bit throughout: arrays may be many GiB.
struct ArrayRef {
  DType dtype = DType::kFloat32;
  const std::byte* data = nullptr;
  std::uint64_t length = 0;      // elements
  std::uint64_t row_length = 0;  // 0: the whole array; N: rows of N elements
  // Variable-length segments instead of rows (CSR offsets: segments + 1
  // entries, 0 first, the length last; the server checks them). Empty: none.
  std::span<const std::int64_t> offsets = {};
  // A validity mask (Arrow's bitmap: bit i % 8 of byte i / 8 is element i,
  // 1 = valid; ceil(length / 8) bytes). Empty: every element is valid.
  std::span<const std::uint8_t> validity = {};

  std::uint64_t size_bytes() const { return length * rules::SizeOf(dtype); }
  // Results per aggregation: one per row or segment, or one for the whole array.
  std::uint64_t rows() const {
    if (!offsets.empty()) return offsets.size() - 1;
    return row_length == 0 ? 1 : length / row_length;
  }
};

// A dtype by its name or numpy's kind-and-size code, in any case:
// "float16" "f2", "bfloat16" "bf16", "float32" "f4", "float64" "f8",
// "int8" "i1", "int16" "i2", "int32" "i4", "int64" "i8", "uint8" "u1",
// "uint16" "u2", "uint32" "u4", "uint64" "u8", "bool" "b1".
// INVALID_ARGUMENT naming the supported ones otherwise.
[[nodiscard]] absl::StatusOr<DType> ParseDType(absl::string_view name);

}  // namespace tally::client
