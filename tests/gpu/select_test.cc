// GPU tests of tally/kernels/select.h: order statistics, top-k and
// HyperLogLog on the device against the host's own steps (rules/agg's
// states) and a sorted copy, over every dtype the passes take and arrays
// that stress them: NaN with several payloads, -0.0 beside 0.0, infinities,
// heavy duplicates, few distinct values, sorted and constant arrays, all-NaN,
// random bit patterns, and a start that is not 16-byte aligned.
// TALLY_GPU_TEST_SMALL=1 drops the largest sizes (for compute-sanitizer).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tally/kernels/cuda_error.h"
#include "tally/kernels/select.h"
#include "tally/rules/agg/hll_state.h"
#include "tally/rules/agg/quantile_state.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/topk_state.h"
#include "tests/gpu/gpu_test_util.h"

namespace tally::testing {
namespace {

using rules::DType;
using rules::OpKind;
using rules::OpSpec;

enum class Shape { kUniform, kNans, kZeros, kFewDistinct, kSorted, kConstant, kAllNan, kBits, kNarrow };
constexpr Shape kShapes[] = {Shape::kUniform, Shape::kNans,  Shape::kZeros, Shape::kFewDistinct, Shape::kSorted,
                             Shape::kConstant, Shape::kAllNan, Shape::kBits,  Shape::kNarrow};

const char* NameOf(Shape s) {
  switch (s) {
    case Shape::kUniform: return "uniform";
    case Shape::kNans: return "nans";
    case Shape::kZeros: return "zeros";
    case Shape::kFewDistinct: return "few-distinct";
    case Shape::kSorted: return "sorted";
    case Shape::kConstant: return "constant";
    case Shape::kAllNan: return "all-nan";
    case Shape::kBits: return "bits";
    case Shape::kNarrow: return "narrow";
  }
  return "?";
}

template <typename T>
T FromBits(std::uint64_t b) {
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  return std::bit_cast<T>(static_cast<U>(b));
}

template <typename T>
std::vector<T> Make(Shape shape, std::uint64_t n) {
  auto& rng = Rng();
  std::vector<T> x(n);
  constexpr bool kFloat = std::is_floating_point_v<T>;
  const T nan_a = kFloat ? std::numeric_limits<T>::quiet_NaN() : T{};
  const T nan_b = kFloat ? -std::numeric_limits<T>::quiet_NaN() : T{};
  const T nan_c = kFloat ? FromBits<T>(sizeof(T) == 8 ? 0x7ff0000000000123ull : 0x7f800123u) : T{};  // signalling
  std::uniform_real_distribution<double> u(-1000.0, 1000.0);
  for (std::uint64_t i = 0; i < n; ++i) {
    T v{};
    switch (shape) {
      case Shape::kUniform:
      case Shape::kSorted:
      case Shape::kNans:
        if constexpr (kFloat) {
          v = static_cast<T>(u(rng));
        } else {
          v = static_cast<T>(rng());
        }
        if (shape == Shape::kNans && kFloat) {
          const std::uint64_t r = rng() % 100;
          if (r == 0) v = nan_a;
          if (r == 1) v = nan_b;
          if (r == 2) v = nan_c;
          if (r == 3) v = std::numeric_limits<T>::infinity();
          if (r == 4) v = -std::numeric_limits<T>::infinity();
        }
        break;
      case Shape::kZeros:  // half zeros (both signs), the rest spread
        if (rng() % 2 == 0) {
          v = kFloat && rng() % 2 ? static_cast<T>(-0.0) : T{0};
        } else if constexpr (kFloat) {
          v = static_cast<T>(u(rng) / 1000.0);
        } else {
          v = static_cast<T>(rng() % 1000);
        }
        break;
      case Shape::kFewDistinct: {
        const int pick = static_cast<int>(rng() % 7);
        if constexpr (kFloat) {
          const T values[] = {T(-2.5), T(0), T(-0.0), T(1), T(7), std::numeric_limits<T>::infinity(), nan_a};
          v = values[pick];
        } else {
          const T values[] = {T(3), T(0), T(1), std::numeric_limits<T>::max(), std::numeric_limits<T>::lowest(),
                              T(42), T(7)};
          v = values[pick];
        }
        break;
      }
      case Shape::kConstant: v = T(3); break;
      case Shape::kAllNan: v = kFloat ? (rng() % 2 ? nan_a : nan_b) : T(5); break;
      case Shape::kBits: v = FromBits<T>(rng()); break;  // every exponent: denormals, infinities, NaNs
      case Shape::kNarrow:  // a dense cluster in a wide range
        if constexpr (kFloat) {
          v = static_cast<T>(1e6 + static_cast<double>(rng() % 2001) * 0.001);
        } else {
          v = static_cast<T>(1000 + rng() % 300);
        }
        break;
    }
    x[i] = v;
  }
  if (shape == Shape::kSorted) {
    std::sort(x.begin(), x.end(), [](T a, T b) { return a < b; });  // NaN-free here
  }
  return x;
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, std::int64_t>) return DType::kInt64;
  if constexpr (std::is_same_v<T, std::uint32_t>) return DType::kUInt32;
  return DType::kUInt64;
}

template <typename T>
std::uint64_t Bits(T v) {
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  return std::bit_cast<U>(v);
}

// Device memory holding the array at an offset of `shift` elements from a
// 256-byte aligned allocation (shift 1: not 16-byte aligned), poisoned around.
template <typename T>
class OnDevice {
 public:
  OnDevice(const std::vector<T>& x, int shift) {
    const std::size_t bytes = (x.size() + 8) * sizeof(T);
    EXPECT_EQ(cudaMalloc(&base_, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(base_, 0xA5, bytes), cudaSuccess);
    data_ = static_cast<T*>(base_) + shift;
    if (!x.empty()) {
      EXPECT_EQ(cudaMemcpy(data_, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~OnDevice() { (void)cudaFree(base_); }
  const T* data() const { return data_; }

 private:
  void* base_ = nullptr;
  T* data_ = nullptr;
};

class Scratch {
 public:
  explicit Scratch(std::size_t bytes) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<std::size_t>(bytes, 1)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p_, 0x5A, std::max<std::size_t>(bytes, 1)), cudaSuccess);  // kernels must not rely on zeros
    // The poison is on the legacy stream, the passes on a non-blocking one.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~Scratch() { (void)cudaFree(p_); }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

struct Stream {
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { (void)cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

std::vector<std::uint64_t> Sizes() {
  std::vector<std::uint64_t> s = {1, 2, 5, 1000, 65536, 65537, (1u << 20) + 3};
  if (!Small()) s.push_back((1u << 24) + 11);
  return s;
}

// The non-NaN elements sorted, -0.0 as 0.0 (the device's keys order them
// equal, and report a zero as 0.0).
template <typename T>
std::vector<T> SortedNumbers(const std::vector<T>& x) {
  std::vector<T> v;
  v.reserve(x.size());
  for (T e : x) {
    if (e != e) continue;
    if constexpr (std::is_floating_point_v<T>) {
      if (e == 0) e = T(0);
    }
    v.push_back(e);
  }
  std::sort(v.begin(), v.end());
  return v;
}

// Ranks to ask for: the ends, the middle, and random ones (sorted, distinct).
std::vector<std::uint64_t> SomeRanks(std::uint64_t numbers, std::size_t many) {
  std::vector<std::uint64_t> r = {0, numbers - 1, numbers / 2, (numbers - 1) / 2};
  auto& rng = Rng();
  for (std::size_t i = 0; i < many; ++i) r.push_back(rng() % numbers);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

template <typename T>
void CheckOrderStatistics(const std::vector<T>& x, int shift, const std::string& what) {
  const std::vector<T> sorted = SortedNumbers(x);
  OnDevice<T> d(x, shift);
  const kernels::DeviceArray a{DTypeOf<T>(), d.data(), x.size()};
  ASSERT_EQ(kernels::CheckSelectable(a), cudaSuccess) << cuda::LastErrorWhere();
  constexpr std::size_t kMaxRanks = 300;
  std::size_t bytes = 0;
  CUDA_OK(kernels::OrderStatistics::ScratchBytes(a, kMaxRanks, &bytes));
  Scratch scratch(bytes);
  Stream stream;
  kernels::OrderStatistics select(a, kMaxRanks, scratch.get(), bytes, stream.s);
  std::uint64_t nan = ~0ull;
  CUDA_OK(select.Count(&nan));
  ASSERT_EQ(nan, x.size() - sorted.size()) << what;
  if (sorted.empty()) return;
  const std::vector<std::uint64_t> ranks = SomeRanks(sorted.size(), 250);
  std::vector<std::uint64_t> bits(ranks.size(), 0xdeadbeefdeadbeefull);
  CUDA_OK(select.Select(ranks, bits));
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    ASSERT_EQ(bits[i], Bits(sorted[ranks[i]])) << what << ": rank " << ranks[i] << " of " << sorted.size();
  }
}

// Ranks at (and beside) fractions of the non-NaN elements, sorted, distinct.
std::vector<std::uint64_t> RanksAt(std::uint64_t numbers, const std::vector<double>& fractions) {
  std::vector<std::uint64_t> r;
  for (const double f : fractions) {
    const auto at = static_cast<std::uint64_t>(f * static_cast<double>(numbers - 1));
    r.push_back(at);
    if (at + 1 < numbers) r.push_back(at + 1);
  }
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// The ranks at `asked`, with Count told to expect `hints`: the elements of
// a sorted copy whether or not the counting pass gathered them. Returns
// whether it did (PassStats::gathered_while_counting).
template <typename T>
bool CheckHintedOrderStatistics(const std::vector<T>& x, int shift, const std::vector<double>& hints,
                                const std::vector<double>& asked, const std::string& what) {
  const std::vector<T> sorted = SortedNumbers(x);
  OnDevice<T> d(x, shift);
  const kernels::DeviceArray a{DTypeOf<T>(), d.data(), x.size()};
  // Room for two ranks a hint or fraction asked, as a quantile op asks.
  const std::size_t kMaxRanks = std::max<std::size_t>(16, 2 * std::max(hints.size(), asked.size()));
  std::size_t bytes = 0;
  EXPECT_EQ(kernels::OrderStatistics::ScratchBytes(a, kMaxRanks, &bytes), cudaSuccess);
  Scratch scratch(bytes);
  Stream stream;
  kernels::OrderStatistics select(a, kMaxRanks, scratch.get(), bytes, stream.s);
  std::uint64_t nan = ~0ull;
  EXPECT_EQ(select.Count(&nan, hints), cudaSuccess) << cuda::LastErrorWhere();
  EXPECT_EQ(nan, x.size() - sorted.size()) << what;
  if (sorted.empty()) return false;
  const std::vector<std::uint64_t> ranks = RanksAt(sorted.size(), asked);
  std::vector<std::uint64_t> bits(ranks.size(), 0xdeadbeefdeadbeefull);
  EXPECT_EQ(select.Select(ranks, bits), cudaSuccess) << cuda::LastErrorWhere();
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    EXPECT_EQ(bits[i], Bits(sorted[ranks[i]])) << what << " (hinted): rank " << ranks[i] << " of " << sorted.size();
  }
  return select.stats().gathered_while_counting;
}

template <typename T>
void CheckQuantiles(const std::vector<T>& x, int shift, const std::string& what) {
  OnDevice<T> d(x, shift);
  const kernels::DeviceArray a{DTypeOf<T>(), d.data(), x.size()};
  std::vector<OpSpec> ops;
  ops.push_back({.kind = OpKind::kMedian});
  ops.push_back({.kind = OpKind::kNanMedian});
  OpSpec q{.kind = OpKind::kQuantile};
  for (int i = 0; i <= 64; ++i) q.q.push_back(i / 64.0);
  q.q.push_back(0.999);
  for (int m = 0; m < rules::kNumQuantileMethods; ++m) {
    q.method = static_cast<rules::QuantileMethod>(m);
    ops.push_back(q);
    OpSpec nq = q;
    nq.kind = OpKind::kNanQuantile;
    ops.push_back(nq);
  }
  std::size_t bytes = 0;
  CUDA_OK(kernels::OrderStatistics::ScratchBytes(a, 4096, &bytes));
  Scratch scratch(bytes);
  Stream stream;
  kernels::OrderStatistics select(a, 4096, scratch.get(), bytes, stream.s);
  std::uint64_t nan = 0;
  CUDA_OK(select.Count(&nan));
  const std::uint64_t numbers = x.size() - nan;
  for (const OpSpec& op : ops) {
    const bool skips = op.kind == OpKind::kNanQuantile || op.kind == OpKind::kNanMedian;
    const rules::agg::quantile_detail::QuantilePicks picks(op, numbers, nan, skips);
    std::vector<std::uint64_t> bits(picks.ranks().size());
    if (!bits.empty()) {
      CUDA_OK(select.Select(picks.ranks(), bits));
    }
    rules::agg::RowAnswer gpu, host;
    const auto gpu_none = picks.template Answer<T>(
        [&](std::uint64_t rank) {
          const auto at = std::lower_bound(picks.ranks().begin(), picks.ranks().end(), rank) - picks.ranks().begin();
          return FromBits<T>(bits[at]);
        },
        gpu);
    std::unique_ptr<rules::agg::State> state = rules::agg::Of(op.kind).state->Init(op, DTypeOf<T>());
    state->Update({.data = reinterpret_cast<const std::byte*>(x.data()), .count = x.size()});
    const auto host_none = state->Finalize(host);
    ASSERT_EQ(gpu_none.has_value(), host_none.has_value()) << what;
    ASSERT_EQ(gpu.doubles.size(), host.doubles.size()) << what;
    for (std::size_t i = 0; i < gpu.doubles.size(); ++i) {
      const double g = gpu.doubles[i], h = host.doubles[i];
      // Bitwise, but for the sign of a zero (the host's nth_element may
      // leave -0.0 or 0.0 at a rank; the device reports 0.0).
      const bool same = std::bit_cast<std::uint64_t>(g) == std::bit_cast<std::uint64_t>(h) ||
                        (g == 0 && h == 0) || (std::isnan(g) && std::isnan(h));
      ASSERT_TRUE(same) << what << ": " << rules::Name(op.kind) << " method " << static_cast<int>(op.method)
                        << " answer " << i << ": gpu " << g << " host " << h;
    }
  }
}

template <typename T>
void CheckTopK(const std::vector<T>& x, int shift, std::uint32_t k, bool largest, const std::string& what) {
  OnDevice<T> d(x, shift);
  const kernels::DeviceArray a{DTypeOf<T>(), d.data(), x.size()};
  std::size_t bytes = 0;
  CUDA_OK(kernels::TopKScratchBytes(a, k, &bytes));
  Scratch scratch(bytes);
  Stream stream;
  std::vector<std::uint64_t> bits(k, 0xdeadbeefull), index(k, ~0ull);
  std::uint64_t count = 0;
  kernels::PassStats stats;
  CUDA_OK(kernels::TopK(a, k, largest, scratch.get(), bytes, stream.s, bits.data(), index.data(), &count, &stats));
  const OpSpec op{.kind = largest ? OpKind::kTopK : OpKind::kBottomK, .k = k};
  std::unique_ptr<rules::agg::State> state = rules::agg::Of(op.kind).state->Init(op, DTypeOf<T>());
  state->Update({.data = reinterpret_cast<const std::byte*>(x.data()), .count = x.size()});
  rules::agg::RowAnswer host;
  ASSERT_FALSE(state->Finalize(host).has_value());
  ASSERT_EQ(count, host.indices.size()) << what;
  for (std::uint64_t i = 0; i < count; ++i) {
    ASSERT_EQ(static_cast<std::int64_t>(index[i]), host.indices[i]) << what << ": entry " << i << " (passes "
                                                                     << stats.full_passes << ")";
    const T v = FromBits<T>(bits[i]);
    ASSERT_EQ(Bits(v), Bits(x[index[i]])) << what << ": entry " << i;
  }
}

// The host state's bytes after the device's sketch is read into it, against
// the host state's own over the same elements: the same registers or hashes.
template <typename T>
void CheckHll(const std::vector<T>& x, int shift, std::uint32_t p, const std::string& what) {
  OnDevice<T> d(x, shift);
  const kernels::DeviceArray a{DTypeOf<T>(), d.data(), x.size()};
  std::size_t bytes = 0;
  CUDA_OK(kernels::HllScratchBytes(a, p, &bytes));
  Scratch scratch(bytes);
  Stream stream;
  kernels::HllSketch sketch;
  CUDA_OK(kernels::Hll(a, p, scratch.get(), bytes, stream.s, &sketch));
  const OpSpec op{.kind = OpKind::kHll, .precision = p};
  const rules::agg::Function& f = rules::agg::Of(OpKind::kHll);
  std::unique_ptr<rules::agg::State> host = f.state->Init(op, DTypeOf<T>());
  host->Update({.data = reinterpret_cast<const std::byte*>(x.data()), .count = x.size()});
  std::string host_bytes;
  host->Serialize(host_bytes);
  std::string gpu_bytes;
  rules::agg::Writer w(gpu_bytes);
  rules::agg::PutHeader(w, f.wire, DTypeOf<T>(), op);
  if (sketch.dense) {
    w.Put(rules::agg::hll_detail::kDense);
    w.PutBytes(sketch.registers.data(), sketch.registers.size());
  } else {
    w.Put(rules::agg::hll_detail::kSparse);
    w.Put(static_cast<std::uint64_t>(sketch.hashes.size()));
    w.PutBytes(sketch.hashes.data(), sketch.hashes.size() * sizeof(std::uint64_t));
  }
  ASSERT_EQ(gpu_bytes.size(), host_bytes.size()) << what << (sketch.dense ? " (gpu dense)" : " (gpu sparse)");
  if (gpu_bytes != host_bytes) {
    std::size_t at = 0;
    while (gpu_bytes[at] == host_bytes[at]) ++at;
    FAIL() << what << (sketch.dense ? " (dense)" : " (sparse)") << ": the states' bytes differ first at byte " << at
           << " of " << host_bytes.size() << ": gpu " << int(std::uint8_t(gpu_bytes[at])) << " host "
           << int(std::uint8_t(host_bytes[at]));
  }
}

template <typename T>
void ForShapes(const char* type, auto&& check) {
  for (const std::uint64_t n : Sizes()) {
    for (const Shape shape : kShapes) {
      if (n > (1u << 20) && shape != Shape::kUniform && shape != Shape::kNans && shape != Shape::kZeros &&
          shape != Shape::kFewDistinct) {
        continue;  // the largest size for the shapes that matter most, to bound the host's time
      }
      const std::vector<T> x = Make<T>(shape, n);
      for (const int shift : {0, 1}) {
        if (shift == 1 && n > (1u << 20)) continue;
        const std::string what = std::string(type) + " " + NameOf(shape) + " n=" + std::to_string(n) +
                                 (shift ? " unaligned" : "");
        check(x, shift, what);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

#define TALLY_FOR_TYPES(body)                        \
  do {                                               \
    { using T = float; const char* type = "float32"; body; }        \
    { using T = double; const char* type = "float64"; body; }       \
    { using T = std::int32_t; const char* type = "int32"; body; }   \
    { using T = std::int64_t; const char* type = "int64"; body; }   \
    { using T = std::uint32_t; const char* type = "uint32"; body; } \
    { using T = std::uint64_t; const char* type = "uint64"; body; } \
  } while (0)

TEST(SelectGpu, OrderStatisticsMatchASortedCopy) {
  TALLY_REQUIRE_GPU("order statistics");
  TALLY_FOR_TYPES(ForShapes<T>(type, [](const std::vector<T>& x, int shift, const std::string& what) {
    CheckOrderStatistics<T>(x, shift, what);
  }));
}

// Count's hints: the median's and the ends' ranks, and a few quantiles',
// for every dtype and shape; on uniform data of 2^20 elements or more the
// counting pass must have gathered them (else the hints did nothing), and
// hints that point elsewhere than the ranks asked must still give the
// sorted copy's elements, by a second read. 64 quantiles' hints, more than
// the window pass takes, go without it.
TEST(SelectGpu, HintedOrderStatisticsMatchASortedCopy) {
  TALLY_REQUIRE_GPU("order statistics");
  const std::vector<double> median = {0.5};
  const std::vector<double> several = {0.0, 0.01, 0.25, 0.5, 0.9, 0.999, 1.0};
  TALLY_FOR_TYPES(ForShapes<T>(type, [&](const std::vector<T>& x, int shift, const std::string& what) {
    const bool large_uniform = x.size() >= (1u << 20) && what.find("uniform") != std::string::npos;
    const bool m = CheckHintedOrderStatistics<T>(x, shift, median, median, what + ", median");
    const bool q = CheckHintedOrderStatistics<T>(x, shift, several, several, what + ", 7 quantiles");
    if (large_uniform) {
      EXPECT_TRUE(m) << what << ": the median's buckets were not gathered while counting";
      EXPECT_TRUE(q) << what << ": the quantiles' buckets were not gathered while counting";
    }
    const bool wrong = CheckHintedOrderStatistics<T>(x, shift, {0.1}, {0.9}, what + ", hinted elsewhere");
    if (large_uniform) {
      EXPECT_FALSE(wrong) << what << ": a rank outside the gathered buckets was read from them";
    }
    std::vector<double> many;
    for (int i = 1; i <= 64; ++i) many.push_back(i / 65.0);
    CheckHintedOrderStatistics<T>(x, shift, many, many, what + ", 64 quantiles");
  }));
}

// A spike of one value holding 40% of the elements amid a dense spread in
// the same bin, so that its bucket overflows the gathering room and the
// refining pass runs; and over a thousand ranks in as many buckets, so
// that the gathering pass reserves places with atomics.
TEST(SelectGpu, OrderStatisticsOfSpikesAndManyRanks) {
  TALLY_REQUIRE_GPU("order statistics");
  auto& rng = Rng();
  const std::uint64_t n = Small() ? (1u << 20) : (1u << 24);
  std::vector<std::int32_t> ints(n);
  std::vector<float> floats(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    const bool spike = rng() % 10 < 4;
    ints[i] = spike ? 500 : static_cast<std::int32_t>(rng() % (1u << 20));
    floats[i] = spike ? 1.5f : 1.0f + static_cast<float>(rng() % (1u << 23)) / static_cast<float>(1u << 23);
  }
  CheckOrderStatistics<std::int32_t>(ints, 0, "int32 spike");
  CheckOrderStatistics<float>(floats, 0, "float32 spike");
  // Many ranks: every rank's element against the sorted copy.
  const std::vector<double> x = Make<double>(Shape::kUniform, 1u << 20);
  const std::vector<double> sorted = SortedNumbers(x);
  OnDevice<double> d(x, 0);
  const kernels::DeviceArray a{DType::kFloat64, d.data(), x.size()};
  std::size_t bytes = 0;
  CUDA_OK(kernels::OrderStatistics::ScratchBytes(a, 4096, &bytes));
  Scratch scratch(bytes);
  Stream stream;
  kernels::OrderStatistics select(a, 4096, scratch.get(), bytes, stream.s);
  std::uint64_t nan = 0;
  CUDA_OK(select.Count(&nan));
  const std::vector<std::uint64_t> ranks = SomeRanks(sorted.size(), 3000);
  std::vector<std::uint64_t> bits(ranks.size());
  CUDA_OK(select.Select(ranks, bits));
  for (std::size_t i = 0; i < ranks.size(); ++i) ASSERT_EQ(bits[i], Bits(sorted[ranks[i]])) << "rank " << ranks[i];
}

TEST(SelectGpu, QuantilesMatchTheHostState) {
  TALLY_REQUIRE_GPU("quantiles");
  TALLY_FOR_TYPES(ForShapes<T>(type, [](const std::vector<T>& x, int shift, const std::string& what) {
    if (x.size() > (1u << 20)) return;  // the host's 28 sorts per size are slow beyond
    CheckQuantiles<T>(x, shift, what);
  }));
}

TEST(SelectGpu, TopKMatchesTheHostState) {
  TALLY_REQUIRE_GPU("top-k");
  TALLY_FOR_TYPES(ForShapes<T>(type, [](const std::vector<T>& x, int shift, const std::string& what) {
    for (const std::uint32_t k : {1u, 8u, 1024u, 65536u}) {
      for (const bool largest : {true, false}) {
        CheckTopK<T>(x, shift, k, largest,
                     what + (largest ? " topk " : " bottomk ") + std::to_string(k));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }));
}

TEST(SelectGpu, HllMatchesTheHostState) {
  TALLY_REQUIRE_GPU("hll");
  TALLY_FOR_TYPES(ForShapes<T>(type, [](const std::vector<T>& x, int shift, const std::string& what) {
    for (const std::uint32_t p : {4u, 12u, 16u, 17u, 18u}) {
      CheckHll<T>(x, shift, p, what + " p=" + std::to_string(p));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }));
  // Distinct counts around the exact form's limit (2^p / 4 = 1024 at p = 12).
  for (const std::uint64_t distinct : {1000u, 1024u, 1025u, 1100u, 1200u, 1400u}) {
    std::vector<std::int64_t> x(1u << 20);
    auto& rng = Rng();
    for (auto& v : x) v = static_cast<std::int64_t>(rng() % distinct);
    for (std::uint64_t i = 0; i < distinct; ++i) x[i] = static_cast<std::int64_t>(i);
    CheckHll<std::int64_t>(x, 0, 12, "int64 distinct=" + std::to_string(distinct));
  }
}

}  // namespace
}  // namespace tally::testing
