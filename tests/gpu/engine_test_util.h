// Helpers for the CUDA engine tests: a GPU check that skips, random arrays
// per dtype, driving a Backend, and comparing results.
#pragma once

#include <algorithm>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/backend_factory.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/cuda/cuda_backend.h"

namespace tally::engine_test {

inline int GpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

#define TALLY_REQUIRE_GPU()                                                          \
  do {                                                                               \
    if (::tally::engine_test::GpuCount() == 0)                                       \
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount reports none); "   \
                      "the CUDA engine tests need a GPU";                            \
  } while (0)

// Small chunks so that arrays of a few chunks stay cheap; every request on
// the GPU unless a test says otherwise (routed by size, with no size too
// small).
inline BackendOptions TestOptions() {
  BackendOptions o;
  o.kind = "cuda";
  o.routing = "size";
  o.route_calibration = false;
  o.cuda_devices = {0};
  o.chunk_bytes = 64 << 10;
  o.pinned_pool_bytes = 64 << 20;
  o.streams_per_device = 2;
  o.small_request_bytes = 0;
  o.max_state_bytes = 64 << 20;
  o.lane_wait = std::chrono::milliseconds(200);
  return o;
}

// The cuda backend as the server makes it: the router over the GPUs and
// the cpu backend, under the functions' router.
inline std::unique_ptr<Backend> MakeCuda(const BackendOptions& o) {
  absl::StatusOr<std::unique_ptr<Backend>> b = MakeBackend(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

inline std::unique_ptr<Backend> MakeCpu() { return MakeCpuBackend(CpuBackendOptions{.threads = 4}); }

// Random bytes of `n` elements of `dtype`, spread over the type's range; with
// `nans`, a few NaNs in float arrays.
inline std::vector<std::byte> RandomArray(DType dtype, std::uint64_t n, std::uint64_t seed,
                                          bool nans = false) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n * rules::SizeOf(dtype));
  rules::VisitDType(dtype, [&](auto d) {
    using V = typename rules::Traits<decltype(d)::value>::value;
    V* x = reinterpret_cast<V*>(out.data());
    for (std::uint64_t i = 0; i < n; ++i) {
      if constexpr (rules::kIsFloatValue<V>) {
        x[i] = static_cast<V>(std::normal_distribution<double>(3.0, 100.0)(rng));
        if (nans && rng() % 5000 == 0) x[i] = std::numeric_limits<V>::quiet_NaN();
      } else if constexpr (std::is_same_v<V, std::int32_t>) {
        x[i] = static_cast<V>(std::uniform_int_distribution<std::int32_t>(-1000000, 1000000)(rng));
      } else if constexpr (std::is_same_v<V, std::int64_t>) {
        x[i] = std::uniform_int_distribution<std::int64_t>(-1000000000000, 1000000000000)(rng);
      } else if constexpr (decltype(d)::value == DType::kBool) {
        x[i] = static_cast<V>(rng() & 1);
      } else if constexpr (std::is_same_v<V, std::uint8_t>) {
        x[i] = static_cast<V>(rng() & 0xff);
      } else {  // uint32, and int8, int16, uint16, uint64 over their whole range
        x[i] = static_cast<V>(rng());
      }
    }
  });
  return out;
}

// A histogram range inside the data's spread, so below and above count too.
inline HistogramSpec HistogramFor(DType dtype, std::uint32_t bins) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64: return {bins, -150.0, 170.0};
    case DType::kInt32: return {bins, -800000.0, 900000.0};
    case DType::kInt64: return {bins, -8e11, 9e11};
    case DType::kUInt32: return {bins, 4e8, 3.9e9};
    case DType::kUInt8: return {bins, 10.0, 240.0};
    case DType::kInt8: return {bins, -100.0, 110.0};
    case DType::kInt16: return {bins, -30000.0, 31000.0};
    case DType::kUInt16: return {bins, 1000.0, 64000.0};
    case DType::kUInt64: return {bins, 1e18, 1.7e19};
    case DType::kBool: return {bins, 0.5, 1.5};  // the 0s below, the 1s in the last bin
    // Edges rounded to 11 or 8 bits increase strictly only up to these bin
    // counts over this range (the server refuses more).
    case DType::kFloat16: return {std::min(bins, 1024u), -150.0, 170.0};
    case DType::kBFloat16: return {std::min(bins, 64u), -150.0, 170.0};
  }
  return {bins, 0.0, 1.0};
}

inline OpSpec Op(OpKind k, double ddof = 0.0) { return OpSpec{.kind = k, .ddof = ddof}; }

// Every op once (histogram, and the fold pass's prod and count_nonzero
// with any and all, included); without the ops an empty array lacks (and
// ptp, which bool lacks).
inline std::vector<OpSpec> AllOps(DType dtype, bool non_empty = true) {
  std::vector<OpSpec> ops = {Op(OpKind::kSum),        Op(OpKind::kMean),
                             Op(OpKind::kCount),      Op(OpKind::kSumSquares),
                             Op(OpKind::kVariance),   Op(OpKind::kStddev, 1.0),
                             OpSpec{.kind = OpKind::kHistogram, .histogram = HistogramFor(dtype, 37)},
                             Op(OpKind::kProduct),    Op(OpKind::kCountNonzero),
                             Op(OpKind::kAny),        Op(OpKind::kAll)};
  if (non_empty) {
    for (OpKind k : {OpKind::kMin, OpKind::kMax, OpKind::kArgmin, OpKind::kArgmax}) ops.push_back(Op(k));
    if (dtype != DType::kBool) ops.push_back(Op(OpKind::kPtp));
  }
  return ops;
}

inline AggregationPlan Plan(DType dtype, std::uint64_t length, std::uint64_t row_length,
                            std::vector<OpSpec> ops) {
  return AggregationPlan{.array = {.dtype = dtype, .length = length, .row_length = row_length},
                         .ops = std::move(ops)};
}

// Runs `data` through `backend`, cut into pieces of `piece` elements (0: one
// piece; the pieces cycle through `pieces` when it is not empty).
inline absl::StatusOr<AggregationResult> RunRequest(Backend& backend, const AggregationPlan& plan,
                                                    std::span<const std::byte> data,
                                             std::vector<std::uint64_t> pieces = {}) {
  absl::StatusOr<std::unique_ptr<Reduction>> r = backend.Start(plan);
  if (!r.ok()) return r.status();
  const std::size_t es = rules::SizeOf(plan.array.dtype);
  if (data.empty()) {
    if (absl::Status s = (*r)->Consume(data); !s.ok()) return s;
  }
  for (std::size_t at = 0, k = 0; at < data.size(); ++k) {
    std::size_t len = data.size() - at;
    if (!pieces.empty()) len = std::min<std::size_t>(len, pieces[k % pieces.size()] * es);
    if (absl::Status s = (*r)->Consume(data.subspan(at, len)); !s.ok()) return s;
    at += len;
  }
  return (*r)->Finish();
}

inline bool SameDouble(double a, double b, bool exact) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (exact) return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

// How two answers of the same plan must agree. Integers, histograms and
// min/max/argmin/argmax/ptp always exactly.
enum class Match {
  kBits,       // every value the same bits
  kExactSums,  // the same bits but a float dtype's prod, rounded in each
               // path's own order (to 1e-9 relative): what exact sums promise
  kRounded,    // floating-point sums and moments to 1e-9 relative (paths
               // that keep float64 sums: group-by's, GPU segments')
};

inline void ExpectSame(const AggregationPlan& plan, const AggregationResult& want,
                       const AggregationResult& got, Match match, const std::string& what) {
  ASSERT_EQ(want.values.size(), got.values.size()) << what;
  const bool float_dtype = rules::IsFloat(plan.array.dtype);
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    const OpKind k = plan.ops[i].kind;
    const bool op_exact = match == Match::kBits || k == OpKind::kMin || k == OpKind::kMax || k == OpKind::kPtp ||
                          (match == Match::kExactSums && !(float_dtype && k == OpKind::kProduct));
    const std::string where = what + " op " + rules::Name(k) + " #" + std::to_string(i);
    ASSERT_EQ(want.values[i].index(), got.values[i].index()) << where;
    if (const auto* w = std::get_if<std::vector<double>>(&want.values[i])) {
      const auto& g = std::get<std::vector<double>>(got.values[i]);
      ASSERT_EQ(w->size(), g.size()) << where;
      for (std::size_t r = 0; r < w->size(); ++r) {
        ASSERT_TRUE(SameDouble((*w)[r], g[r], op_exact))
            << where << " row " << r << ": want " << (*w)[r] << ", got " << g[r];
      }
    } else {
      ASSERT_TRUE(want.values[i] == got.values[i]) << where;
    }
  }
}

}  // namespace tally::engine_test
