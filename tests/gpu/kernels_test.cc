// GPU tests of tally/kernels/aggregate.h: every op x dtype x size and row
// shape against the host reference in reference.h, on fresh random inputs
// with poisoned outputs, chunked feeding, NaN/tie/edge cases, determinism.
// TALLY_GPU_TEST_SMALL=1 drops the largest sizes (for compute-sanitizer).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference.h"
#include "tests/unit/numpy_edges.h"
#include "tally/kernels/aggregate.h"
#include "tally/kernels/cuda_error.h"
#include "tally/rules/agg/registry.h"
#include "tests/gpu/gpu_test_util.h"

namespace tally::testing {
namespace {

using kernels::AggregatePlan;
using kernels::ResultLayout;
using kernels::ResultView;
using rules::DType;
using rules::OpKind;

constexpr rules::OpMask kAllScalarOps =
    rules::Bit(OpKind::kSum) | rules::Bit(OpKind::kMin) | rules::Bit(OpKind::kMax) |
    rules::Bit(OpKind::kMean) | rules::Bit(OpKind::kCount) | rules::Bit(OpKind::kSumSquares) |
    rules::Bit(OpKind::kVariance) | rules::Bit(OpKind::kStddev) | rules::Bit(OpKind::kArgmin) |
    rules::Bit(OpKind::kArgmax);
constexpr rules::OpMask kAllOps = kAllScalarOps | rules::Bit(OpKind::kHistogram);

// A histogram range that leaves values below and above it.
template <DType D>
rules::HistogramSpec RangeFor(std::uint32_t bins) {
  switch (D) {
    case DType::kFloat32: case DType::kFloat64: return {bins, -600.0, 700.25};
    case DType::kInt32: return {bins, -1.5e9, 1.7e9};
    case DType::kInt64: return {bins, -7e18, 8e18};
    case DType::kUInt32: return {bins, 3e8, 3.9e9};
    case DType::kUInt8: return {bins, 12.0, 240.0};
    case DType::kInt8: return {bins, -100.5, 110.0};
    case DType::kInt16: return {bins, -30000.0, 31000.25};
    case DType::kUInt16: return {bins, 1000.0, 64000.0};
    case DType::kUInt64: return {bins, 1e18, 1.7e19};
    case DType::kBool: return {bins, 0.5, 1.5};  // the 0s below, the 1s in the last bin
    // Edges rounded to 11 or 8 bits stay strictly increasing (the server
    // refuses ranges where they do not) only up to these bin counts here.
    case DType::kFloat16: return {std::min(bins, 1024u), -600.0, 700.25};
    case DType::kBFloat16: return {std::min(bins, 256u), -600.0, 700.25};
  }
  return {bins, 0.0, 1.0};
}

// Device buffers for one plan, poisoned before each run.
struct Run {
  AggregatePlan plan;
  ResultLayout layout;
  void* d_data = nullptr;
  void* d_state = nullptr;
  void* d_scratch = nullptr;
  std::size_t scratch = 0;
  void* h_result = nullptr;
  cudaStream_t stream = nullptr;
  ~Run() {
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(d_data));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(d_state));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(d_scratch));
    TALLY_CUDA_CHECK_NOTHROW(cudaFreeHost(h_result));
    if (stream) TALLY_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  }
};

// Runs the plan over x fed in chunks of `chunk` elements (0: one call to
// Aggregate); the result bytes land in `out`.
// `misalign`: start the data one element past a 16-byte boundary (-1: at
// random), so head/tail paths are exercised.
// scratch_chunk: size scratch for chunks of this many elements (0: `chunk`),
// as an engine does once for its largest chunk.
void RunPlan(const AggregatePlan& plan, const void* x, std::uint64_t chunk,
             std::vector<unsigned char>* out, int misalign = -1, std::uint64_t scratch_chunk = 0) {
  Run r;
  r.plan = plan;
  r.layout = kernels::LayoutOf(plan);
  const std::size_t bytes = plan.length * rules::SizeOf(plan.dtype);
  CUDA_OK(kernels::Validate(plan));
  CUDA_OK(cudaStreamCreate(&r.stream));
  CUDA_OK(cudaMalloc(&r.d_data, bytes + 16));
  const bool shift = misalign < 0 ? (Rng()() & 1) != 0 : misalign == 1;
  unsigned char* base = static_cast<unsigned char*>(r.d_data) + (shift ? rules::SizeOf(plan.dtype) : 0);
  if (bytes) {
    CUDA_OK(cudaMemcpy(base, x, bytes, cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaMalloc(&r.d_state, r.layout.bytes + 1));
  CUDA_OK(cudaMemset(r.d_state, 0xA5, r.layout.bytes + 1));
  const std::uint64_t max_chunk = scratch_chunk != 0 ? scratch_chunk : chunk == 0 ? plan.length : chunk;
  CUDA_OK(kernels::ScratchBytes(plan, max_chunk, &r.scratch));
  CUDA_OK(cudaMalloc(&r.d_scratch, r.scratch + 1));
  CUDA_OK(cudaMemset(r.d_scratch, 0x5A, r.scratch + 1));
  CUDA_OK(cudaMallocHost(&r.h_result, r.layout.bytes + 1));
  std::memset(r.h_result, 0x77, r.layout.bytes + 1);
  if (chunk == 0) {
    CUDA_OK(kernels::Aggregate(plan, base, r.d_state, r.d_scratch, r.scratch, r.h_result, r.stream));
  } else {
    std::uint64_t off = 0;
    do {
      const std::uint64_t n = std::min<std::uint64_t>(chunk, plan.length - off);
      CUDA_OK(kernels::Accumulate(plan, base + off * rules::SizeOf(plan.dtype), n, off, r.d_state,
                                  r.d_scratch, r.scratch, r.stream));
      off += n;
    } while (off < plan.length);
    CUDA_OK(kernels::Finalize(plan, r.d_state, r.h_result, r.stream));
  }
  CUDA_OK(cudaStreamSynchronize(r.stream));
  CUDA_OK(cudaGetLastError());
  const auto* h = static_cast<const unsigned char*>(r.h_result);
  out->assign(h, h + r.layout.bytes);
}

// Compares every requested field of every row with the reference.
template <DType D>
void Check(const AggregatePlan& plan, const std::vector<unsigned char>& res,
           const std::vector<RefRow>& ref, const std::string& what) {
  const ResultView view(plan, res.data());
  ASSERT_EQ(view.Rows(), ref.size()) << what;
  const rules::OpMask m = plan.ops;
  int failures = 0;
  for (std::uint64_t r = 0; r < ref.size() && failures < 5; ++r) {
    const RefRow& o = ref[r];
    const std::string at = what + " row " + std::to_string(r);
    const long double n = static_cast<long double>(view.Count(r));
    auto fail = [&](const std::string& field, long double got, long double want) {
      ADD_FAILURE() << at << " " << field << ": got " << static_cast<double>(got) << " want "
                    << static_cast<double>(want);
      ++failures;
    };
    if (rules::Has(m, OpKind::kSum)) {
      if constexpr (rules::IsFloat(D)) {
        const long double got = view.Sum(r).f64;
        if (!Close(got, o.fsum, 1e-12L * o.abs_sum + 1e-300L)) fail("sum", got, o.fsum);
      } else if (view.Sum(r).u64 != o.isum) {
        fail("sum", static_cast<long double>(view.Sum(r).u64), static_cast<long double>(o.isum));
      }
    }
    if (n > 0 && (rules::Has(m, OpKind::kMin) || rules::Has(m, OpKind::kMax))) {
      if constexpr (rules::IsFloat(D)) {
        if (rules::Has(m, OpKind::kMin)) {
          const double got = view.Min(r).f64;
          if (o.min_nan ? !std::isnan(got) : got != static_cast<double>(o.min)) fail("min", got, o.min);
        }
        if (rules::Has(m, OpKind::kMax)) {
          const double got = view.Max(r).f64;
          if (o.max_nan ? !std::isnan(got) : got != static_cast<double>(o.max)) fail("max", got, o.max);
        }
      } else if constexpr (rules::IsSigned(D)) {
        if (rules::Has(m, OpKind::kMin) && view.Min(r).i64 != o.imin) fail("min", view.Min(r).i64, o.imin);
        if (rules::Has(m, OpKind::kMax) && view.Max(r).i64 != o.imax) fail("max", view.Max(r).i64, o.imax);
      } else {
        if (rules::Has(m, OpKind::kMin) && view.Min(r).u64 != o.umin) fail("min", view.Min(r).u64, o.umin);
        if (rules::Has(m, OpKind::kMax) && view.Max(r).u64 != o.umax) fail("max", view.Max(r).u64, o.umax);
      }
    }
    if (rules::Has(m, OpKind::kMean) || rules::Has(m, OpKind::kVariance)) {
      const rules::Moments mo = view.Moments(r);
      if (mo.count != static_cast<double>(n)) fail("moments.count", mo.count, n);
      if (n == 0) {
        if (!std::isnan(view.Mean(r))) fail("mean of empty", view.Mean(r), NAN);
      } else {
        const bool nan = std::isnan(static_cast<double>(o.mean));
        if (!Close(mo.mean, o.mean, nan ? 0 : 1e-12L * o.max_abs + 1e-300L)) fail("mean", mo.mean, o.mean);
        if (!Close(mo.m2, o.m2, nan ? 0 : 1e-10L * o.m2 + 1e-12L * o.max_abs * o.max_abs))
          fail("m2", mo.m2, o.m2);
      }
    }
    if (rules::Has(m, OpKind::kSumSquares)) {
      const long double got = view.SumSquares(r);
      if (!Close(got, o.sumsq, 1e-12L * o.sumsq + 1e-300L)) fail("sum_squares", got, o.sumsq);
    }
    if (n > 0 && rules::Has(m, OpKind::kArgmin) && view.Argmin(r) != o.argmin)
      fail("argmin", view.Argmin(r), o.argmin);
    if (n > 0 && rules::Has(m, OpKind::kArgmax) && view.Argmax(r) != o.argmax)
      fail("argmax", view.Argmax(r), o.argmax);
    if (rules::Has(m, OpKind::kHistogram)) {
      const std::uint64_t* hc = view.Histogram(r);
      for (std::uint32_t b = 0; b < plan.histogram.bins + 3; ++b) {
        if (hc[b] != o.hist[b]) {
          fail("histogram slot " + std::to_string(b) + " of " + std::to_string(plan.histogram.bins),
               hc[b], o.hist[b]);
          break;
        }
      }
    }
  }
}

template <DType D>
void CheckCase(const std::vector<V<D>>& x, std::uint64_t row_length, rules::OpMask mask,
               std::uint32_t bins, std::uint64_t chunk, const std::string& label,
               int misalign = -1, const rules::HistogramSpec* range = nullptr) {
  AggregatePlan plan;
  plan.dtype = D;
  plan.ops = mask;
  plan.length = x.size();
  plan.row_length = row_length;
  const bool hist = rules::Has(mask, OpKind::kHistogram);
  if (hist) plan.histogram = range ? *range : RangeFor<D>(bins);
  std::vector<unsigned char> res;
  RunPlan(plan, x.data(), chunk, &res, misalign);
  if (::testing::Test::HasFatalFailure()) return;
  const auto ref = Reference<D>(x, row_length, hist ? &plan.histogram : nullptr);
  Check<D>(plan, res, ref,
           std::string(rules::Name(D)) + " " + label + " n=" + std::to_string(x.size()) +
               " row=" + std::to_string(row_length) + " chunk=" + std::to_string(chunk) +
               " bins=" + std::to_string(hist ? bins : 0));
}


// --- whole arrays ------------------------------------------------------

TEST(Kernels, WholeArrayAllOpsFusedEverySize) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  std::vector<std::uint64_t> sizes = {0, 1, 2, 31, 33, 1000, 4099, 1000003};
  if (!Small()) sizes.push_back(9000001);
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::uint64_t n : sizes) {
      for (std::uint32_t bins : {1u, 256u, 65536u}) {
        CheckCase<D>(Random<D>(n), 0, kAllOps, bins, 0, "fused");
      }
    }
  });
}

TEST(Kernels, WholeArrayEachOpAlone) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (int k = 0; k < rules::kNumKernelOpKinds; ++k) {
      const auto kind = static_cast<OpKind>(k);
      for (std::uint64_t n : {33ull, 1000003ull}) {
        CheckCase<D>(Random<D>(n), 0, rules::Bit(kind), 4096, 0, std::string(rules::Name(kind)));
      }
    }
  });
}

// Small whole arrays with only sum, min and max take their own one-block
// kernel (the latency path): sizes around its 16-byte vectors and its size
// limit (Policy::kSmallMaxBytes, 64 KiB; one past it is the slice kernel),
// both alignments, fed in one call to Aggregate and in one Accumulate, with
// NaNs and with the integer extremes.
TEST(Kernels, SmallWholeArraysSumMinMax) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const rules::OpMask sum = rules::Bit(OpKind::kSum), mn = rules::Bit(OpKind::kMin),
                    mx = rules::Bit(OpKind::kMax);
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    using T = V<D>;
    const std::uint64_t limit = 64 * 1024 / sizeof(T);
    for (std::uint64_t n : std::vector<std::uint64_t>{0, 1, 2, 3, 15, 16, 17, 255, 1024, 4097,
                                                      limit - 1, limit, limit + 1}) {
      auto x = Random<D>(n);
      auto odd = x;
      if (n > 2) {
        if constexpr (rules::IsFloat(D)) {
          odd[n / 3] = std::numeric_limits<T>::quiet_NaN();
        } else {
          odd[n / 3] = std::numeric_limits<T>::lowest();
          odd[2 * n / 3] = std::numeric_limits<T>::max();
        }
      }
      for (const auto* data : {&x, &odd}) {
        const std::string label = data == &x ? "small" : "small, nan or extremes";
        for (rules::OpMask m : {sum, mn, mx, sum | mn | mx}) {
          for (int misalign : {0, 1}) {
            CheckCase<D>(*data, 0, m, 0, 0, label, misalign);
            if (n > 0) CheckCase<D>(*data, 0, m, 0, n, label + ", one Accumulate", misalign);
          }
        }
      }
    }
  });
}

TEST(Kernels, HistogramBinCountsIncludingClusters) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::uint32_t bins : {2u, 7u, 100u, 4096u, 4097u, 20000u, 65535u, 65536u}) {
      CheckCase<D>(Random<D>(300007), 0, rules::Bit(OpKind::kHistogram), bins, 0, "hist");
    }
  });
}

TEST(Kernels, LargeFloat32) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const std::uint64_t n = Small() ? (1u << 20) + 5 : (1ull << 26) + 5;
  const auto x = Random<DType::kFloat32>(n);
  CheckCase<DType::kFloat32>(x, 0, kAllOps, 65536, 0, "large fused");
  CheckCase<DType::kFloat32>(x, 0, kAllOps, 256, 0, "large fused");
  CheckCase<DType::kFloat32>(x, 0, kAllScalarOps, 0, 16777259, "large chunked");
}

// float32 sums of one sign: relative error <= 1e-6 of the exact sum.
TEST(Kernels, Float32SumPrecision) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const std::uint64_t n = Small() ? (1u << 20) : 100000000ull;
  std::vector<float> x(n);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (auto& v : x) v = u(Rng());
  AggregatePlan plan;
  plan.dtype = DType::kFloat32;
  plan.ops = rules::Bit(OpKind::kSum);
  plan.length = n;
  std::vector<unsigned char> res;
  RunPlan(plan, x.data(), 0, &res);
  long double exact = 0;
  for (float v : x) exact += v;
  const double got = ResultView(plan, res.data()).Sum(0).f64;
  EXPECT_LE(std::fabs(got - exact) / exact, 1e-6L);
  EXPECT_LE(std::fabs(got - exact) / exact, 1e-12L) << "float64 accumulation expected";
}

// --- rows ----------------------------------------------------------------

TEST(Kernels, SegmentedRowShapes) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  struct Shape { std::uint64_t rows, len; };
  std::vector<Shape> shapes = {{1, 1}, {5, 1}, {1, 31}, {1000, 32}, {301, 33}, {64, 1000}, {33, 1024},
                               {7, 4100}, {3, 5000}, {2, 65536}, {5, 70001}};
  if (!Small()) shapes.push_back({2, 3000017});
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (const Shape& s : shapes) {
      CheckCase<D>(Random<D>(s.rows * s.len), s.len, kAllOps, 256, 0, "rows");
    }
  });
}

// Short rows of whole 16-byte vectors with lean ops (the coalesced
// one-vector-per-lane path when the data is aligned and chunks hold whole
// rows; the team path otherwise), many rows, whole and chunked.
TEST(Kernels, SegmentedShortVectorRows) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const rules::OpMask lean = rules::Bit(OpKind::kSum) | rules::Bit(OpKind::kMin) |
                           rules::Bit(OpKind::kMax) | rules::Bit(OpKind::kSumSquares) |
                           rules::Bit(OpKind::kArgmin) | rules::Bit(OpKind::kArgmax);
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    constexpr std::uint64_t k = 16 / sizeof(V<D>);
    for (std::uint64_t vecs : {1ull, 2ull, 8ull, 32ull}) {
      const std::uint64_t len = vecs * k;
      const std::uint64_t rows = Small() ? 3001 : 100003;
      const auto x = Random<D>(rows * len);
      for (int misalign : {0, 1}) {
        CheckCase<D>(x, len, lean, 0, 0, "vector rows", misalign);
        CheckCase<D>(x, len, rules::Bit(OpKind::kArgmax), 0, 0, "vector rows argmax", misalign);
      }
      CheckCase<D>(x, len, lean, 0, len * 1000, "vector rows chunked", 0);
      CheckCase<D>(x, len, lean, 0, len * 1000 + 1, "vector rows cut", 0);
    }
  });
}

TEST(Kernels, SegmentedEachOpAlone) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (int k = 0; k < rules::kNumKernelOpKinds; ++k) {
      const auto kind = static_cast<OpKind>(k);
      for (std::uint64_t len : {32ull, 20000ull}) {
        CheckCase<D>(Random<D>(6 * len), len, rules::Bit(kind), 64, 0, std::string(rules::Name(kind)));
      }
    }
  });
}

// --- chunked feeding -----------------------------------------------------

TEST(Kernels, ChunkedWholeAndRowsSpanningChunks) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    const auto x = Random<D>(1000003);
    for (std::uint64_t chunk : {1ull, 4099ull, 65543ull, 500000ull}) {
      if (chunk == 1 && Small()) continue;
      const auto y = chunk == 1 ? Random<D>(3000) : x;
      CheckCase<D>(y, 0, kAllOps, 300, chunk, "chunked whole");
      if (y.size() % 3 == 0) CheckCase<D>(y, y.size() / 3, kAllOps, 300, chunk, "chunked rows");
    }
    // Rows of 33 and of 100001 over chunks that cut rows anywhere.
    const auto z = Random<D>(33 * 100001);
    CheckCase<D>(z, 33, kAllOps, 100, 70001, "chunked short rows");
    CheckCase<D>(z, 100001, kAllOps, 5000, 1234567, "chunked long rows");
  });
}

// Scratch sized once for the largest chunk must do for every smaller chunk
// (a short array, a stream's tail), whose rows get more slices each.
TEST(Kernels, ScratchForTheLargestChunkServesSmallerOnes) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const std::uint64_t largest = std::uint64_t{8} << 20;  // elements
  for (std::uint64_t row : {16391ull, 65543ull, 1000003ull}) {
    const auto x = Random<DType::kFloat32>(3 * row);
    AggregatePlan plan;
    plan.dtype = DType::kFloat32;
    plan.ops = kAllOps;
    plan.histogram = {64, -1.0, 1.0};
    plan.length = x.size();
    plan.row_length = row;
    for (std::uint64_t chunk : {x.size(), row / 2 + 1}) {
      std::vector<unsigned char> out;
      RunPlan(plan, x.data(), chunk, &out, 0, largest);  // CUDA_OK fails the test on a refusal
      std::vector<unsigned char> reference;
      RunPlan(plan, x.data(), chunk, &reference, 0);
      EXPECT_TRUE(out == reference) << "row " << row << ", chunk " << chunk;
    }
  }
}

// A histogram alone needs no scratch however many blocks share the array
// (they add their counts straight to the state); any other op does. The
// histogram tests above then run with none.
TEST(Kernels, ScratchOnlyWhereBlocksMergePartials) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  AggregatePlan plan;
  plan.dtype = DType::kFloat32;
  plan.length = std::uint64_t{1} << 24;
  plan.histogram = {256, 0.0, 1.0};
  const std::uint32_t bins[] = {256, 65536};
  for (std::uint32_t b : bins) {
    plan.histogram.bins = b;
    std::size_t bytes = 1;
    plan.ops = rules::Bit(OpKind::kHistogram);
    CUDA_OK(kernels::ScratchBytes(plan, plan.length, &bytes));
    EXPECT_EQ(bytes, 0u) << b << " bins alone";
    plan.ops = rules::Bit(OpKind::kHistogram) | rules::Bit(OpKind::kMax);
    CUDA_OK(kernels::ScratchBytes(plan, plan.length, &bytes));
    EXPECT_GT(bytes, 0u) << b << " bins and max";
  }
  plan.ops = rules::Bit(OpKind::kSum);
  std::size_t bytes = 0;
  CUDA_OK(kernels::ScratchBytes(plan, plan.length, &bytes));
  EXPECT_GT(bytes, 0u) << "sum";
}

TEST(Kernels, DeterministicBitwise) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const auto x = Random<DType::kFloat32>(Small() ? 1000003 : 20000003);
  for (std::uint64_t row : {0ull, 1000003ull}) {
    AggregatePlan plan;
    plan.dtype = DType::kFloat32;
    plan.ops = kAllOps;
    plan.histogram = {1000, -500.0, 500.0};
    plan.length = x.size();
    plan.row_length = row == 0 ? 0 : (x.size() % row == 0 ? row : 0);
    for (std::uint64_t chunk : {0ull, 3000017ull}) {
      std::vector<unsigned char> a, b;
      RunPlan(plan, x.data(), chunk, &a, 1);
      RunPlan(plan, x.data(), chunk, &b, 1);
      EXPECT_TRUE(a == b) << "results differ between two identical runs, chunk " << chunk;
    }
  }
}

// --- edge cases ----------------------------------------------------------

template <DType D>
void FloatEdges() {
  using T = V<D>;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T inf = std::numeric_limits<T>::infinity();
  for (std::uint64_t n : {1ull, 33ull, 1000003ull}) {
    // NaNs at random places: every NaN-aware op must see the first one.
    auto x = Random<D>(n);
    std::uniform_int_distribution<std::uint64_t> pos(0, n - 1);
    for (int k = 0; k < 3; ++k) x[pos(Rng())] = nan;
    CheckCase<D>(x, 0, kAllOps, 256, 0, "nan");
    CheckCase<D>(x, 0, kAllOps, 256, 65537, "nan chunked");
    // All NaN.
    std::vector<T> all_nan(n, nan);
    CheckCase<D>(all_nan, 0, kAllOps, 10, 0, "all nan");
    // Infinities and ties: the first occurrence wins.
    auto y = Random<D>(n);
    y[pos(Rng())] = inf;
    y[pos(Rng())] = -inf;
    y[pos(Rng())] = inf;
    y[pos(Rng())] = -inf;
    CheckCase<D>(y, 0, kAllOps, 256, 0, "inf ties");
    std::vector<T> same(n, T(2.5));
    CheckCase<D>(same, 0, kAllOps, 256, 0, "all equal");
    // Every value in one bin, on edges, and exactly on lo / hi.
    std::vector<T> edges(n);
    for (std::uint64_t i = 0; i < n; ++i) edges[i] = static_cast<T>(i % 7 == 0 ? -600.0 : (i % 7 == 1 ? 700.25 : -600.0 + 1300.25 * (i % 64) / 64.0));
    CheckCase<D>(edges, 0, kAllOps, 64, 0, "edges");
    CheckCase<D>(edges, 0, kAllOps, 256, 0, "edges");
  }
  // NaN rows.
  auto r = Random<D>(64 * 33);
  for (std::uint64_t i = 5; i < r.size(); i += 97) r[i] = nan;
  CheckCase<D>(r, 33, kAllOps, 16, 0, "nan rows");
  CheckCase<D>(r, 64 * 33 / 2, kAllOps, 16, 0, "nan rows");
}

TEST(Kernels, FloatNanInfTiesAndEdges) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  FloatEdges<DType::kFloat32>();
  FloatEdges<DType::kFloat64>();
}

TEST(Kernels, IntegerExtremesAndTies) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    using T = V<D>;
    if constexpr (!rules::IsFloat(D)) {
      for (std::uint64_t n : {1ull, 33ull, 1000003ull}) {
        std::vector<T> hi(n, std::numeric_limits<T>::max()), lo(n, std::numeric_limits<T>::lowest());
        CheckCase<D>(hi, 0, kAllOps, 256, 0, "all max");  // sum wraps for 64-bit
        CheckCase<D>(lo, 0, kAllOps, 256, 0, "all lowest");
        auto x = Random<D>(n);
        std::uniform_int_distribution<std::uint64_t> pos(0, n - 1);
        x[pos(Rng())] = std::numeric_limits<T>::max();
        x[pos(Rng())] = std::numeric_limits<T>::max();
        x[pos(Rng())] = std::numeric_limits<T>::lowest();
        x[pos(Rng())] = std::numeric_limits<T>::lowest();
        CheckCase<D>(x, 0, kAllOps, 256, 0, "extreme ties");
      }
    }
  });
}

// argmin and argmax alone (the lean slice kernel) and beside the moments
// (the full one). Their warps skip groups no better than the best value any
// lane has seen so far (ThreadAgg::ShareWarp), so the first occurrence must
// survive ties between lanes and blocks, NaNs, and data whose extreme moves
// at every tile (ramps) or recurs once a period (a sawtooth).
TEST(Kernels, ArgExtremesTiesNansAndMovingBests) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const rules::OpMask args = rules::Bit(OpKind::kArgmin) | rules::Bit(OpKind::kArgmax);
  const rules::OpMask with_moments = args | rules::Bit(OpKind::kVariance);
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    using T = V<D>;
    const std::uint64_t n = Small() ? 300007 : 3000017;
    // i's place on a ramp over [0, top], top below every dtype's maximum
    // (and, for float32, exact).
    auto ramp = [&](std::uint64_t i, std::uint64_t top) {
      const std::uint64_t hi = sizeof(T) == 1 ? 255 : std::min<std::uint64_t>(top, 1u << 24);
      return static_cast<T>(i * hi / top);
    };
    std::vector<std::pair<std::string, std::vector<T>>> cases;
    std::vector<T> few(n), up(n), down(n), saw(n);
    std::uniform_int_distribution<int> four(0, 3);
    for (std::uint64_t i = 0; i < n; ++i) {
      few[i] = static_cast<T>(four(Rng()));
      up[i] = ramp(i, n - 1);
      down[i] = ramp(n - 1 - i, n - 1);
      saw[i] = ramp(i % 100003, 100002);
    }
    cases.emplace_back("four values", few);
    cases.emplace_back("ascending", up);
    cases.emplace_back("descending", down);
    cases.emplace_back("sawtooth", saw);
    if constexpr (rules::IsFloat(D)) {
      const T nan = std::numeric_limits<T>::quiet_NaN();
      std::uniform_int_distribution<std::uint64_t> pos(0, n - 1);
      auto nans = few;
      for (int k = 0; k < 3; ++k) nans[pos(Rng())] = nan;
      cases.emplace_back("four values, nans", nans);
      auto late = up;
      late[n - 2] = nan;
      cases.emplace_back("ascending, a late nan", late);
    }
    for (const auto& [label, x] : cases) {
      for (rules::OpMask mask : {args, with_moments}) {
        CheckCase<D>(x, 0, mask, 0, 0, label);
        CheckCase<D>(x, 0, mask, 0, n / 3 + 1, label + " chunked");
      }
    }
  });
}

// Values on every edge, one ulp either side, and at fractions of a bin near
// its edges: the quick guess must hand every one of them to the edge check.
template <DType D>
void EdgeNeighbours(std::uint32_t bins) {
  using T = V<D>;
  using B = typename rules::Traits<D>::bin;
  const rules::HistogramSpec h = RangeFor<D>(bins);
  bins = h.bins;  // fewer for the 16-bit floats
  const auto binner = rules::BinnerFor<rules::Traits<D>>::Make(h.bins, h.lo, h.hi);
  const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  std::vector<T> x;
  auto push = [&](double v) {
    if constexpr (rules::IsFloat(D)) {
      x.push_back(static_cast<T>(v));
    } else {
      v = std::floor(v);
      if (v >= lo && v < hi) x.push_back(static_cast<T>(v));
    }
  };
  const double step = (h.hi - h.lo) / bins;
  for (std::uint32_t i = 0; i <= bins; ++i) {
    const B e = binner.Edge(static_cast<std::int32_t>(i));
    push(static_cast<double>(e));
    if constexpr (rules::IsFloat(D)) {
      push(static_cast<double>(std::nextafter(e, -std::numeric_limits<B>::infinity())));
      push(static_cast<double>(std::nextafter(e, std::numeric_limits<B>::infinity())));
    } else {
      push(static_cast<double>(e) - 1);
      push(static_cast<double>(e) + 1);
    }
    for (double f : {1e-7, 1e-5, 1e-3, 0.01, 0.5, 0.99, 0.999, 0.99999, 0.9999999})
      push(h.lo + (i + f) * step);
  }
  // Within a bin's width below lo (above hi is i = bins above) and a
  // little further out: the quick guess answers the first below and above
  // itself, the others ask the exact binning.
  for (double f : {1e-7, 1e-3, 0.5, 0.999, 0.9999999, 1.5, 3.0})
    push(h.lo - f * step);
  push(h.hi + 1.5 * step);
  CheckCase<D>(x, 0, rules::Bit(OpKind::kHistogram), bins, 0, "edge neighbours");
}

TEST(Kernels, HistogramValuesAtAndAroundEdges) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::uint32_t bins : {3u, 256u, 4096u, 65536u}) EdgeNeighbours<D>(bins);
  });
}

// Ranges numpy 2 accepts at the ends of the exponent ranges: subnormal
// edges (bins / (hi - lo) overflows), float32 edges of a float64 range that
// round to infinities or leave scale subnormal, and the narrowest ranges for
// 65536 bins. Values on and around every edge, and special values: the
// kernels must agree with the host binner, which tests/sanitize checks
// against numpy's edges.
template <DType D>
void EdgesOfAnExtremeRange(const rules::HistogramSpec& h) {
  using T = V<D>;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const std::vector<T> edges = NumpyEdges<T>(h.bins, h.lo, h.hi);
  ASSERT_TRUE(Numpy2Accepts(edges)) << h.bins << " bins over [" << h.lo << ", " << h.hi << "]";
  std::vector<T> x = {std::numeric_limits<T>::quiet_NaN(), kInf, -kInf, T(0), -T(0),
                      std::numeric_limits<T>::max(), std::numeric_limits<T>::lowest(),
                      std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::min()};
  for (T e : edges) {
    x.push_back(e);
    x.push_back(std::nextafter(e, -kInf));
    x.push_back(std::nextafter(e, kInf));
  }
  std::ostringstream label;
  label << "extreme range " << h.bins << " bins over [" << std::hexfloat << h.lo << ", " << h.hi << "]";
  CheckCase<D>(x, 0, rules::Bit(OpKind::kHistogram), h.bins, 0, label.str(), -1, &h);
}

TEST(Kernels, HistogramRangesAtTheEndsOfTheExponentRange) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const double tiny = std::numeric_limits<double>::denorm_min();
  EdgesOfAnExtremeRange<DType::kFloat64>({65536, 0.0, 65536 * 4 * tiny});
  EdgesOfAnExtremeRange<DType::kFloat64>({1000, -1e-310, 1e-310});
  EdgesOfAnExtremeRange<DType::kFloat64>({65536, 1.0, NarrowestAcceptedHi<double>(65536, 1.0)});
  EdgesOfAnExtremeRange<DType::kFloat64>({65536, -8e307, 8e307});
  EdgesOfAnExtremeRange<DType::kFloat32>({65536, 0.0, 1e-36});
  EdgesOfAnExtremeRange<DType::kFloat32>({65536, -3.4028236e38, 3.4028236e38});
  EdgesOfAnExtremeRange<DType::kFloat32>({2, -3e38, 3e38});
  EdgesOfAnExtremeRange<DType::kFloat32>({3, -5e38, 5e38});
  EdgesOfAnExtremeRange<DType::kFloat32>({2, -1e300, 1e300});
  EdgesOfAnExtremeRange<DType::kFloat32>({65536, 1.0, NarrowestAcceptedHi<float>(65536, 1.0)});
}

TEST(Kernels, SkewedHistogramOneBin) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  std::vector<float> x(Small() ? 100003 : 5000011, 0.5f);
  for (std::uint32_t bins : {256u, 4096u, 65536u}) {
    CheckCase<DType::kFloat32>(x, 0, rules::Bit(OpKind::kHistogram), bins, 0, "skewed");
  }
}

// Histograms too large for one block's u32 counters count in 16-bit
// fields and carry every 0x8000 to the state: two neighbouring bins that
// share one 32-bit word (float32) or sit in different words (uint8) get
// millions of counts each, so every block carries in both fields several
// times, from many threads at once.
TEST(Kernels, WideHistogramCarries) {
  TALLY_REQUIRE_GPU("GPU kernel tests");
  const std::size_t n = Small() ? 1200001 : 12000001;
  {
    const rules::HistogramSpec h = RangeFor<DType::kFloat32>(65536);
    const double step = (h.hi - h.lo) / h.bins;
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i)
      x[i] = static_cast<float>(h.lo + (32768.5 + static_cast<double>(i % 2)) * step);
    CheckCase<DType::kFloat32>(x, 0, rules::Bit(OpKind::kHistogram), 65536, 0, "wide carries");
    CheckCase<DType::kFloat32>(x, 0, rules::Bit(OpKind::kHistogram) | rules::Bit(OpKind::kArgmax), 40000,
                               0, "wide carries, 40000 bins");
  }
  {
    // Below and above count in 16-bit fields too (slots 0 and bins + 1):
    // values half a bin outside each end, and NaN's own counter.
    const rules::HistogramSpec h = RangeFor<DType::kFloat32>(65536);
    const double step = (h.hi - h.lo) / h.bins;
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = i % 3 == 0 ? static_cast<float>(h.lo - 0.5 * step)
           : i % 3 == 1 ? static_cast<float>(h.hi + 0.5 * step)
                        : (i % 1000 == 2 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(h.lo));
    }
    CheckCase<DType::kFloat32>(x, 0, rules::Bit(OpKind::kHistogram), 65536, 0, "wide carries outside");
  }
  {
    std::vector<std::uint8_t> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<std::uint8_t>(100 + i % 2);
    CheckCase<DType::kUInt8>(x, 0, rules::Bit(OpKind::kHistogram), 65536, 0, "wide carries");
  }
}

TEST(Kernels, RejectsBadPlans) {
  AggregatePlan p;
  p.ops = 0;
  EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue);
  p.ops = rules::Bit(OpKind::kHistogram);
  p.histogram = {0, 0.0, 1.0};
  EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue);
  p.histogram = {65537, 0.0, 1.0};
  EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue);
  p.histogram = {10, 1.0, 1.0};
  EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue);
  p.histogram = {10, 0.0, INFINITY};
  EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue);
  p.histogram = {10, 0.0, 1.0};
  p.length = 10;
  p.row_length = 3;
  EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue);
  p.row_length = 5;
  EXPECT_EQ(kernels::Validate(p), cudaSuccess);
}

// Where a failure is reported (no device needed): the innermost failing
// call, then each check that passed it on, and a later failure starts anew.
cudaError_t FailsInside() {
  TALLY_CUDA_TRY(cudaErrorInvalidValue);
  return cudaSuccess;
}
cudaError_t PassesItOn() {
  TALLY_CUDA_TRY(FailsInside());
  return cudaSuccess;
}
TEST(CudaError, AnInnerFailureKeepsItsPlaceAndTheChecksThatPassedItOn) {
  ASSERT_EQ(PassesItOn(), cudaErrorInvalidValue);
  const std::string where = cuda::LastErrorWhere();
  EXPECT_EQ(where.rfind("cudaErrorInvalidValue at ", 0), 0u) << where;
  EXPECT_NE(where.find("kernels_test.cc"), std::string::npos) << where;
  EXPECT_NE(where.find(": cudaErrorInvalidValue; from "), std::string::npos) << where;
  EXPECT_EQ(where.find("FailsInside()"), std::string::npos) << "the outer check took the inner's place: " << where;
  ASSERT_EQ(FailsInside(), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LastErrorWhere().find("; from "), std::string::npos) << cuda::LastErrorWhere();
}

}  // namespace
}  // namespace tally::testing
