// Parsing dtype names given on the command line.
#include "tally/client/array.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tally::client {

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  struct Alias {
    absl::string_view name;
    absl::string_view short_name;  // numpy's kind + size
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", "f4", DType::kFloat32}, {"float64", "f8", DType::kFloat64},
      {"int32", "i4", DType::kInt32},     {"int64", "i8", DType::kInt64},
      {"uint32", "u4", DType::kUInt32},   {"uint8", "u1", DType::kUInt8},
      {"int8", "i1", DType::kInt8},       {"int16", "i2", DType::kInt16},
      {"uint16", "u2", DType::kUInt16},   {"uint64", "u8", DType::kUInt64},
      {"bool", "b1", DType::kBool},       {"float16", "f2", DType::kFloat16},
      {"bfloat16", "bf16", DType::kBFloat16},
  };
  for (const Alias& a : kAliases) {
    if (lower == a.name || lower == a.short_name) return a.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype \"", name, "\"; expected float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64 or bool"));
}

}  // namespace tally::client
