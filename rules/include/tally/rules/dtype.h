// Element types tally aggregates, and what each accumulates into.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tally/rules/half.h"

namespace tally::rules {

enum class DType : std::uint8_t { kFloat32, kFloat64, kInt32, kInt64, kUInt32, kUInt8, kInt8, kInt16, kUInt16, kUInt64, kBool, kFloat16, kBFloat16 };

inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32,  DType::kInt64,
                                       DType::kUInt32,  DType::kUInt8,   DType::kInt8,   DType::kInt16,
                                       DType::kUInt16,  DType::kUInt64,  DType::kBool,
                                       DType::kFloat16, DType::kBFloat16};

constexpr std::size_t SizeOf(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt32: return 4;
    case DType::kUInt8: return 1;
    case DType::kInt8: return 1;
    case DType::kInt16: return 2;
    case DType::kUInt16: return 2;
    case DType::kUInt64: return 8;
    case DType::kBool: return 1;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

constexpr const char* Name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt32: return "uint32";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kUInt64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

constexpr bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}
constexpr bool IsSigned(DType t) {
  return t == DType::kInt32 || t == DType::kInt64 || t == DType::kInt8 || t == DType::kInt16;
}
constexpr bool IsUnsigned(DType t) {
  // bool is stored and reduced as uint8 holding 0 or 1 (see Traits).
  return t == DType::kUInt32 || t == DType::kUInt8 || t == DType::kUInt16 || t == DType::kUInt64 ||
         t == DType::kBool;
}

// Per-dtype types:
//   value     the element type in memory
//   sum       what OP_SUM accumulates into (numpy's accumulator types)
//   extreme   how OP_MIN/OP_MAX are reported
//   bin       the type numpy.histogram compares elements with its edges in
//             (float32 for float32 input, float64 for integers)
//   edge      the type the edges are rounded to: bin, except for the 16-bit
//             floats, whose edges numpy computes in the input's dtype (the
//             comparisons are then exact in float32)
template <DType T> struct Traits;
template <> struct Traits<DType::kFloat32> { using value = float;         using sum = double;        using extreme = double;        using bin = float; using edge = float; };
template <> struct Traits<DType::kFloat64> { using value = double;        using sum = double;        using extreme = double;        using bin = double; using edge = double; };
template <> struct Traits<DType::kInt32>   { using value = std::int32_t;  using sum = std::int64_t;  using extreme = std::int64_t;  using bin = double; using edge = double; };
template <> struct Traits<DType::kInt64>   { using value = std::int64_t;  using sum = std::int64_t;  using extreme = std::int64_t;  using bin = double; using edge = double; };
template <> struct Traits<DType::kUInt32>  { using value = std::uint32_t; using sum = std::uint64_t; using extreme = std::uint64_t; using bin = double; using edge = double; };
template <> struct Traits<DType::kUInt8>   { using value = std::uint8_t;  using sum = std::uint64_t; using extreme = std::uint64_t; using bin = double; using edge = double; };
template <> struct Traits<DType::kInt8>    { using value = std::int8_t;   using sum = std::int64_t;  using extreme = std::int64_t;  using bin = double; using edge = double; };
template <> struct Traits<DType::kInt16>   { using value = std::int16_t;  using sum = std::int64_t;  using extreme = std::int64_t;  using bin = double; using edge = double; };
template <> struct Traits<DType::kUInt16>  { using value = std::uint16_t; using sum = std::uint64_t; using extreme = std::uint64_t; using bin = double; using edge = double; };
template <> struct Traits<DType::kUInt64>  { using value = std::uint64_t; using sum = std::uint64_t; using extreme = std::uint64_t; using bin = double; using edge = double; };
// numpy's bool_: one byte, 0 or 1. Its sums, products and extremes as
// uint8's are numpy's values (a count of True, 0 or 1, False or True).
template <> struct Traits<DType::kBool>    { using value = std::uint8_t;  using sum = std::uint64_t; using extreme = std::uint64_t; using bin = double; using edge = double; };

// The 16-bit floats: their sums, means and moments accumulate in float64 as
// float32's do (numpy accumulates float16 in float32 and rounds the answer
// to float16; see the proto), extremes are reported in float64 (exact).
template <> struct Traits<DType::kFloat16>  { using value = Float16;  using sum = double; using extreme = double; using bin = float; using edge = Float16; };
template <> struct Traits<DType::kBFloat16> { using value = BFloat16; using sum = double; using extreme = double; using bin = float; using edge = BFloat16; };

// Calls f(std::integral_constant<DType, t>{}) for the runtime dtype t: the one
// place that turns a runtime dtype into a compile-time one.
template <typename F>
constexpr decltype(auto) VisitDType(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(std::integral_constant<DType, DType::kFloat32>{});
    case DType::kFloat64: return f(std::integral_constant<DType, DType::kFloat64>{});
    case DType::kInt32: return f(std::integral_constant<DType, DType::kInt32>{});
    case DType::kInt64: return f(std::integral_constant<DType, DType::kInt64>{});
    case DType::kUInt32: return f(std::integral_constant<DType, DType::kUInt32>{});
    case DType::kUInt8: return f(std::integral_constant<DType, DType::kUInt8>{});
    case DType::kInt8: return f(std::integral_constant<DType, DType::kInt8>{});
    case DType::kInt16: return f(std::integral_constant<DType, DType::kInt16>{});
    case DType::kUInt16: return f(std::integral_constant<DType, DType::kUInt16>{});
    case DType::kUInt64: return f(std::integral_constant<DType, DType::kUInt64>{});
    case DType::kFloat16: return f(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kBFloat16: return f(std::integral_constant<DType, DType::kBFloat16>{});
    case DType::kBool: break;
  }
  return f(std::integral_constant<DType, DType::kBool>{});
}

}  // namespace tally::rules
