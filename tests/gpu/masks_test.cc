// GPU tests of validity masks and the NaN-skipping ops of
// tally/kernels/aggregate.h: every dtype under masks that are all valid, all
// invalid, random, every 7th element masked and a masked run across a chunk
// boundary (with garbage in the bits past the array's end); the NaN-skipping
// ops of the four float dtypes with NaNs at random places, at both ends and
// filling whole rows, with and without a mask, beside the plain ops; whole
// arrays, the small-array latency path, rows, rows spanning chunks, chunks at
// any offset; bitwise determinism. Each run is checked field by field
// against a host reference in higher precision on fresh random inputs with
// poisoned state, scratch and results.
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
#include <string>
#include <type_traits>
#include <vector>

#include "reference.h"
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
using rules::OpMask;

constexpr OpMask kPlainOps = (OpMask{1} << rules::kNumKernelOpKinds) - 1;  // histogram included
constexpr OpMask kSumMinMax = rules::Bit(OpKind::kSum) | rules::Bit(OpKind::kMin) | rules::Bit(OpKind::kMax);
constexpr OpMask kArgs = rules::Bit(OpKind::kArgmin) | rules::Bit(OpKind::kArgmax);
constexpr OpMask kNanSimple = rules::Bit(OpKind::kNanSum) | rules::Bit(OpKind::kNanMin) |
                              rules::Bit(OpKind::kNanMax) | rules::Bit(OpKind::kNanCount);
constexpr OpMask kNanAll = kernels::kNanOps;

// A validity mask: one bool per element, packed by Pack().
using Mask = std::vector<bool>;

enum class MaskKind { kAllValid, kAllInvalid, kRandom, kMostlyValid, kEvery7th };
const char* Name(MaskKind k) {
  switch (k) {
    case MaskKind::kAllValid: return "all valid";
    case MaskKind::kAllInvalid: return "all invalid";
    case MaskKind::kRandom: return "random half";
    case MaskKind::kMostlyValid: return "random 9 in 10";
    case MaskKind::kEvery7th: return "every 7th masked";
  }
  return "?";
}
Mask MakeMask(MaskKind k, std::uint64_t n) {
  Mask m(n, true);
  std::bernoulli_distribution half(0.5), most(0.9);
  for (std::uint64_t i = 0; i < n; ++i) {
    switch (k) {
      case MaskKind::kAllValid: break;
      case MaskKind::kAllInvalid: m[i] = false; break;
      case MaskKind::kRandom: m[i] = half(Rng()); break;
      case MaskKind::kMostlyValid: m[i] = most(Rng()); break;
      case MaskKind::kEvery7th: m[i] = i % 7 != 6; break;
    }
  }
  return m;
}

// Arrow's bitmap as ceil(n / 32) little-endian words; the bits past n are
// random (Arrow leaves them as the producer pleases).
std::vector<std::uint32_t> Pack(const Mask& m) {
  const std::uint64_t n = m.size();
  std::vector<std::uint32_t> w((n + 31) / 32);
  for (auto& v : w) v = static_cast<std::uint32_t>(Rng()());
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t b = 1u << (i % 32);
    w[i / 32] = m[i] ? (w[i / 32] | b) : (w[i / 32] & ~b);
  }
  return w;
}

// The reference of one row: the plain ops over its valid elements
// (reference.h on them, indices mapped back to the row's), their count, and
// the NaN-skipping ops over the valid elements that are not NaN.
struct NanRef {
  std::uint64_t count = 0;
  long double sum = 0, abs_sum = 0, mean = 0, m2 = 0, max_abs = 0;
  double min = INFINITY, max = -INFINITY;
  std::int64_t argmin = -1, argmax = -1;
};
struct RowRef {
  RefRow plain;
  std::uint64_t count = 0;
  NanRef nan;
};

template <DType D>
std::vector<RowRef> Expect(const std::vector<V<D>>& x, const Mask* mask, std::uint64_t row_length,
                           const rules::HistogramSpec* h) {
  using T = V<D>;
  const std::uint64_t n = x.size();
  const std::uint64_t len = row_length == 0 ? n : row_length;
  const std::uint64_t rows = row_length == 0 ? 1 : n / row_length;
  std::vector<RowRef> out(rows);
  for (std::uint64_t r = 0; r < rows; ++r) {
    std::vector<T> kept;
    std::vector<std::int64_t> at;
    for (std::uint64_t i = 0; i < len; ++i) {
      if (mask == nullptr || (*mask)[r * len + i]) {
        kept.push_back(x[r * len + i]);
        at.push_back(static_cast<std::int64_t>(i));
      }
    }
    RowRef& o = out[r];
    o.count = kept.size();
    o.plain = Reference<D>(kept, 0, h)[0];
    o.plain.argmin = o.plain.argmin < 0 ? -1 : at[static_cast<std::size_t>(o.plain.argmin)];
    o.plain.argmax = o.plain.argmax < 0 ? -1 : at[static_cast<std::size_t>(o.plain.argmax)];
    if constexpr (rules::IsFloat(D)) {
      NanRef& q = o.nan;
      for (std::size_t k = 0; k < kept.size(); ++k) {
        const double v = static_cast<double>(kept[k]);
        if (std::isnan(v)) continue;
        ++q.count;
        q.sum += v;
        q.abs_sum += std::fabs(static_cast<long double>(v));
        q.max_abs = std::max(q.max_abs, std::fabs(static_cast<long double>(v)));
        if (v < q.min || q.argmin < 0) {
          q.min = v;
          q.argmin = at[k];
        }
        if (v > q.max || q.argmax < 0) {
          q.max = v;
          q.argmax = at[k];
        }
      }
      if (q.count > 0) {
        q.mean = q.sum / q.count;
        for (const T& t : kept) {
          const double v = static_cast<double>(t);
          if (!std::isnan(v)) q.m2 += (v - q.mean) * (v - q.mean);
        }
      }
    }
  }
  return out;
}

// Device buffers for one run, freed however the run ends.
struct Buffers {
  void* data = nullptr;
  void* bits = nullptr;
  void* state = nullptr;
  void* scratch = nullptr;
  void* host = nullptr;
  cudaStream_t stream = nullptr;
  ~Buffers() {
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(data));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(bits));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(state));
    TALLY_CUDA_CHECK_NOTHROW(cudaFree(scratch));
    TALLY_CUDA_CHECK_NOTHROW(cudaFreeHost(host));
    if (stream) TALLY_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  }
};

// Runs `plan` over x (and the mask, when given) fed in chunks of `chunk`
// elements, or, for 0, in one call to Aggregate (whose small arrays take the
// latency path: results written straight into the pinned host buffer).
// `misalign`: the data starts one element past a 16-byte boundary. The
// bitmap gets exactly ceil(n / 32) words, so a read past them is an error
// under compute-sanitizer.
void RunPlan(AggregatePlan plan, const void* x, const Mask* mask, std::uint64_t chunk, bool misalign,
             std::vector<unsigned char>* out) {
  Buffers b;
  const std::size_t esize = rules::SizeOf(plan.dtype);
  const std::size_t bytes = plan.length * esize;
  CUDA_OK(cudaStreamCreate(&b.stream));
  CUDA_OK(cudaMalloc(&b.data, bytes + 16));
  unsigned char* base = static_cast<unsigned char*>(b.data) + (misalign ? esize : 0);
  if (bytes > 0) {
    CUDA_OK(cudaMemcpy(base, x, bytes, cudaMemcpyHostToDevice));
  }
  plan.validity = nullptr;
  if (mask != nullptr) {
    const std::vector<std::uint32_t> words = Pack(*mask);
    CUDA_OK(cudaMalloc(&b.bits, std::max<std::size_t>(words.size(), 1) * 4));
    if (!words.empty()) {
      CUDA_OK(cudaMemcpy(b.bits, words.data(), words.size() * 4, cudaMemcpyHostToDevice));
    }
    plan.validity = static_cast<const std::uint32_t*>(b.bits);
  }
  CUDA_OK(kernels::Validate(plan));
  const ResultLayout lay = kernels::LayoutOf(plan);
  CUDA_OK(cudaMalloc(&b.state, lay.bytes + 1));
  CUDA_OK(cudaMemset(b.state, 0xA5, lay.bytes + 1));
  std::size_t scratch = 0;
  CUDA_OK(kernels::ScratchBytes(plan, chunk == 0 ? plan.length : chunk, &scratch));
  CUDA_OK(cudaMalloc(&b.scratch, scratch + 1));
  CUDA_OK(cudaMemset(b.scratch, 0x5A, scratch + 1));
  CUDA_OK(cudaMallocHost(&b.host, lay.bytes + 1));
  std::memset(b.host, 0x77, lay.bytes + 1);
  if (chunk == 0) {
    CUDA_OK(kernels::Aggregate(plan, base, b.state, b.scratch, scratch, b.host, b.stream));
  } else {
    std::uint64_t off = 0;
    do {
      const std::uint64_t n = std::min<std::uint64_t>(chunk, plan.length - off);
      CUDA_OK(kernels::Accumulate(plan, base + off * esize, n, off, b.state, b.scratch, scratch, b.stream));
      off += n;
    } while (off < plan.length);
    CUDA_OK(kernels::Finalize(plan, b.state, b.host, b.stream));
  }
  CUDA_OK(cudaStreamSynchronize(b.stream));
  CUDA_OK(cudaGetLastError());
  const auto* h = static_cast<const unsigned char*>(b.host);
  out->assign(h, h + lay.bytes);
}

// The stored extreme of a row: the value, or the identity of an empty row.
template <DType D>
bool ExtremeIs(kernels::Scalar got, const RefRow& o, bool is_max, bool empty) {
  using T = V<D>;
  if constexpr (rules::IsFloat(D)) {
    if (empty) return got.f64 == (is_max ? -INFINITY : INFINITY);
    const bool nan = is_max ? o.max_nan : o.min_nan;
    return nan ? std::isnan(got.f64) : got.f64 == static_cast<double>(is_max ? o.max : o.min);
  } else if constexpr (rules::IsSigned(D)) {
    if (empty) return got.i64 == static_cast<std::int64_t>(is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
    return got.i64 == (is_max ? o.imax : o.imin);
  } else {
    if (empty) return got.u64 == static_cast<std::uint64_t>(is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
    return got.u64 == (is_max ? o.umax : o.umin);
  }
}

// Every field the plan stores, row by row, against the reference.
template <DType D>
void Check(const AggregatePlan& plan, const std::vector<unsigned char>& res, const std::vector<V<D>>& x,
           const std::vector<RowRef>& ref, const std::string& what) {
  const ResultView view(plan, res.data());
  ASSERT_EQ(view.Rows(), ref.size()) << what;
  const OpMask m = plan.ops;
  const std::uint64_t len = plan.row_length == 0 ? plan.length : plan.row_length;
  int failures = 0;
  for (std::uint64_t r = 0; r < ref.size() && failures < 5; ++r) {
    const RowRef& want = ref[r];
    const RefRow& o = want.plain;
    const std::string at = what + " row " + std::to_string(r);
    auto fail = [&](const std::string& field, long double got, long double expected) {
      ADD_FAILURE() << at << " " << field << ": got " << static_cast<double>(got) << " want "
                    << static_cast<double>(expected);
      ++failures;
    };
    const bool empty = want.count == 0;
    if (view.Count(r) != want.count) fail("count", view.Count(r), want.count);
    if (rules::Has(m, OpKind::kSum)) {
      if constexpr (rules::IsFloat(D)) {
        if (!Close(view.Sum(r).f64, o.fsum, 1e-12L * o.abs_sum + 1e-300L)) fail("sum", view.Sum(r).f64, o.fsum);
      } else if (view.Sum(r).u64 != o.isum) {
        fail("sum", view.Sum(r).u64, o.isum);
      }
    }
    if (rules::Has(m, OpKind::kMin) && !ExtremeIs<D>(view.Min(r), o, false, empty)) fail("min", view.Min(r).f64, o.min);
    if (rules::Has(m, OpKind::kMax) && !ExtremeIs<D>(view.Max(r), o, true, empty)) fail("max", view.Max(r).f64, o.max);
    if (rules::Has(m, OpKind::kMean) || rules::Has(m, OpKind::kVariance) || rules::Has(m, OpKind::kStddev)) {
      const rules::Moments mo = view.Moments(r);
      if (mo.count != static_cast<double>(want.count)) fail("moments.count", mo.count, want.count);
      if (empty) {
        if (!std::isnan(view.Mean(r))) fail("mean of none", view.Mean(r), NAN);
      } else {
        const bool nan = std::isnan(static_cast<double>(o.mean));
        if (!Close(mo.mean, o.mean, nan ? 0 : 1e-12L * o.max_abs + 1e-300L)) fail("mean", mo.mean, o.mean);
        if (!Close(mo.m2, o.m2, nan ? 0 : 1e-10L * o.m2 + 1e-12L * o.max_abs * o.max_abs)) fail("m2", mo.m2, o.m2);
      }
    }
    if (rules::Has(m, OpKind::kSumSquares) && !Close(view.SumSquares(r), o.sumsq, 1e-12L * o.sumsq + 1e-300L))
      fail("sum_squares", view.SumSquares(r), o.sumsq);
    if (rules::Has(m, OpKind::kArgmin)) {
      if (view.Argmin(r) != o.argmin) fail("argmin", view.Argmin(r), o.argmin);
      else if (!empty && !ExtremeIs<D>(view.ArgminValue(r), o, false, false)) fail("argmin value", view.ArgminValue(r).f64, o.min);
    }
    if (rules::Has(m, OpKind::kArgmax)) {
      if (view.Argmax(r) != o.argmax) fail("argmax", view.Argmax(r), o.argmax);
      else if (!empty && !ExtremeIs<D>(view.ArgmaxValue(r), o, true, false)) fail("argmax value", view.ArgmaxValue(r).f64, o.max);
    }
    if (rules::Has(m, OpKind::kHistogram)) {
      const std::uint64_t* hc = view.Histogram(r);
      for (std::uint32_t b = 0; b < plan.histogram.bins + 3; ++b) {
        if (hc[b] != o.hist[b]) {
          fail("histogram slot " + std::to_string(b) + " of " + std::to_string(plan.histogram.bins), hc[b], o.hist[b]);
          break;
        }
      }
    }
    if constexpr (rules::IsFloat(D)) {
      const NanRef& q = want.nan;
      const bool none = q.count == 0;
      if ((m & kNanAll) != 0 && view.NanCount(r) != q.count) fail("nancount", view.NanCount(r), q.count);
      if (rules::Has(m, OpKind::kNanSum) && !Close(view.NanSum(r), q.sum, 1e-12L * q.abs_sum + 1e-300L))
        fail("nansum", view.NanSum(r), q.sum);
      if (rules::Has(m, OpKind::kNanMin) && view.NanMin(r).f64 != (none ? INFINITY : q.min))
        fail("nanmin", view.NanMin(r).f64, q.min);
      if (rules::Has(m, OpKind::kNanMax) && view.NanMax(r).f64 != (none ? -INFINITY : q.max))
        fail("nanmax", view.NanMax(r).f64, q.max);
      if (rules::Has(m, OpKind::kNanMean) || rules::Has(m, OpKind::kNanVariance) || rules::Has(m, OpKind::kNanStddev)) {
        const rules::Moments mo = view.NanMoments(r);
        if (mo.count != static_cast<double>(q.count)) fail("nan moments.count", mo.count, q.count);
        if (none) {
          if (!std::isnan(view.NanMean(r))) fail("nanmean of none", view.NanMean(r), NAN);
          if (!std::isnan(view.NanVariance(r, 0))) fail("nanvar of none", view.NanVariance(r, 0), NAN);
        } else {
          if (!Close(mo.mean, q.mean, 1e-12L * q.max_abs + 1e-300L)) fail("nanmean", mo.mean, q.mean);
          if (!Close(mo.m2, q.m2, 1e-10L * q.m2 + 1e-12L * q.max_abs * q.max_abs)) fail("nan m2", mo.m2, q.m2);
          if (q.count == 1 && !std::isnan(view.NanVariance(r, 1))) fail("nanvar ddof 1 of one", view.NanVariance(r, 1), NAN);
        }
      }
      const auto* row = x.data() + r * len;
      if (rules::Has(m, OpKind::kNanArgmin)) {
        if (view.NanArgmin(r) != q.argmin) fail("nanargmin", view.NanArgmin(r), q.argmin);
        else if (!none && view.NanArgminValue(r).f64 != static_cast<double>(row[q.argmin]))
          fail("nanargmin value", view.NanArgminValue(r).f64, static_cast<double>(row[q.argmin]));
      }
      if (rules::Has(m, OpKind::kNanArgmax)) {
        if (view.NanArgmax(r) != q.argmax) fail("nanargmax", view.NanArgmax(r), q.argmax);
        else if (!none && view.NanArgmaxValue(r).f64 != static_cast<double>(row[q.argmax]))
          fail("nanargmax value", view.NanArgmaxValue(r).f64, static_cast<double>(row[q.argmax]));
      }
    }
  }
}

// A histogram range that leaves values below and above it (reference.h's
// dtypes; the 16-bit floats' edges stay increasing at these bin counts).
template <DType D>
rules::HistogramSpec RangeFor(std::uint32_t bins) {
  switch (D) {
    case DType::kInt32: return {bins, -1.5e9, 1.7e9};
    case DType::kInt64: return {bins, -7e18, 8e18};
    case DType::kUInt32: return {bins, 3e8, 3.9e9};
    case DType::kUInt8: return {bins, 12.0, 240.0};
    case DType::kInt8: return {bins, -100.5, 110.0};
    case DType::kInt16: return {bins, -30000.0, 31000.25};
    case DType::kUInt16: return {bins, 1000.0, 64000.0};
    case DType::kUInt64: return {bins, 1e18, 1.7e19};
    case DType::kBool: return {bins, 0.5, 1.5};
    case DType::kFloat16: return {std::min(bins, 1024u), -600.0, 700.25};
    case DType::kBFloat16: return {std::min(bins, 256u), -600.0, 700.25};
    default: return {bins, -600.0, 700.25};
  }
}

template <DType D>
void CheckCase(const std::vector<V<D>>& x, const Mask* mask, std::uint64_t row_length, OpMask ops,
               std::uint32_t bins, std::uint64_t chunk, const std::string& label, int misalign = -1) {
  AggregatePlan plan;
  plan.dtype = D;
  plan.ops = ops;
  plan.length = x.size();
  plan.row_length = row_length;
  const bool hist = rules::Has(ops, OpKind::kHistogram);
  if (hist) plan.histogram = RangeFor<D>(bins);
  const bool shift = misalign < 0 ? (Rng()() & 1) != 0 : misalign == 1;
  std::vector<unsigned char> res;
  RunPlan(plan, x.data(), mask, chunk, shift, &res);
  if (::testing::Test::HasFatalFailure()) return;
  if (mask != nullptr) plan.validity = reinterpret_cast<const std::uint32_t*>(16);  // the layout with a count
  const auto ref = Expect<D>(x, mask, row_length, hist ? &plan.histogram : nullptr);
  Check<D>(plan, res, x, ref,
           std::string(rules::Name(D)) + " " + label + " n=" + std::to_string(x.size()) + " row=" +
               std::to_string(row_length) + " chunk=" + std::to_string(chunk) + (shift ? " misaligned" : ""));
}

template <typename F>
void ForEachFloat(F&& f) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16})
    rules::VisitDType(d, [&](auto c) { f(c); });
}

constexpr MaskKind kMaskKinds[] = {MaskKind::kAllValid, MaskKind::kAllInvalid, MaskKind::kRandom,
                                   MaskKind::kMostlyValid, MaskKind::kEvery7th};

// --- masks ----------------------------------------------------------------

// Every plain op under every kind of mask, whole arrays: all fused (the
// kEvery kernel), sum/min/max/count (kNanSimple, and the latency path for
// small arrays), argmin/argmax and a histogram alone.
TEST(Masks, WholeArraysEveryDtypeEveryMask) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  std::vector<std::uint64_t> sizes = {0, 1, 33, 1000, 16411, 300007};
  if (!Small()) sizes.push_back(1000003);
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::uint64_t n : sizes) {
      const auto x = Random<D>(n);
      for (MaskKind k : kMaskKinds) {
        const Mask mask = MakeMask(k, n);
        const std::string label = std::string("mask ") + Name(k);
        CheckCase<D>(x, &mask, 0, kPlainOps, 256, 0, label + ", all ops");
        CheckCase<D>(x, &mask, 0, kSumMinMax | rules::Bit(OpKind::kCount), 0, 0, label + ", sum/min/max/count");
        CheckCase<D>(x, &mask, 0, kArgs, 0, 0, label + ", argmin/argmax");
        CheckCase<D>(x, &mask, 0, rules::Bit(OpKind::kHistogram), 4096, 0, label + ", histogram alone");
        CheckCase<D>(x, &mask, 0, rules::Bit(OpKind::kCount), 0, 0, label + ", count alone");
      }
    }
  });
}

// Rows of every shape the kernels treat differently (team rows, rows of
// whole vectors, rows of one or more blocks), fed whole and in chunks that
// cut rows anywhere; the mask is indexed by the global element index.
TEST(Masks, RowsAndChunksEveryDtype) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  struct Shape {
    std::uint64_t rows, len;
  };
  std::vector<Shape> shapes = {{1000, 32}, {301, 33}, {64, 1000}, {7, 70001}, {3, 5000}};
  if (!Small()) shapes.push_back({2, 1000003});
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (const Shape& s : shapes) {
      const std::uint64_t n = s.rows * s.len;
      const auto x = Random<D>(n);
      for (MaskKind k : {MaskKind::kRandom, MaskKind::kEvery7th, MaskKind::kAllInvalid}) {
        const Mask mask = MakeMask(k, n);
        const std::string label = std::string("rows, mask ") + Name(k);
        CheckCase<D>(x, &mask, s.len, kPlainOps, 64, 0, label);
        CheckCase<D>(x, &mask, s.len, kSumMinMax, 0, 0, label + ", sum/min/max");
        CheckCase<D>(x, &mask, s.len, kPlainOps, 64, n / 3 + 7, label + ", chunked");
        CheckCase<D>(x, &mask, s.len, kSumMinMax, 0, 4099, label + ", sum/min/max, chunks of 4099");
      }
      // Some rows all masked, the others all valid.
      Mask rows_off(n, true);
      for (std::uint64_t i = 0; i < n; ++i) rows_off[i] = (i / s.len) % 3 != 1;
      CheckCase<D>(x, &rows_off, s.len, kPlainOps, 64, 0, "every third row masked");
    }
  });
}

// A run of masked elements across a chunk boundary, chunks at offsets that
// are not multiples of 32 (the mask's words straddle the chunks) and at
// every element (the scalar paths).
TEST(Masks, MaskedRunAcrossChunkBoundaries) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    const std::uint64_t n = Small() ? 200003 : 1000003;
    const auto x = Random<D>(n);
    for (std::uint64_t chunk : {65543ull, 100000ull, 333334ull}) {
      Mask mask = MakeMask(MaskKind::kMostlyValid, n);
      for (std::uint64_t cut = chunk; cut < n; cut += chunk)
        for (std::uint64_t i = cut - std::min<std::uint64_t>(cut, 45); i < std::min(n, cut + 77); ++i) mask[i] = false;
      const std::string label = "masked runs across chunk cuts";
      CheckCase<D>(x, &mask, 0, kPlainOps, 300, chunk, label);
      CheckCase<D>(x, &mask, 0, kSumMinMax, 0, chunk, label + ", sum/min/max");
      CheckCase<D>(x, &mask, 0, kArgs, 0, chunk, label + ", argmin/argmax");
    }
    const auto y = Random<D>(2000);
    const Mask m = MakeMask(MaskKind::kRandom, y.size());
    CheckCase<D>(y, &m, 0, kPlainOps, 17, 1, "chunks of one element");
    CheckCase<D>(y, &m, 100, kPlainOps, 17, 37, "rows of 100, chunks of 37");
  });
}

// A mask picks the extremes: the masked elements hold values beyond every
// valid one (and NaNs), which must not leak into min/max/argmin/argmax, and
// the valid extremes tie, so the first valid occurrence must win.
TEST(Masks, MaskedExtremesAndTies) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    using T = V<D>;
    const std::uint64_t n = Small() ? 100003 : 1000003;
    std::vector<T> x(n);
    Mask mask(n);
    std::uniform_int_distribution<int> four(1, 4);
    for (std::uint64_t i = 0; i < n; ++i) {
      mask[i] = i % 5 != 2;
      if (mask[i]) {
        x[i] = static_cast<T>(four(Rng()));
      } else if constexpr (rules::IsFloat(D)) {
        x[i] = i % 3 == 0 ? std::numeric_limits<T>::quiet_NaN() : (i % 3 == 1 ? static_cast<T>(-1e4) : static_cast<T>(1e4));
      } else {
        x[i] = i % 2 == 0 ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      }
    }
    for (std::uint64_t row : {std::uint64_t{0}, n}) {
      CheckCase<D>(x, &mask, row, kPlainOps, 8, 0, "masked beyond the valid extremes");
      CheckCase<D>(x, &mask, row, kArgs | kSumMinMax, 0, n / 4 + 1, "masked beyond the valid extremes, chunked");
    }
    if constexpr (rules::IsFloat(D)) {
      // Every valid element +inf (argmin's identity) or -inf (argmax's).
      std::vector<T> inf(4099, std::numeric_limits<T>::infinity());
      const Mask half = MakeMask(MaskKind::kRandom, inf.size());
      CheckCase<D>(inf, &half, 0, kArgs | kSumMinMax, 0, 0, "every valid element +inf");
      for (auto& v : inf) v = -v;
      CheckCase<D>(inf, &half, 0, kArgs | kSumMinMax, 0, 0, "every valid element -inf");
    }
  });
}

// --- NaN-skipping ops -------------------------------------------------------

template <DType D>
std::vector<std::pair<std::string, std::vector<V<D>>>> NanCases(std::uint64_t n) {
  using T = V<D>;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<std::pair<std::string, std::vector<T>>> cases;
  cases.emplace_back("no nan", Random<D>(n));
  auto few = Random<D>(n);
  std::uniform_int_distribution<std::uint64_t> pos(0, n == 0 ? 0 : n - 1);
  if (n > 0)
    for (int k = 0; k < 5; ++k) few[pos(Rng())] = nan;
  cases.emplace_back("a few nans", few);
  auto ends = Random<D>(n);
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(n, 3); ++i) ends[i] = ends[n - 1 - i] = nan;
  cases.emplace_back("nans at both ends", ends);
  auto half = Random<D>(n);
  for (auto& v : half)
    if (Rng()() & 1) v = nan;
  cases.emplace_back("half nan", half);
  cases.emplace_back("all nan", std::vector<T>(n, nan));
  return cases;
}

// Every NaN-skipping op alone and together, beside the plain ops, with and
// without a mask, on the four float dtypes: whole arrays (the latency path
// for small ones), rows and chunks.
TEST(NanOps, EveryFloatDtypeWholeArrays) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  std::vector<std::uint64_t> sizes = {0, 1, 7, 33, 1000, 300007};
  if (!Small()) sizes.push_back(1000003);
  ForEachFloat([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::uint64_t n : sizes) {
      for (const auto& [label, x] : NanCases<D>(n)) {
        CheckCase<D>(x, nullptr, 0, kNanSimple, 0, 0, label + ", nansum/nanmin/nanmax/nancount");
        CheckCase<D>(x, nullptr, 0, kNanAll, 0, 0, label + ", every nan op");
        CheckCase<D>(x, nullptr, 0, kNanAll | kPlainOps, 128, 0, label + ", every op");
        const Mask mask = MakeMask(MaskKind::kRandom, n);
        CheckCase<D>(x, &mask, 0, kNanSimple | kSumMinMax, 0, 0, label + ", masked, nan and plain sums/extremes");
        CheckCase<D>(x, &mask, 0, kNanAll | kPlainOps, 128, 0, label + ", masked, every op");
        if (n > 1) CheckCase<D>(x, &mask, 0, kNanAll | kPlainOps, 128, n / 3 + 1, label + ", masked, every op, chunked");
      }
      for (int k = rules::kNumKernelOpKinds; k < rules::kNumKernelOpKinds + 9; ++k) {
        const auto kind = static_cast<OpKind>(k);
        const auto x = NanCases<D>(n)[1].second;
        CheckCase<D>(x, nullptr, 0, rules::Bit(kind), 0, 0, std::string(rules::Name(kind)) + " alone, a few nans");
      }
    }
  });
}

TEST(NanOps, RowsAndChunksWithAllNanRows) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  struct Shape {
    std::uint64_t rows, len;
  };
  std::vector<Shape> shapes = {{1000, 32}, {301, 33}, {64, 1000}, {7, 70001}};
  if (!Small()) shapes.push_back({2, 1000003});
  ForEachFloat([&](auto c) {
    constexpr DType D = decltype(c)::value;
    using T = V<D>;
    for (const Shape& s : shapes) {
      const std::uint64_t n = s.rows * s.len;
      auto x = Random<D>(n);
      // Row r: every third all NaN, every third with NaN at both ends, the
      // rest a few NaNs inside.
      for (std::uint64_t r = 0; r < s.rows; ++r) {
        T* row = x.data() + r * s.len;
        if (r % 3 == 0) {
          std::fill(row, row + s.len, std::numeric_limits<T>::quiet_NaN());
        } else if (r % 3 == 1) {
          row[0] = row[s.len - 1] = std::numeric_limits<T>::quiet_NaN();
        } else {
          row[s.len / 2] = std::numeric_limits<T>::quiet_NaN();
        }
      }
      const Mask mask = MakeMask(MaskKind::kEvery7th, n);
      for (const Mask* m : {static_cast<const Mask*>(nullptr), &mask}) {
        const std::string label = m ? "nan rows, masked" : "nan rows";
        CheckCase<D>(x, m, s.len, kNanAll | kPlainOps, 32, 0, label + ", every op");
        CheckCase<D>(x, m, s.len, kNanSimple, 0, 0, label + ", nansum/nanmin/nanmax/nancount");
        CheckCase<D>(x, m, s.len, kNanAll | kPlainOps, 32, n / 3 + 5, label + ", every op, chunked");
        CheckCase<D>(x, m, s.len, kNanSimple | kSumMinMax, 0, 4099, label + ", sums and extremes, chunks of 4099");
      }
    }
  });
}

// nanargmin/nanargmax: ties everywhere (four values), ramps whose best
// moves at every tile, NaNs among them.
TEST(NanOps, ArgExtremesTiesAndRamps) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  ForEachFloat([&](auto c) {
    constexpr DType D = decltype(c)::value;
    using T = V<D>;
    const std::uint64_t n = Small() ? 300007 : 1000003;
    std::vector<T> few(n), up(n), down(n);
    std::uniform_int_distribution<int> four(0, 3);
    for (std::uint64_t i = 0; i < n; ++i) {
      few[i] = (i % 11 == 3) ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(four(Rng()));
      up[i] = static_cast<T>(static_cast<double>(i % 2048));
      down[i] = static_cast<T>(static_cast<double>(2047 - i % 2048));
    }
    up[n - 1] = down[0] = std::numeric_limits<T>::quiet_NaN();
    const OpMask args = rules::Bit(OpKind::kNanArgmin) | rules::Bit(OpKind::kNanArgmax);
    const Mask mask = MakeMask(MaskKind::kMostlyValid, n);
    for (const auto* x : {&few, &up, &down}) {
      CheckCase<D>(*x, nullptr, 0, args, 0, 0, "nan args");
      CheckCase<D>(*x, nullptr, 0, args | kArgs, 0, n / 3 + 1, "nan and plain args, chunked");
      CheckCase<D>(*x, &mask, 0, args | kArgs, 0, 0, "nan and plain args, masked");
    }
  });
}

// --- determinism and plans -------------------------------------------------

TEST(MasksAndNanOps, DeterministicBitwise) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  const std::uint64_t n = Small() ? 1000003 : 20000003;
  auto x = Random<DType::kFloat32>(n);
  for (std::uint64_t i = 0; i < n; i += 101) x[i] = NAN;
  const Mask mask = MakeMask(MaskKind::kRandom, n);
  for (const OpMask ops : {kNanSimple | kSumMinMax, kNanAll | kPlainOps}) {
    AggregatePlan plan;
    plan.dtype = DType::kFloat32;
    plan.ops = ops;
    plan.histogram = {1000, -500.0, 500.0};
    plan.length = n;
    for (std::uint64_t chunk : {0ull, 3000017ull}) {
      std::vector<unsigned char> a, b;
      RunPlan(plan, x.data(), &mask, chunk, true, &a);
      RunPlan(plan, x.data(), &mask, chunk, true, &b);
      EXPECT_TRUE(a == b) << "results differ between two identical runs, chunk " << chunk;
      RunPlan(plan, x.data(), nullptr, chunk, true, &a);
      RunPlan(plan, x.data(), nullptr, chunk, true, &b);
      EXPECT_TRUE(a == b) << "results differ between two identical runs, no mask, chunk " << chunk;
    }
  }
}

// Plain plans are unchanged by the masking kernels' existence: a mask of
// all-valid bits gives the same values as no mask (to rounding: the
// masking kernels add in their own order), and the same argmin/argmax,
// histogram and integer results exactly.
TEST(MasksAndNanOps, AllValidMaskMatchesNoMask) {
  TALLY_REQUIRE_GPU("GPU mask and NaN-op tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    const auto x = Random<D>(100003);
    const Mask all = MakeMask(MaskKind::kAllValid, x.size());
    CheckCase<D>(x, nullptr, 0, kPlainOps, 64, 0, "no mask");
    CheckCase<D>(x, &all, 0, kPlainOps, 64, 0, "all valid");
  });
}

TEST(MasksAndNanOps, ValidateRefusesNanOpsOnIntegersAndMisalignedMasks) {
  AggregatePlan p;
  p.length = 10;
  for (DType d : rules::kAllDTypes) {
    p.dtype = d;
    for (int k = rules::kNumKernelOpKinds; k < rules::kNumKernelOpKinds + 9; ++k) {
      p.ops = rules::Bit(static_cast<OpKind>(k));
      EXPECT_EQ(kernels::Validate(p), rules::IsFloat(d) ? cudaSuccess : cudaErrorInvalidValue)
          << rules::Name(d) << " " << rules::Name(static_cast<OpKind>(k));
    }
  }
  p.dtype = DType::kFloat32;
  // prod and count_nonzero are the fold pass's; any, all and ptp are read
  // from it and the fused min and max, and have no bit of their own.
  p.ops = rules::Bit(OpKind::kProduct) | rules::Bit(OpKind::kCountNonzero);
  EXPECT_EQ(kernels::Validate(p), cudaSuccess);
  for (const OpKind k : {OpKind::kAny, OpKind::kAll, OpKind::kPtp}) {
    p.ops = rules::Bit(k);
    EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue) << rules::Name(k) << " is not a kernel op";
  }
  p.ops = rules::Bit(OpKind::kSum);
  alignas(4) static std::uint32_t words[2] = {0, 0};
  p.validity = words;
  EXPECT_EQ(kernels::Validate(p), cudaSuccess);
  p.validity = reinterpret_cast<const std::uint32_t*>(reinterpret_cast<const unsigned char*>(words) + 2);
  EXPECT_EQ(kernels::Validate(p), cudaErrorInvalidValue);
  // The layout: a count with a mask, the NaN fields with their ops.
  p.validity = words;
  p.ops = rules::Bit(OpKind::kSum) | rules::Bit(OpKind::kNanMean);
  const ResultLayout l = kernels::LayoutOf(p);
  EXPECT_NE(l.count, ResultLayout::kAbsent);
  EXPECT_NE(l.nan_count, ResultLayout::kAbsent);
  EXPECT_NE(l.nan_moments, ResultLayout::kAbsent);
  EXPECT_EQ(l.nan_sum, ResultLayout::kAbsent);
  EXPECT_EQ(l.nan_argmin, ResultLayout::kAbsent);
  p.validity = nullptr;
  EXPECT_EQ(kernels::LayoutOf(p).count, ResultLayout::kAbsent);
}

}  // namespace
}  // namespace tally::testing
