// Lets the semantic definitions in tally/rules compile both as plain C++ (the
// CPU backend) and as CUDA device code (the kernels), so both share one
// definition of every rule.
#pragma once

#if defined(__CUDACC__)
#define TALLY_HD __host__ __device__ __forceinline__
#else
#define TALLY_HD inline
#endif

namespace tally::rules {

// Multiply and add that are never fused into an FMA. numpy's linspace rounds
// the product and the sum separately; matching its histogram edges bit for
// bit requires the same. (Host code is also built with -ffp-contract=off.)
TALLY_HD double MulRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TALLY_HD double AddRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

}  // namespace tally::rules
