// The histogram binner (tally/rules/histogram_bin.h, and the CPU backend's
// BinBlock over it) on the ranges at the ends of float32's and float64's
// exponent range and on every kind of value: answers must be numpy's edges'
// for every range numpy 2 accepts, and no range, accepted or not, may make
// it convert NaN, an infinity or an out-of-range value to an integer. Built
// twice: with the project's compiler, and with clang's
// -fsanitize=undefined (float-cast-overflow is in clang's set, not gcc's),
// which turns any such conversion into a failure. Plain C++, no test
// framework, so the sanitizer build is one compiler call.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "server/engine/cpu/block_kernels.h"
#include "tally/rules/histogram_bin.h"
#include "tests/unit/numpy_edges.h"

namespace tally::testing {
namespace {

int failures = 0;

struct Range {
  std::uint32_t bins;
  double lo, hi;
};

// The ranges, the ends of both exponent ranges, some plain ones.
std::vector<Range> FixedRanges() {
  const double tiny = std::numeric_limits<double>::denorm_min();
  return {
      {10, 1.0, 1.0 + 2e-16},         // every float64 edge 1.0
      {4, 1.0, 1.0 + 1e-12},          // (1, 1) in float32
      {65536, 0.0, 1e-300},           // float32: bins / (hi - lo) overflows
      {65536, 0.0, 5e-324},           // float64: the same
      {65536, 0.0, 65536 * 4 * tiny}, // float64 edges 4 subnormal spacings apart
      {65536, 0.0, 1e-36},            // float32 edges subnormal, scale infinite
      {1000, -1e-310, 1e-310},
      {65536, -3.4028236e38, 3.4028236e38},  // float32: lo and hi round to infinities
      {1, -1e300, 1e300},
      {2, -1e300, 1e300},
      {3, -5e38, 5e38},
      {2, -3e38, 3e38},                // float32: scale subnormal
      {65536, -8e307, 8e307},
      {1, -8e307, 8e307},
      {256, -1.0, 1.0},
      {7, 0.0, 200.0},
      {65536, -4.0, 4.0},
  };
}

// The narrowest ranges numpy 2 accepts, for 1, 256 and 65536 bins, at a few
// places on the number line.
template <typename T>
std::vector<Range> NarrowestRanges() {
  std::vector<Range> out;
  for (std::uint32_t bins : {1u, 256u, 65536u}) {
    for (double lo : {0.0, 1.0, -3.7, 1e30}) out.push_back({bins, lo, NarrowestAcceptedHi<T>(bins, lo)});
  }
  return out;
}

template <typename T>
std::vector<T> ValuesFor(const std::vector<T>& edges, std::mt19937_64& rng) {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  std::vector<T> v = {std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::quiet_NaN(),
                      kInf, -kInf, T(0), -T(0),
                      std::numeric_limits<T>::max(), std::numeric_limits<T>::lowest(),
                      std::numeric_limits<T>::min(), -std::numeric_limits<T>::min(),
                      std::numeric_limits<T>::denorm_min(), -std::numeric_limits<T>::denorm_min()};
  // Every edge and its neighbours (a sample of them for many bins).
  const std::size_t stride = edges.size() > 4097 ? 61 : 1;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    if (i % stride != 0 && i > 100 && i + 100 < edges.size()) continue;
    v.push_back(edges[i]);
    v.push_back(std::nextafter(edges[i], -kInf));
    v.push_back(std::nextafter(edges[i], kInf));
  }
  // Uniform over the range, and arbitrary bit patterns (NaNs, infinities,
  // subnormals, everything).
  const double lo = edges.front(), hi = edges.back();
  if (std::isfinite(hi - lo)) {
    std::uniform_real_distribution<double> in(lo, hi);
    for (int i = 0; i < 200; ++i) v.push_back(static_cast<T>(in(rng)));
  }
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  for (int i = 0; i < 1000; ++i) v.push_back(std::bit_cast<T>(static_cast<Bits>(rng())));
  return v;
}

template <typename T>
void CheckRange(const Range& r, std::mt19937_64& rng, const char* type) {
  const auto binner = rules::HistogramBinner<T>::Make(r.bins, r.lo, r.hi);
  const std::vector<T> edges = NumpyEdges<T>(r.bins, r.lo, r.hi);
  const bool accepted = Numpy2Accepts(edges);
  const std::vector<T> values = ValuesFor(edges, rng);
  std::vector<std::uint64_t> counts(r.bins, 0), want(r.bins, 0);
  std::uint64_t below = 0, above = 0, nan = 0;
  std::uint64_t want_out[3] = {0, 0, 0};  // below, above, nan
  int wrong = 0;
  for (T x : values) {
    const std::int32_t got = binner.Bin(x);
    if (got < rules::kBinNan || got >= static_cast<std::int32_t>(r.bins)) {
      std::printf("FAIL %s bins=%u [%.17g, %.17g]: Bin(%.9g) = %d is no bin\n", type, r.bins, r.lo, r.hi,
                  static_cast<double>(x), got);
      ++failures;
      return;
    }
    if (!accepted) continue;
    const std::int32_t expect = NumpyBinOf(edges, x);
    if (got != expect && wrong++ < 5) {
      std::printf("FAIL %s bins=%u [%.17g, %.17g]: Bin(%.17g) = %d, numpy's edges say %d\n", type, r.bins,
                  r.lo, r.hi, static_cast<double>(x), got, expect);
      ++failures;
    }
    if (expect >= 0) {
      ++want[static_cast<std::size_t>(expect)];
    } else {
      ++want_out[-expect - 1];
    }
  }
  // The CPU backend's loop over the same values.
  cpu::BinBlock<T, T>(values.data(), values.size(), binner, {counts.data(), &below, &above, &nan});
  if (accepted && (counts != want || below != want_out[0] || above != want_out[1] || nan != want_out[2])) {
    std::printf("FAIL %s bins=%u [%.17g, %.17g]: BinBlock's counts differ from numpy's edges'\n", type, r.bins,
                r.lo, r.hi);
    ++failures;
  }
}

// Integer input bins in float64, converting each value first.
template <typename V>
void CheckIntegers(std::mt19937_64& rng) {
  std::vector<V> values = {std::numeric_limits<V>::min(), std::numeric_limits<V>::max(), V(0), V(1)};
  for (int i = 0; i < 1000; ++i) values.push_back(static_cast<V>(rng()));
  for (const Range& r : FixedRanges()) {
    const auto binner = rules::HistogramBinner<double>::Make(r.bins, r.lo, r.hi);
    const std::vector<double> edges = NumpyEdges<double>(r.bins, r.lo, r.hi);
    std::vector<std::uint64_t> counts(r.bins, 0), want(r.bins, 0);
    std::uint64_t out[3] = {0, 0, 0}, want_out[3] = {0, 0, 0};
    cpu::BinBlock<V, double>(values.data(), values.size(), binner, {counts.data(), &out[0], &out[1], &out[2]});
    if (!Numpy2Accepts(edges)) continue;
    for (V x : values) {
      const std::int32_t b = NumpyBinOf(edges, static_cast<double>(x));
      if (b >= 0) {
        ++want[static_cast<std::size_t>(b)];
      } else {
        ++want_out[-b - 1];
      }
    }
    if (counts != want || out[0] != want_out[0] || out[1] != want_out[1] || out[2] != want_out[2]) {
      std::printf("FAIL integers of %zu bytes, bins=%u [%.17g, %.17g]: counts differ\n", sizeof(V), r.bins, r.lo,
                  r.hi);
      ++failures;
    }
  }
}

template <typename T>
int CheckAll(std::mt19937_64& rng, const char* type) {
  int accepted = 0;
  std::vector<Range> ranges = FixedRanges();
  for (const Range& r : NarrowestRanges<T>()) ranges.push_back(r);
  for (const Range& r : ranges) {
    CheckRange<T>(r, rng, type);
    accepted += Numpy2Accepts(NumpyEdges<T>(r.bins, r.lo, r.hi));
  }
  return accepted;
}

}  // namespace
}  // namespace tally::testing

int main() {
  using namespace tally::testing;
  const char* seed_env = std::getenv("TALLY_TEST_SEED");
  const std::uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 0) : std::random_device{}();
  std::mt19937_64 rng(seed);
  const int accepted32 = CheckAll<float>(rng, "float32");
  const int accepted64 = CheckAll<double>(rng, "float64");
  CheckIntegers<std::int32_t>(rng);
  CheckIntegers<std::int64_t>(rng);
  CheckIntegers<std::uint32_t>(rng);
  CheckIntegers<std::uint8_t>(rng);
  std::printf("%s: %d float32 and %d float64 ranges numpy 2 accepts checked against its edges (seed %llu)\n",
              failures ? "FAILED" : "passed", accepted32, accepted64, static_cast<unsigned long long>(seed));
  return failures ? 1 : 0;
}
