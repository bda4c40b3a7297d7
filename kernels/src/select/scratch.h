// Carving caller-owned device scratch into the passes' arrays: the same
// walk sizes the scratch (no base) and hands out pointers (a base), so the
// two can never disagree. Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tally/rules/dtype.h"

namespace tally::kernels::select {

class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<std::byte*>(base)) {}

  // `count` U's, 256-byte aligned (what cudaMalloc gives, and what the
  // kernels' 16-byte vector loads and CUB want).
  template <typename U>
  U* Take(std::size_t count) {
    used_ = (used_ + 255) / 256 * 256;
    U* p = base_ == nullptr ? nullptr : reinterpret_cast<U*>(base_ + used_);
    used_ += count * sizeof(U);
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

// f(T{}) for the element type of a dtype these passes take; false (f not
// called) for the others.
template <typename F>
bool VisitSelectable(rules::DType dtype, F&& f) {
  switch (dtype) {
    case rules::DType::kFloat32: f(float{}); return true;
    case rules::DType::kFloat64: f(double{}); return true;
    case rules::DType::kInt32: f(std::int32_t{}); return true;
    case rules::DType::kInt64: f(std::int64_t{}); return true;
    case rules::DType::kUInt32: f(std::uint32_t{}); return true;
    case rules::DType::kUInt64: f(std::uint64_t{}); return true;
    default: return false;
  }
}

}  // namespace tally::kernels::select

// Explicit instantiations of a pass's launcher struct for each element type
// VisitSelectable names (at namespace scope, where the struct lives).
#define TALLY_INSTANTIATE_FOR_SELECTABLE(Passes) \
  template struct Passes<float>;                \
  template struct Passes<double>;               \
  template struct Passes<std::int32_t>;         \
  template struct Passes<std::int64_t>;         \
  template struct Passes<std::uint32_t>;        \
  template struct Passes<std::uint64_t>
