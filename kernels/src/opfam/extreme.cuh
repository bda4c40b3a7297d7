// OP_MIN / OP_MAX with numpy's NaN rule (rules::MinNan/MaxNan). float32 uses
// the hardware's NaN-propagating min/max, which gives the same answer.
#pragma once

#include <limits>

#include "tally/rules/combine.h"
#include "../device_traits.cuh"

namespace tally::kernels::detail {

template <rules::DType D>
struct ExtremeOp {
  using T = typename DevTraits<D>::T;
  using E = typename DevTraits<D>::E;

  static TALLY_DEV T MinIdentity() {
    if constexpr (DevTraits<D>::kFloat) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static TALLY_DEV T MaxIdentity() {
    if constexpr (DevTraits<D>::kFloat) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static TALLY_DEV T Min(T a, T b) {
    if constexpr (D == rules::DType::kFloat32) {
      float r;
      asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
      return r;
    } else if constexpr (DevTraits<D>::kFloat) {
      return rules::MinNan(a, b);
    } else {
      return b < a ? b : a;
    }
  }
  static TALLY_DEV T Max(T a, T b) {
    if constexpr (D == rules::DType::kFloat32) {
      float r;
      asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
      return r;
    } else if constexpr (DevTraits<D>::kFloat) {
      return rules::MaxNan(a, b);
    } else {
      return b > a ? b : a;
    }
  }
  // Stored partials (a precedes b).
  static TALLY_DEV E MergeMin(E a, E b) { return rules::MinNan(a, b); }
  static TALLY_DEV E MergeMax(E a, E b) { return rules::MaxNan(a, b); }
};

}  // namespace tally::kernels::detail
