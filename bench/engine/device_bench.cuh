// What the CUDA benchmarks share: stopping with the CUDA error and where it
// was recorded, the median of repetitions, and well-spread device values.
#pragma once

#include <errno.h>  // program_invocation_short_name

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tally/kernels/cuda_error.h"

namespace tally::bench {

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

inline void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorName(e) + " " + tally::cuda::LastErrorWhere());
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// splitmix64: distinct, well spread values from the index and the seed.
__device__ inline unsigned long long Spread(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace tally::bench

#define CHECK(expr) ::tally::bench::Check((expr), #expr)
