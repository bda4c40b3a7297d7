// GPU tests of tally/kernels/segmented.h: every dtype, sum/min/max/mean
// alone and together, offsets with empty segments at the start, middle and
// end, piles of them at one offset, single elements, huge segments spanning
// many tiles, NaNs and integer wraparound, against a host reference in
// higher precision on fresh random inputs with poisoned outputs and scratch.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tally/kernels/cuda_error.h"
#include "tally/rules/agg/registry.h"
#include "tests/gpu/gpu_test_util.h"
#include "tally/kernels/segmented.h"
#include "tally/rules/combine.h"

namespace tally::testing {
namespace {

using kernels::SegmentedLayout;
using kernels::SegmentedPlan;
using rules::DType;
using rules::OpKind;

constexpr rules::OpMask kSum = rules::Bit(OpKind::kSum), kMin = rules::Bit(OpKind::kMin),
                        kMax = rules::Bit(OpKind::kMax), kMean = rules::Bit(OpKind::kMean),
                        kCount = rules::Bit(OpKind::kCount);
constexpr rules::OpMask kAll = kSum | kMin | kMax | kMean | kCount;

// Offsets from segment lengths.
std::vector<std::int64_t> OffsetsOf(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> off(lengths.size() + 1, 0);
  for (std::size_t i = 0; i < lengths.size(); ++i) off[i + 1] = off[i] + lengths[i];
  return off;
}

// Lengths of every kind: a few empty segments first and last, then a mix of
// empty, single, short, mid and long ones (one in 20 up to 100000, so some
// span dozens of tiles).
std::vector<std::int64_t> MixedLengths(std::size_t segments) {
  std::vector<std::int64_t> len;
  auto& rng = Rng();
  std::uniform_int_distribution<int> kind(0, 99);
  for (int i = 0; i < 3; ++i) len.push_back(0);
  for (std::size_t i = 0; i < segments; ++i) {
    const int k = kind(rng);
    if (k < 25) len.push_back(0);
    else if (k < 45) len.push_back(1);
    else if (k < 80) len.push_back(std::uniform_int_distribution<std::int64_t>(2, 100)(rng));
    else if (k < 95) len.push_back(std::uniform_int_distribution<std::int64_t>(101, 10000)(rng));
    else len.push_back(std::uniform_int_distribution<std::int64_t>(10001, 100000)(rng));
  }
  for (int i = 0; i < 3; ++i) len.push_back(0);
  return len;
}

// The host reference for one segment.
struct RefSeg {
  long double fsum = 0, abs_sum = 0;  // float dtypes
  std::uint64_t isum = 0;             // integer dtypes, modulo 2^64
  long double dsum = 0, abs_dsum = 0; // the elements as float64, summed exactly enough
  bool min_nan = false, max_nan = false;
  double fmin = 0, fmax = 0;          // float dtypes, in float64 (exact)
  std::int64_t imin = 0, imax = 0;
  std::uint64_t umin = 0, umax = 0;
};

template <DType D>
std::vector<RefSeg> Reference(const std::vector<V<D>>& x, const std::vector<std::int64_t>& off) {
  using T = V<D>;
  std::vector<RefSeg> out(off.size() - 1);
  for (std::size_t s = 0; s + 1 < off.size(); ++s) {
    RefSeg& o = out[s];
    T mn{}, mx{};
    for (std::int64_t i = off[s]; i < off[s + 1]; ++i) {
      const T v = x[static_cast<std::size_t>(i)];
      const double dv = static_cast<double>(v);
      if constexpr (rules::IsFloat(D)) {
        o.fsum += static_cast<long double>(dv);
        o.abs_sum += std::fabs(static_cast<long double>(dv));
      } else {
        o.isum += static_cast<std::uint64_t>(v);
      }
      o.dsum += static_cast<long double>(dv);
      o.abs_dsum += std::fabs(static_cast<long double>(dv));
      mn = i == off[s] ? v : rules::MinNan(mn, v);
      mx = i == off[s] ? v : rules::MaxNan(mx, v);
    }
    if (off[s + 1] > off[s]) {
      o.min_nan = rules::IsNan(mn);
      o.max_nan = rules::IsNan(mx);
      if constexpr (rules::IsFloat(D)) {
        o.fmin = static_cast<double>(mn);
        o.fmax = static_cast<double>(mx);
      } else {
        o.imin = static_cast<std::int64_t>(mn);
        o.imax = static_cast<std::int64_t>(mx);
        o.umin = static_cast<std::uint64_t>(mn);
        o.umax = static_cast<std::uint64_t>(mx);
      }
    } else {
      // The documented identities of an empty segment.
      if constexpr (rules::IsFloat(D)) {
        o.fmin = std::numeric_limits<double>::infinity();
        o.fmax = -std::numeric_limits<double>::infinity();
      } else {
        o.imin = static_cast<std::int64_t>(std::numeric_limits<T>::max());
        o.imax = static_cast<std::int64_t>(std::numeric_limits<T>::lowest());
        o.umin = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
        o.umax = static_cast<std::uint64_t>(std::numeric_limits<T>::lowest());
      }
    }
  }
  return out;
}

// Device buffers for one call; freed on every path.
struct Buffers {
  void* data = nullptr;
  void* offsets = nullptr;
  void* result = nullptr;
  void* scratch = nullptr;
  cudaStream_t stream = nullptr;
  ~Buffers() {
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(data));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(offsets));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(result));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(scratch));
    if (stream) TALLY_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  }
};

constexpr unsigned char kResultPoison = 0xA5;

// Runs the plan; the result bytes (layout.bytes and one guard byte) land in
// `out`. `shift_data` / `shift_offsets`: start the data one element, the
// offsets one int64, past a 16-byte boundary, so that the copies' ragged
// edges are exercised.
template <DType D>
void RunSegments(rules::OpMask ops, const std::vector<V<D>>& x, const std::vector<std::int64_t>& off,
                 bool shift_data, bool shift_offsets, std::vector<unsigned char>* out) {
  using T = V<D>;
  SegmentedPlan plan;
  plan.dtype = D;
  plan.ops = ops;
  plan.length = x.size();
  plan.segments = off.size() - 1;
  CUDA_OK(kernels::Validate(plan));
  const SegmentedLayout lay = kernels::LayoutOf(plan);
  std::size_t scratch = 0;
  CUDA_OK(kernels::SegmentedScratchBytes(plan, &scratch));
  Buffers b;
  CUDA_OK(cudaStreamCreate(&b.stream));
  CUDA_OK(cudaMalloc(&b.data, x.size() * sizeof(T) + 16));
  CUDA_OK(cudaMalloc(&b.offsets, off.size() * 8 + 16));
  CUDA_OK(cudaMalloc(&b.result, lay.bytes + 1));
  CUDA_OK(cudaMalloc(&b.scratch, scratch + 1));
  T* d_x = static_cast<T*>(b.data) + (shift_data ? 1 : 0);
  std::int64_t* d_off = static_cast<std::int64_t*>(b.offsets) + (shift_offsets ? 1 : 0);
  if (!x.empty()) {
    CUDA_OK(cudaMemcpy(d_x, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaMemcpy(d_off, off.data(), off.size() * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(b.result, kResultPoison, lay.bytes + 1));
  CUDA_OK(cudaMemset(b.scratch, 0x5A, scratch + 1));
  CUDA_OK(kernels::AggregateSegments(plan, d_x, d_off, b.result, b.scratch, scratch, b.stream));
  CUDA_OK(cudaStreamSynchronize(b.stream));
  CUDA_OK(cudaGetLastError());
  out->resize(lay.bytes + 1);
  CUDA_OK(cudaMemcpy(out->data(), b.result, lay.bytes + 1, cudaMemcpyDeviceToHost));
}

// A float64 sum against its long double reference: NaN for NaN, the same
// infinity, else within `tol`.
template <typename R>
R At(const std::vector<unsigned char>& res, std::size_t offset, std::size_t s) {
  R v;
  std::memcpy(&v, res.data() + offset + s * sizeof(R), sizeof(R));
  return v;
}

// Runs and compares every stored field of every segment with the reference.
template <DType D>
void CheckCase(rules::OpMask ops, const std::vector<V<D>>& x, const std::vector<std::int64_t>& off,
               const std::string& label, bool shift_data = false, bool shift_offsets = false) {
  std::vector<unsigned char> res;
  RunSegments<D>(ops, x, off, shift_data, shift_offsets, &res);
  if (::testing::Test::HasFatalFailure()) return;
  SegmentedPlan plan;
  plan.dtype = D;
  plan.ops = ops;
  plan.length = x.size();
  plan.segments = off.size() - 1;
  const SegmentedLayout lay = kernels::LayoutOf(plan);
  const std::vector<RefSeg> ref = Reference<D>(x, off);
  const std::string what = std::string(rules::Name(D)) + " " + label + " n=" + std::to_string(x.size()) +
                           " segments=" + std::to_string(plan.segments) + " ops=" + std::to_string(ops) +
                           (shift_data ? " data+1" : "") + (shift_offsets ? " offsets+1" : "");
  EXPECT_EQ(res[lay.bytes], kResultPoison) << what << ": wrote past the result";
  int failures = 0;
  auto fail = [&](std::size_t s, const char* field, long double got, long double want) {
    ADD_FAILURE() << what << " segment " << s << " (length " << off[s + 1] - off[s] << ") " << field
                  << ": got " << static_cast<double>(got) << " want " << static_cast<double>(want);
    ++failures;
  };
  for (std::size_t s = 0; s < ref.size() && failures < 5; ++s) {
    const RefSeg& o = ref[s];
    if (lay.sum != SegmentedLayout::kAbsent) {
      if constexpr (rules::IsFloat(D)) {
        const double got = At<double>(res, lay.sum, s);
        if (!Close(got, o.fsum, 1e-12L * o.abs_sum + 1e-300L)) fail(s, "sum", got, o.fsum);
      } else {
        const std::uint64_t got = At<std::uint64_t>(res, lay.sum, s);
        if (got != o.isum) fail(s, "sum", static_cast<long double>(got), static_cast<long double>(o.isum));
      }
    }
    if (lay.dsum != SegmentedLayout::kAbsent) {
      const double got = At<double>(res, lay.dsum, s);
      if (!Close(got, o.dsum, 1e-12L * o.abs_dsum + 1e-300L)) fail(s, "dsum", got, o.dsum);
      if (rules::IsFloat(D) && lay.sum != SegmentedLayout::kAbsent &&
          std::memcmp(res.data() + lay.dsum + 8 * s, res.data() + lay.sum + 8 * s, 8) != 0)
        fail(s, "dsum bits == sum bits", got, At<double>(res, lay.sum, s));
    }
    for (const bool is_max : {false, true}) {
      const std::size_t at = is_max ? lay.max : lay.min;
      if (at == SegmentedLayout::kAbsent) continue;
      const char* name = is_max ? "max" : "min";
      if constexpr (rules::IsFloat(D)) {
        const double got = At<double>(res, at, s);
        const bool nan = is_max ? o.max_nan : o.min_nan;
        const double want = is_max ? o.fmax : o.fmin;
        if (nan ? !std::isnan(got) : got != want) fail(s, name, got, want);
      } else if constexpr (rules::IsSigned(D)) {
        const std::int64_t got = At<std::int64_t>(res, at, s);
        const std::int64_t want = is_max ? o.imax : o.imin;
        if (got != want) fail(s, name, got, want);
      } else {
        const std::uint64_t got = At<std::uint64_t>(res, at, s);
        const std::uint64_t want = is_max ? o.umax : o.umin;
        if (got != want) fail(s, name, got, want);
      }
    }
  }
}


template <DType D>
std::vector<V<D>> RandomFor(const std::vector<std::int64_t>& off) {
  return Random<D>(static_cast<std::uint64_t>(off.back()));
}

// --- every dtype, every op ------------------------------------------------

TEST(Segmented, EveryDTypeEveryOpMixedLengths) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    const auto off = OffsetsOf(MixedLengths(400));
    const auto x = RandomFor<D>(off);
    for (rules::OpMask ops : {kAll, kSum, kMin, kMax, kMean, kSum | kMean, kMin | kMax, kCount | kSum}) {
      CheckCase<D>(ops, x, off, "mixed");
    }
    CheckCase<D>(kAll, x, off, "mixed", true, false);
    CheckCase<D>(kAll, x, off, "mixed", false, true);
    CheckCase<D>(kSum, x, off, "mixed", true, true);
  });
}

TEST(Segmented, EmptySegmentsAtStartMiddleEndAndPiledUp) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    // Empty first and last, a pile of 100000 at one offset in the middle
    // (26 tiles of ends alone), then short segments.
    std::vector<std::int64_t> len(5, 0);
    for (int i = 0; i < 50; ++i) len.push_back(1 + i % 7);
    len.insert(len.end(), 100000, 0);
    for (int i = 0; i < 3000; ++i) len.push_back(i % 5 == 0 ? 0 : 1 + i % 40);
    len.insert(len.end(), 7, 0);
    const auto off = OffsetsOf(len);
    const auto x = RandomFor<D>(off);
    CheckCase<D>(kAll, x, off, "empty piles");
    CheckCase<D>(kSum, x, off, "empty piles");
    // Every seventh segment empty among uniform 1-64.
    std::vector<std::int64_t> len7;
    std::uniform_int_distribution<std::int64_t> u(1, 64);
    for (int i = 0; i < 40000; ++i) len7.push_back(i % 7 == 6 ? 0 : u(Rng()));
    const auto off7 = OffsetsOf(len7);
    const auto x7 = RandomFor<D>(off7);
    CheckCase<D>(kAll, x7, off7, "every 7th empty");
  });
}

TEST(Segmented, AllSegmentsEmptyAndNoSegments) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::size_t segs : {1ul, 5ul, 3840ul, 3841ul, 20000ul}) {
      const std::vector<std::int64_t> off(segs + 1, 0);
      CheckCase<D>(kAll, std::vector<V<D>>{}, off, "all empty");
      CheckCase<D>(kSum, std::vector<V<D>>{}, off, "all empty");
    }
  });
  // No segments at all: nothing to write, nothing to fail.
  SegmentedPlan plan;
  plan.ops = kSum;
  EXPECT_EQ(kernels::Validate(plan), cudaSuccess);
  EXPECT_EQ(kernels::LayoutOf(plan).bytes, 0u);
  EXPECT_EQ(kernels::AggregateSegments(plan, nullptr, nullptr, nullptr, nullptr, 0, nullptr), cudaSuccess);
}

TEST(Segmented, SingleElementSegments) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::size_t segs : {1ul, 31ul, 1920ul, 1921ul, 100003ul}) {
      const auto off = OffsetsOf(std::vector<std::int64_t>(segs, 1));
      CheckCase<D>(kAll, RandomFor<D>(off), off, "single elements");
    }
  });
}

// One segment over many tiles (a window of thousands of carries), between
// small ones, and the whole array as one segment.
TEST(Segmented, HugeSegments) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    const std::int64_t huge = D == DType::kFloat32 || D == DType::kInt8 ? (1ll << 24) + 7 : 3000017;
    const auto off = OffsetsOf({0, 5, 1, huge, 1, 0, 77, 0});
    const auto x = RandomFor<D>(off);
    CheckCase<D>(kAll, x, off, "huge");
    CheckCase<D>(kSum, x, off, "huge", true, true);
    const auto whole = OffsetsOf({1000003});
    CheckCase<D>(kAll, RandomFor<D>(whole), whole, "whole array");
  });
}

// Segment lengths around the kernels' tile sizes (3500, 4000, 6000 and 7000
// elements for 8-, 1-, 2- and 4-byte dtypes, less the tile's ends), so that
// segments start and end at, just before and just after tile boundaries.
TEST(Segmented, LengthsAroundTheTile) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  std::vector<std::int64_t> len;
  for (std::int64_t tile : {3500, 4000, 6000, 7000}) {
    for (std::int64_t l : {tile - 2, tile - 1, tile, tile + 1, 2 * tile - 1, 2 * tile, std::int64_t{0}, std::int64_t{1},
                           std::int64_t{15}, std::int64_t{16}, std::int64_t{17}})
      len.push_back(l);
  }
  for (int i = 0; i < 120; ++i) len.push_back(6998 + i % 3);
  std::uniform_int_distribution<std::int64_t> u(1, 20000);
  for (int i = 0; i < 100; ++i) len.push_back(u(Rng()));
  const auto off = OffsetsOf(len);
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    const auto x = RandomFor<D>(off);
    CheckCase<D>(kAll, x, off, "around tile");
    CheckCase<D>(kSum | kMean, x, off, "around tile", true, false);
  });
}

// --- NaN and integer wraparound ----------------------------------------------

template <DType D>
void NanCase() {
  using T = V<D>;
  const auto off = OffsetsOf({10, 1, 0, 5000, 9000, 3, 100000, 64, 1});
  auto x = RandomFor<D>(off);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  x[3] = nan;                 // inside segment 0
  x[10] = nan;                // segment 1 (one element)
  x[11 + 4999] = nan;         // last element of segment 3
  x[11 + 5000 + 4500] = nan;  // middle of segment 4
  x[off[6] + 77777] = nan;    // inside the long segment
  CheckCase<D>(kAll, x, off, "nan");
  CheckCase<D>(kMin, x, off, "nan");
  CheckCase<D>(kMax, x, off, "nan");
}

TEST(Segmented, NanInsideSegmentsGivesNanMinMax) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  NanCase<DType::kFloat32>();
  NanCase<DType::kFloat64>();
  NanCase<DType::kFloat16>();
  NanCase<DType::kBFloat16>();
}

TEST(Segmented, IntegerSumsWrapModulo2To64) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  {
    const auto off = OffsetsOf({3, 1, 0, 50000, 2});
    std::vector<std::int64_t> x(static_cast<std::size_t>(off.back()), std::numeric_limits<std::int64_t>::max());
    x[4 + 100] = std::numeric_limits<std::int64_t>::lowest();
    CheckCase<DType::kInt64>(kAll, x, off, "int64 wraps");
  }
  {
    const auto off = OffsetsOf({3, 50000, 2});
    std::vector<std::uint64_t> x(static_cast<std::size_t>(off.back()), std::numeric_limits<std::uint64_t>::max() - 3);
    CheckCase<DType::kUInt64>(kAll, x, off, "uint64 wraps");
  }
  // Random full-range int64: wraps in most segments.
  const auto off = OffsetsOf(MixedLengths(300));
  CheckCase<DType::kInt64>(kSum | kMean, RandomFor<DType::kInt64>(off), off, "int64 random");
}

// --- determinism and plan checks --------------------------------------------

TEST(Segmented, DeterministicBitwise) {
  TALLY_REQUIRE_GPU("GPU segmented kernel tests");
  const auto off = OffsetsOf(MixedLengths(2000));
  const auto x = RandomFor<DType::kFloat32>(off);
  std::vector<unsigned char> first, again;
  RunSegments<DType::kFloat32>(kAll, x, off, false, false, &first);
  for (int i = 0; i < 3; ++i) {
    RunSegments<DType::kFloat32>(kAll, x, off, false, false, &again);
    ASSERT_EQ(first, again) << "run " << i;
  }
}

TEST(Segmented, RejectsBadPlans) {
  SegmentedPlan plan;
  plan.length = 10;
  plan.segments = 2;
  plan.ops = 0;
  EXPECT_EQ(kernels::Validate(plan), cudaErrorInvalidValue);
  for (OpKind k : {OpKind::kSumSquares, OpKind::kVariance, OpKind::kStddev, OpKind::kArgmin,
                   OpKind::kArgmax, OpKind::kHistogram, OpKind::kNanSum, OpKind::kProduct}) {
    plan.ops = kSum | rules::Bit(k);
    EXPECT_EQ(kernels::Validate(plan), cudaErrorInvalidValue) << rules::Name(k);
  }
  plan.ops = kAll;
  EXPECT_EQ(kernels::Validate(plan), cudaSuccess);
  plan.dtype = static_cast<DType>(200);
  EXPECT_EQ(kernels::Validate(plan), cudaErrorInvalidValue);
  plan.dtype = DType::kFloat32;
  plan.segments = 0;
  EXPECT_EQ(kernels::Validate(plan), cudaErrorInvalidValue);
  plan.segments = 2;
  std::size_t bytes = 0;
  EXPECT_EQ(kernels::SegmentedScratchBytes(plan, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::SegmentedScratchBytes(plan, &bytes), cudaSuccess);
  EXPECT_GT(bytes, 0u);
  // Too little scratch is refused before anything runs.
  EXPECT_EQ(kernels::AggregateSegments(plan, reinterpret_cast<void*>(16),
                                       reinterpret_cast<const std::int64_t*>(16),
                                       reinterpret_cast<void*>(16), reinterpret_cast<void*>(16),
                                       bytes - 1, nullptr),
            cudaErrorInvalidValue);
  // Layout: one 256-aligned array per stored field, none for count.
  plan.segments = 1000;
  plan.ops = kSum | kMax | kMean | kCount;
  const SegmentedLayout lay = kernels::LayoutOf(plan);
  EXPECT_EQ(lay.sum, 0u);
  EXPECT_EQ(lay.min, SegmentedLayout::kAbsent);
  EXPECT_EQ(lay.max, 8192u);
  EXPECT_EQ(lay.dsum, 16384u);
  EXPECT_EQ(lay.bytes, 24576u);
}

}  // namespace
}  // namespace tally::testing
