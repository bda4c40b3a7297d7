// The exact pass's device pieces, shared by its whole-array kernel
// (exact_sum.cu) and its rows kernel (exact_rows.cu): a thread's float64
// levels, each taking the error of the one above by TwoSum, the last one's
// error added into fixed-point digits (rules::ExactSum's) by integer
// atomics; what one element adds (AddElement); the carry between launches.
//
// One state serves sum and nansum: its digits skip NaNs and count them,
// and ResultView::ExactState adds them back for sum. A square of a
// float32, float16 or bfloat16 is a double; a float64's is x * x plus its
// FMA error, two values (the cpu backend's definition, exact wherever
// neither underflows: rules/exact_moments.h). Integer elements (the means
// and variances of integer dtypes) are summed in integers instead
// (rules::IntegerSums) and join the digits as exact doubles at the flush.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tally/kernels/aggregate.h"
#include "tally/rules/exact_integers.h"
#include "tally/rules/exact_sum.h"
#include "tally/rules/half.h"

namespace tally::kernels::detail::exact {

using rules::ExactSum;

constexpr int kLevels = 3;
constexpr int kDigits = ExactSum::kDigits;
// The words of a state after its digits (ResultLayout::kExact*).
constexpr int kNan = ResultLayout::kExactNan, kPositiveInf = ResultLayout::kExactPositiveInf,
              kNegativeInf = ResultLayout::kExactNegativeInf, kOther = ResultLayout::kExactOther,
              kSeen = ResultLayout::kExactSeen, kStateWords = ResultLayout::kExactStateWords;

__device__ __forceinline__ void AtomicAddValue(unsigned long long* digits, double x) {
  ExactSum::Placed p;
  if (!ExactSum::Place(x, p)) return;
  // Two's complement: adding a negative part modulo 2^64 is signed addition.
  atomicAdd(&digits[p.first], static_cast<unsigned long long>(p.part[0]));
  atomicAdd(&digits[p.first + 1], static_cast<unsigned long long>(p.part[1]));
  atomicAdd(&digits[p.first + 2], static_cast<unsigned long long>(p.part[2]));
}

// AtomicAddValue for every lane of a warp at once (each lane its own x, 0
// adding nothing): where the lanes' values place at one first digit, as
// the levels of a warp's threads at their end mostly do, their parts are
// summed by shuffles (each below 2^32, so 32 of them below 2^37: exact)
// and one lane adds the three sums, where the lanes' 96 atomics on the same
// three words serialised in shared memory (at the end of every block of
// every launch: the pass's tail, most of a small array's time). Otherwise
// each lane adds its own. Every lane of the warp calls it.
__device__ __forceinline__ void WarpAtomicAddValue(unsigned long long* digits, double x) {
  constexpr unsigned kAll = 0xffffffffu;
  ExactSum::Placed p;
  const bool placed = ExactSum::Place(x, p);
  const unsigned lanes = __ballot_sync(kAll, placed);
  if (lanes == 0) return;
  const int first = __shfl_sync(kAll, placed ? p.first : 0, __ffs(static_cast<int>(lanes)) - 1);
  if (!__all_sync(kAll, !placed || p.first == first)) {
    if (placed) {
      atomicAdd(&digits[p.first], static_cast<unsigned long long>(p.part[0]));
      atomicAdd(&digits[p.first + 1], static_cast<unsigned long long>(p.part[1]));
      atomicAdd(&digits[p.first + 2], static_cast<unsigned long long>(p.part[2]));
    }
    return;
  }
  long long part[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) part[i] = placed ? p.part[i] : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int i = 0; i < 3; ++i) part[i] += __shfl_xor_sync(kAll, part[i], o);
  }
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      if (part[i] != 0) atomicAdd(&digits[first + i], static_cast<unsigned long long>(part[i]));
    }
  }
}

// s + x = t + e exactly (Knuth's TwoSum; the _rn intrinsics keep any FMA out).
__device__ __forceinline__ double TwoSum(double s, double x, double& t) {
  t = __dadd_rn(s, x);
  const double bv = __dsub_rn(t, s);
  const double av = __dsub_rn(t, bv);
  return __dadd_rn(__dsub_rn(s, av), __dsub_rn(x, bv));
}

// A thread's levels: x joins the first, each level's rounding error the
// next, the last one's the digits.
struct Levels {
  double level[kLevels] = {0.0, 0.0, 0.0};

  __device__ __forceinline__ void Add(double x, unsigned long long* digits) {
    double e = x;
#pragma unroll
    for (int k = 0; k < kLevels; ++k) {
      double s;
      e = TwoSum(level[k], e, s);
      level[k] = s;
      if (e == 0.0) return;
    }
    AtomicAddValue(digits, e);
  }
  // Into the digits, and cleared.
  __device__ __forceinline__ void Flush(unsigned long long* digits) {
#pragma unroll
    for (int k = 0; k < kLevels; ++k) {
      if (level[k] != 0.0) AtomicAddValue(digits, level[k]);
      level[k] = 0.0;
    }
  }
  // Flush with every lane of the warp at once (WarpAtomicAddValue).
  __device__ __forceinline__ void FlushWarp(unsigned long long* digits) {
#pragma unroll
    for (int k = 0; k < kLevels; ++k) {
      WarpAtomicAddValue(digits, level[k]);
      level[k] = 0.0;
    }
  }
};

struct Digits {
  unsigned long long* sum;
  unsigned long long* squares;
};

// What a thread has added since its last flush.
struct ThreadSums {
  Levels sum, squares;
  rules::IntegerSums integers;  // an integer dtype's elements and squares
  unsigned long long seen = 0;  // valid elements (masked plans)
  unsigned long long nan = 0, positive_inf = 0, negative_inf = 0, squares_inf = 0;
  bool other = false;  // a non-NaN element other than -0.0

  // Into the digits, and cleared. kWarp: every lane of the warp flushes
  // at once (Levels::FlushWarp; integer sums lane by lane).
  template <bool kSquares, typename T, bool kWarp = false>
  __device__ __forceinline__ void Flush(const Digits& into) {
    if constexpr (std::is_integral_v<T>) {
      integers.PutSum([&](double part) { AtomicAddValue(into.sum, part); });
      if constexpr (kSquares) integers.PutSquares([&](double part) { AtomicAddValue(into.squares, part); });
      integers = rules::IntegerSums{};
    } else if constexpr (kWarp) {
      sum.FlushWarp(into.sum);
      if constexpr (kSquares) squares.FlushWarp(into.squares);
    } else {
      sum.Flush(into.sum);
      if constexpr (kSquares) squares.Flush(into.squares);
    }
  }
};

template <typename T>
__device__ __forceinline__ double ToDouble(T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));  // float16, bfloat16: exact
  }
}

// One float element: NaNs and infinities counted, finite values (and
// their squares) into the levels.
template <bool kSquares, typename T>
__device__ __forceinline__ void AddFloatElement(T v, ThreadSums& t, const Digits& into) {
  const double x = ToDouble(v);
  const std::uint64_t bits = static_cast<std::uint64_t>(__double_as_longlong(x));
  if (((bits >> 52) & 0x7ff) == 0x7ff) {  // an infinity or a NaN: counted, not added
    if ((bits & ((std::uint64_t{1} << 52) - 1)) != 0) {
      ++t.nan;
      return;
    }
    if ((bits >> 63) != 0) {
      ++t.negative_inf;
    } else {
      ++t.positive_inf;
    }
    if constexpr (kSquares) ++t.squares_inf;
    t.other = true;
    return;
  }
  t.other = t.other || bits != 0x8000000000000000u;
  t.sum.Add(x, into.sum);
  if constexpr (kSquares) {
    const double p = __dmul_rn(x, x);
    if constexpr (std::is_same_v<T, double>) {
      if (isinf(p)) {  // past 2^512: the square is +inf, as numpy's
        ++t.squares_inf;
        return;
      }
      t.squares.Add(p, into.squares);
      const double e = __fma_rn(x, x, -p);
      if (e != 0.0) t.squares.Add(e, into.squares);
    } else {
      t.squares.Add(p, into.squares);  // exact: at most 48 significant bits
    }
  }
}

// One element of any dtype the pass takes: integers into the thread's
// integer sums (no NaNs, no infinities, and none of them -0.0).
template <bool kSquares, typename T>
__device__ __forceinline__ void AddElement(T v, ThreadSums& t, const Digits& into) {
  if constexpr (std::is_integral_v<T>) {
    t.integers.AddSum(v);
    if constexpr (kSquares) t.integers.AddSquare(v);
    t.other = true;
  } else {
    AddFloatElement<kSquares>(v, t, into);
  }
}

// Four float32 elements (a 16-byte load, no mask). Where none is an
// infinity or a NaN and their exponent fields (a subnormal's taken as 1,
// zeros aside) lie within 26 of each other, their float64 sum is exact: each
// is below 2^(emax-126) and a multiple of 2^(emin-150), so any partial sum
// needs at most emax - emin + 26 <= 52 bits. One TwoSum then takes four
// elements (the elements' levels cost most of the pass: docs/performance.md).
// Otherwise, and for the squares, element by element.
template <bool kSquares>
__device__ __forceinline__ void AddFloat32Vector(const uint4& a, ThreadSums& t, const Digits& into) {
  const unsigned u[4] = {a.x, a.y, a.z, a.w};
  int emax = 0, emin = 255;
  bool special = false, other = false;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int field = static_cast<int>((u[j] >> 23) & 0xffu);
    special = special || field == 0xff;
    other = other || u[j] != 0x80000000u;
    if ((u[j] & 0x7fffffffu) != 0) {
      const int e = field == 0 ? 1 : field;
      emax = max(emax, e);
      emin = min(emin, e);
    }
  }
  if (special || emax - emin > 26) {
#pragma unroll
    for (int j = 0; j < 4; ++j) AddElement<kSquares>(__uint_as_float(u[j]), t, into);
    return;
  }
  t.other = t.other || other;
  double x[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = static_cast<double>(__uint_as_float(u[j]));
  t.sum.Add(__dadd_rn(__dadd_rn(x[0], x[1]), __dadd_rn(x[2], x[3])), into.sum);
  if constexpr (kSquares) {
    if (emax - emin <= 15) {
      // The squares (exact, below 2^P with P = 2 (emax - 126)) split at the
      // grid G = 2^(P-26) by adding and taking away sigma = 1.5 * 2^(P+26)
      // (whose ulp is G): the high parts are multiples of G below 2^P, four
      // of them sum exactly in 28 bits; the low parts lie below G/2 on the
      // squares' grid 2^(2 emin - 300), four of them within 2 (emax - emin)
      // + 23 <= 53 bits. Two TwoSums take four squares.
      const int P = 2 * (emax - 126);
      const double sigma =
          __longlong_as_double(static_cast<long long>((static_cast<unsigned long long>(1023 + P + 26) << 52) |
                                                      (1ull << 51)));
      double high = 0.0, low = 0.0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const double p = __dmul_rn(x[j], x[j]);
        const double h = __dsub_rn(__dadd_rn(sigma, p), sigma);
        high = __dadd_rn(high, h);
        low = __dadd_rn(low, __dsub_rn(p, h));
      }
      t.squares.Add(high, into.squares);
      t.squares.Add(low, into.squares);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) t.squares.Add(__dmul_rn(x[j], x[j]), into.squares);  // exact: 48 bits at most
    }
  }
}

// 1.5 * 2^(field - 1023), for a float64 exponent field in [1, 2046]: the
// sigma whose ulp is 2^(field - 1075), which rounds what is added to it (far
// below it) to that grid.
__device__ __forceinline__ double OneAndAHalfTimes(int field) {
  return __longlong_as_double(static_cast<long long>((static_cast<unsigned long long>(field) << 52) | (1ull << 51)));
}

// A thread's run of narrow groups (the 16-byte vectors it loads at a time,
// unmasked float32 or float64): groups whose magnitudes all lie in
// one window below 2^top share grids at which every element (and square)
// splits into parts that sum exactly in float64 in any order, for up to
// kMaxElements elements. The run's parts join the levels only when it ends,
// so an element costs a few float64 operations where the levels' TwoSums
// cost 6 a level (the grids and their proofs are the cpu backend's:
// server/engine/cpu/exact_lanes.h, IsNarrowBlock, NarrowSquaresLanes,
// NarrowSplitLanes, NarrowSquares64Lanes). A group that does not fit the run
// ends it and starts the next; one too wide for any run (or holding an
// infinity or a NaN) is left to the caller, element by element.
//
// float32 (an element's exponent field f, a subnormal's taken as 1; top is
// a field: magnitudes below 2^(top - 126), every non-zero f >= top - 18):
// elements are multiples of 2^(top - 168), 2^11 of them sum below
// 2^(top - 115): exact. Squares (exact in float64) are multiples of
// 2^(2 top - 336) below 2^(2 top - 252), split at G = 2^(2 top - 294): the
// high parts of 2^11 sum within 2^53 G, the low parts (at most G/2) within
// 2^53 of their grid. float64 (top a field: magnitudes below 2^e, e = top -
// 1022): the elements split once at 2^(e - 42) when every non-zero f >= top
// - 32 and e in [-1000, 1010]; the squares, x * x and its FMA error, at
// 2^(2e - 42) and 2^(2e - 96) when every f >= top - 15 and e in [-469, 506].
template <bool kSquares, typename T>
struct NarrowRun {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  static constexpr bool kDouble = std::is_same_v<T, double>;
  static constexpr int kPerVector = 16 / static_cast<int>(sizeof(T));
  static constexpr int kMaxElements = 2048;  // 2^11 elements a run
  // How far below top a non-zero element's field may lie.
  static constexpr int kWindow = kDouble ? (kSquares ? 15 : 32) : 18;
  // The fields top may take (float64: the grids' ranges above).
  static constexpr int kLowestTop = kDouble ? (kSquares ? 553 : 22) : 1;
  static constexpr int kHighestTop = kDouble ? (kSquares ? 1528 : 2032) : 255;
  // A new run's top lies this far above its first group's largest field
  // (within the window), so that later groups a little larger still fit.
  static constexpr int kHeadroom = 2;

  template <int N>
  static __device__ __forceinline__ bool AllNegativeZeros(const uint4 (&a)[N]) {
    bool all = true;
#pragma unroll
    for (int v = 0; v < N; ++v) {
      if constexpr (kDouble) {
        all = all && a[v].y == 0x80000000u && a[v].w == 0x80000000u;  // the low words are zero here
      } else {
        all = all && a[v].x == 0x80000000u && a[v].y == 0x80000000u && a[v].z == 0x80000000u &&
              a[v].w == 0x80000000u;
      }
    }
    return all;
  }

  int top = 0;       // 0: no run
  int elements = 0;  // elements taken
  double sum_sigma = 0.0, square_sigma = 0.0, error_sigma = 0.0;
  double sum_high = 0.0, sum_low = 0.0;  // float32: the elements' sum in sum_high
  double square_high = 0.0, square_low = 0.0, error_high = 0.0, error_low = 0.0;

  // Takes one group's elements, N vectors (false: not narrow, left to the
  // caller).
  // The group's range from its magnitudes' bits as integers (a finite
  // magnitude orders as its bits do; an infinity or a NaN lies above every
  // finite one; a zero's bits less one wrap to the largest): four integer
  // operations an element, the bound of the pass where a field was taken
  // from each (the integer pipe's 64 operations a clock an SM).
  template <int N>
  __device__ __forceinline__ bool Take(const uint4 (&a)[N], ThreadSums& t, const Digits& into) {
    static_assert(N * kPerVector <= kMaxElements);
    unsigned largest = 0, least = 0xffffffffu;  // least: the least non-zero magnitude, less one
    if constexpr (kDouble) {
      // The high word's magnitude, its lowest bit set where the low word
      // is not zero, so a subnormal below 2^-1042 is not taken for a zero.
#pragma unroll
      for (int v = 0; v < N; ++v) {
        const unsigned key[2] = {(a[v].y & 0x7fffffffu) | min(a[v].x, 1u), (a[v].w & 0x7fffffffu) | min(a[v].z, 1u)};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          largest = max(largest, key[j]);
          least = min(least, key[j] - 1u);
        }
      }
      if (largest >= 0x7ff00000u) return false;  // an infinity or a NaN
    } else {
#pragma unroll
      for (int v = 0; v < N; ++v) {
        const unsigned mag[4] = {a[v].x & 0x7fffffffu, a[v].y & 0x7fffffffu, a[v].z & 0x7fffffffu,
                                 a[v].w & 0x7fffffffu};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          largest = max(largest, mag[j]);
          least = min(least, mag[j] - 1u);
        }
      }
      if (largest >= 0x7f800000u) return false;
    }
    if (largest == 0) {  // zeros only: nothing to add; any +0.0 is an element other than -0.0
      t.other = t.other || !AllNegativeZeros(a);
      return true;
    }
    t.other = true;
    int high, low;
    if constexpr (kDouble) {
      high = static_cast<int>(largest >> 20);
      low = static_cast<int>((least + 1u) >> 20);
      if (low == 0) low = -1;  // a subnormal fits no window
    } else {
      high = max(static_cast<int>(largest >> 23), 1);  // a subnormal is a multiple of 2^(1 - 150)
      low = max(static_cast<int>((least + 1u) >> 23), 1);
    }
    if (top == 0 || high > top || low < top - kWindow || elements + N * kPerVector > kMaxElements) {
      const int next = min(min(high + kHeadroom, low + kWindow), kHighestTop);
      if (next < high || next < kLowestTop || low < next - kWindow) return false;
      End(t, into);
      Start(next);
    }
    elements += N * kPerVector;
    if constexpr (kDouble) {
#pragma unroll
      for (int v = 0; v < N; ++v) {
        const double x[2] = {__hiloint2double(static_cast<int>(a[v].y), static_cast<int>(a[v].x)),
                             __hiloint2double(static_cast<int>(a[v].w), static_cast<int>(a[v].z))};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const double h = __dsub_rn(__dadd_rn(sum_sigma, x[j]), sum_sigma);
          sum_high = __dadd_rn(sum_high, h);
          sum_low = __dadd_rn(sum_low, __dsub_rn(x[j], h));
          if constexpr (kSquares) {
            const double q = __dmul_rn(x[j], x[j]);
            const double err = __fma_rn(x[j], x[j], -q);
            const double sh = __dsub_rn(__fma_rn(x[j], x[j], square_sigma), square_sigma);
            const double eh = __dsub_rn(__dadd_rn(error_sigma, err), error_sigma);
            square_high = __dadd_rn(square_high, sh);
            square_low = __dadd_rn(square_low, __dsub_rn(q, sh));
            error_high = __dadd_rn(error_high, eh);
            error_low = __dadd_rn(error_low, __dsub_rn(err, eh));
          }
        }
      }
    } else {
#pragma unroll
      for (int v = 0; v < N; ++v) {
        const unsigned u[4] = {a[v].x, a[v].y, a[v].z, a[v].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const double x = static_cast<double>(__uint_as_float(u[j]));
          sum_high = __dadd_rn(sum_high, x);
          if constexpr (kSquares) {
            const double p = __dmul_rn(x, x);  // exact: 48 bits at most
            const double h = __dsub_rn(__dadd_rn(square_sigma, p), square_sigma);
            square_high = __dadd_rn(square_high, h);
            square_low = __dadd_rn(square_low, __dsub_rn(p, h));
          }
        }
      }
    }
    return true;
  }

  // The run's parts into the levels; no run after.
  __device__ __forceinline__ void End(ThreadSums& t, const Digits& into) {
    if (top == 0) return;
    t.sum.Add(sum_high, into.sum);
    if constexpr (kDouble) t.sum.Add(sum_low, into.sum);
    if constexpr (kSquares) {
      t.squares.Add(square_high, into.squares);
      t.squares.Add(square_low, into.squares);
      if constexpr (kDouble) {
        t.squares.Add(error_high, into.squares);
        t.squares.Add(error_low, into.squares);
      }
    }
    top = 0;
  }

 private:
  __device__ __forceinline__ void Start(int field) {
    top = field;
    elements = 0;
    sum_high = sum_low = square_high = square_low = error_high = error_low = 0.0;
    if constexpr (kDouble) {
      sum_sigma = OneAndAHalfTimes(top + 11);           // ulp 2^(e - 42)
      square_sigma = OneAndAHalfTimes(2 * top - 1011);  // ulp 2^(2e - 42)
      error_sigma = OneAndAHalfTimes(2 * top - 1065);   // ulp 2^(2e - 96)
    } else {
      square_sigma = OneAndAHalfTimes(2 * top + 781);  // ulp 2^(2 top - 294)
    }
  }
};

// The block's digits cleared; the caller's barrier then orders it before
// any thread adds to them.
__device__ __forceinline__ void ClearBlockDigits(const Digits& block, bool squares) {
  for (int k = threadIdx.x; k < kDigits; k += blockDim.x) {
    block.sum[k] = 0;
    if (squares) block.squares[k] = 0;
  }
}

// The end of a block's share: each thread's levels into the block's
// digits and its counts into the states, then the block's digits into the
// states (integer atomics: exact in any order). Every thread of the block
// calls it, in whole warps.
template <bool kSquares, bool kMasked, typename T>
__device__ __forceinline__ void EndBlock(ThreadSums& t, const Digits& block, unsigned long long* sum_state,
                                         unsigned long long* squares_state) {
  t.Flush<kSquares, T, /*kWarp=*/true>(block);
  if (t.nan != 0) atomicAdd(&sum_state[kNan], t.nan);
  if (t.positive_inf != 0) atomicAdd(&sum_state[kPositiveInf], t.positive_inf);
  if (t.negative_inf != 0) atomicAdd(&sum_state[kNegativeInf], t.negative_inf);
  if constexpr (kMasked) {
    if (t.seen != 0) atomicAdd(&sum_state[kSeen], t.seen);
  }
  if constexpr (kSquares) {
    if (t.squares_inf != 0) atomicAdd(&squares_state[kPositiveInf], t.squares_inf);
  }
  const int other = __syncthreads_or(t.other ? 1 : 0);  // also orders the shared atomics before the reads
  if (threadIdx.x == 0 && other != 0) atomicOr(&sum_state[kOther], 1ull);
  for (int k = threadIdx.x; k < kDigits; k += blockDim.x) {
    if (block.sum[k] != 0) atomicAdd(&sum_state[k], block.sum[k]);
    if constexpr (kSquares) {
      if (block.squares[k] != 0) atomicAdd(&squares_state[k], block.squares[k]);
    }
  }
}

template <bool kMasked>
__device__ __forceinline__ bool Valid(const std::uint32_t* validity, std::uint64_t at) {
  if constexpr (!kMasked) return true;
  return ((validity[at >> 5] >> (at & 31)) & 1u) != 0;
}

// Moves each digit's excess over 32 bits into the next (rules::ExactSum's
// Carry), so the digits can take further launches without overflowing: a
// carried digit holds below 2^32, and a launch adds far below 2^62.
__device__ __forceinline__ void CarryDigits(unsigned long long* state) {
  auto* digit = reinterpret_cast<long long*>(state);
  for (int k = 0; k + 1 < kDigits; ++k) {
    const long long up = digit[k] >> 32;
    digit[k] = static_cast<long long>(static_cast<unsigned long long>(digit[k]) & 0xffffffffu);
    digit[k + 1] += up;
  }
}

}  // namespace tally::kernels::detail::exact
