// The exact pass inside a fused slice kernel (grid/aggregate_kernels.cuh,
// SliceKernel's kExact): the vectors a thread loads for the fused ops also
// go through the exact pass's runs and levels (exact_levels.cuh), so a plan
// of exact sums beside other ops (sum, max and a histogram; var and argmax)
// reads its data once instead of once a pass. Unmasked float32 and float64
// whole arrays; the digits, the counts and the bits are ExactKernel's,
// since each element is added exactly whichever thread and group take it.
#pragma once

#include <cstring>
#include <type_traits>

#include "../agent/agent_aggregate.cuh"
#include "exact_levels.cuh"

namespace tally::kernels::detail::exact {

// One thread's share of the exact pass, fed the groups the fused walk
// loads (AccumulateRange): a full group of V vectors joins the thread's run
// of narrow groups where it can; anything else goes vector by vector
// (float32) or element by element (float64), as ExactKernel's do.
template <bool kSquares, typename T>
struct ExactInFused {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  ThreadSums t;
  NarrowRun<kSquares, T> run;
  Digits block;

  template <int V, int K>
  __device__ __forceinline__ void Add(const T (&x)[V][K], int nvec) {
    static_assert(K * sizeof(T) == 16);
    uint4 a[V];
#pragma unroll
    for (int v = 0; v < V; ++v) std::memcpy(&a[v], x[v], 16);
    if (nvec == V && run.Take(a, t, block)) return;
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (v < nvec) Vector(a[v]);
  }
  __device__ __forceinline__ void AddOne(T x) { AddElement<kSquares>(x, t, block); }

  // The thread's run and levels into the block's digits, then the block's
  // into the states. Every thread of the block calls it.
  __device__ __forceinline__ void End(unsigned long long* sum_state, unsigned long long* squares_state) {
    run.End(t, block);
    EndBlock<kSquares, false, T>(t, block, sum_state, squares_state);
  }

 private:
  __device__ __forceinline__ void Vector(const uint4& a) {
    if constexpr (std::is_same_v<T, float>) {
      AddFloat32Vector<kSquares>(a, t, block);
    } else {
      AddElement<kSquares>(__hiloint2double(static_cast<int>(a.y), static_cast<int>(a.x)), t, block);
      AddElement<kSquares>(__hiloint2double(static_cast<int>(a.w), static_cast<int>(a.z)), t, block);
    }
  }
};

}  // namespace tally::kernels::detail::exact

namespace tally::kernels::detail {

// What AccumulateRange walks with when the exact pass rides along: each
// group the fused ops take, the exact pass takes too.
template <rules::DType D, bool kSquares>
struct AggWithExact {
  using T = typename DevTraits<D>::T;
  ThreadAgg<D, false>& agg;
  exact::ExactInFused<kSquares, T>& exact;

  template <int V, int K>
  __device__ __forceinline__ void Add(const T (&x)[V][K], const std::int64_t (&base)[V], int nvec) {
    agg.template Add<V, K>(x, base, nvec);
    exact.template Add<V, K>(x, nvec);
  }
  __device__ __forceinline__ void AddOne(T x, std::int64_t index) {
    agg.AddOne(x, index);
    exact.AddOne(x);
  }
  __device__ __forceinline__ void ShareWarp() { agg.ShareWarp(); }
};

}  // namespace tally::kernels::detail
