// Integer dtypes' exact sums for their means, variances, standard
// deviations and sums of squares: the elements' sum in 128 bits and their
// squares' in 192, integer additions whose result does not depend on the
// order, then put into an ExactSum (exact_sum.h) as a few exact doubles. So
// an integer mean or variance comes from the same exact sums, by the same
// formula (exact_moments.h, partial.h), on every backend and for every
// chunking, shard count and merge, as a float one does; numpy's own
// float64 pass over the converted elements rounds at each addition once the
// sum passes 2^53.
//
// The bounds: |x| < 2^64, so a sum of n < 2^63 elements fits 128 signed
// bits, and a square (< 2^128) sums into 192 bits with n < 2^64.
//
// Plain C++ and CUDA device code alike (hd.h): the cpu backend sums blocks
// with it (server/engine/cpu/exact_integers.h), the GPU's exact pass each
// thread's elements (kernels/src/exact/exact_levels.cuh).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tally/rules/hd.h"

namespace tally::rules {

struct IntegerSums {
  __int128 sum = 0;
  unsigned __int128 squares_low = 0;  // the squares' sum modulo 2^128
  std::uint64_t squares_high = 0;     // and its bits above

  // |v| as an unsigned number (v of any integer dtype, bool as 0 or 1).
  template <typename V>
  TALLY_HD static std::uint64_t Magnitude(V v) {
    if constexpr (std::is_signed_v<V>) {
      const auto w = static_cast<std::int64_t>(v);
      return w < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(w) : static_cast<std::uint64_t>(w);
    } else {
      return static_cast<std::uint64_t>(v);
    }
  }

  template <typename V>
  TALLY_HD void AddSum(V v) {
    if constexpr (std::is_signed_v<V>) {
      sum += static_cast<std::int64_t>(v);
    } else {
      sum += static_cast<__int128>(static_cast<std::uint64_t>(v));
    }
  }

  template <typename V>
  TALLY_HD void AddSquare(V v) {
    const std::uint64_t m = Magnitude(v);
    if constexpr (sizeof(V) <= 4) {
      squares_low += m * m;  // below 2^64: 2^64 of them before the low word could pass 2^128
    } else {
      const unsigned __int128 s = static_cast<unsigned __int128>(m) * m;
      squares_low += s;
      squares_high += squares_low < s ? 1u : 0u;
    }
  }

  // A block's sums taken elsewhere (the cpu backend's lanes).
  TALLY_HD void AddSquares(unsigned __int128 low, std::uint64_t high) {
    squares_low += low;
    squares_high += high + (squares_low < low ? 1u : 0u);
  }

  // The sum as exact doubles, calling put(part) for each non-zero one:
  // bits 0-51, 52-103, and 104 up with the sign (v = top * 2^104 + the low
  // bits, top = v >> 104 arithmetic, below 2^24 in size).
  template <typename Put>
  TALLY_HD void PutSum(const Put& put) const {
    const auto u = static_cast<unsigned __int128>(sum);
    PutPart(static_cast<std::uint64_t>(u) & kPartMask, 0, put);
    PutPart(static_cast<std::uint64_t>(u >> 52) & kPartMask, 52, put);
    const auto top = static_cast<std::int64_t>(sum >> 104);
    if (top != 0) put(Scaled(static_cast<double>(top), 104));
  }

  // The squares' sum as exact doubles: 52 bits a part, the last the
  // high word's bits above 2^156.
  template <typename Put>
  TALLY_HD void PutSquares(const Put& put) const {
    PutPart(static_cast<std::uint64_t>(squares_low) & kPartMask, 0, put);
    PutPart(static_cast<std::uint64_t>(squares_low >> 52) & kPartMask, 52, put);
    // Bits 104-155: the low word's 24 above 104 and the high word's 28 below 28.
    PutPart((static_cast<std::uint64_t>(squares_low >> 104) | (squares_high << 24)) & kPartMask, 104, put);
    PutPart(squares_high >> 28, 156, put);
  }

 private:
  static constexpr std::uint64_t kPartMask = (std::uint64_t{1} << 52) - 1;

  // v * 2^e, exact (v below 2^53 in size, 0 <= e < 1024).
  TALLY_HD static double Scaled(double v, int e) {
    const std::uint64_t bits = static_cast<std::uint64_t>(e + 1023) << 52;
    double p;
    std::memcpy(&p, &bits, sizeof p);
    return v * p;
  }
  template <typename Put>
  TALLY_HD static void PutPart(std::uint64_t bits, int e, const Put& put) {
    if (bits != 0) put(Scaled(static_cast<double>(bits), e));
  }
};

}  // namespace tally::rules
