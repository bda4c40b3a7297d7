// GPU tests of the fold pass (tally/kernels/aggregate.h, kFoldOps:
// numpy.prod and count_nonzero) against a host reference: every dtype,
// whole arrays and rows short and long, chunks that cut rows anywhere,
// validity masks, beside fused ops, poisoned state and scratch, and the
// same bits run after run.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tally/kernels/aggregate.h"
#include "tally/kernels/cuda_error.h"
#include "tests/gpu/gpu_test_util.h"

namespace tally::testing {
namespace {

using kernels::AggregatePlan;
using kernels::ResultView;
using rules::DType;
using rules::OpKind;

constexpr rules::OpMask kProd = rules::Bit(OpKind::kProduct);
constexpr rules::OpMask kNonzero = rules::Bit(OpKind::kCountNonzero);
constexpr rules::OpMask kWithFused = kProd | kNonzero | rules::Bit(OpKind::kSum) | rules::Bit(OpKind::kMin);

// Values whose products neither vanish nor blow up: floats e^u for u in
// [-0.01, 0.01], a third negative (a product of 4M stays within e^±20);
// odd integers over the whole range (their products wrap modulo 2^64 but
// never reach 0); bool all ones. With `specials`, about 1 in 500 elements
// is 0 (floats: 0, -0.0 or NaN, a third each), which counts for
// count_nonzero and makes the rows that hold one 0 or NaN.
template <DType D>
std::vector<V<D>> Values(std::uint64_t n, bool specials) {
  using T = V<D>;
  std::vector<T> x = Random<D>(n);
  auto& rng = Rng();
  if constexpr (rules::IsFloat(D)) {
    std::uniform_real_distribution<double> u(-0.01, 0.01);
    for (std::uint64_t i = 0; i < n; ++i) x[i] = static_cast<T>((rng() % 3 == 0 ? -1.0 : 1.0) * std::exp(u(rng)));
  } else if constexpr (D == DType::kBool) {
    for (auto& v : x) v = 1;
  } else {
    for (auto& v : x) v = static_cast<T>(v | 1);
  }
  if (!specials) return x;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (rng() % 500 != 0) continue;
    if constexpr (rules::IsFloat(D)) {
      const int k = static_cast<int>(rng() % 3);
      x[i] = k == 0 ? static_cast<T>(0.0) : k == 1 ? static_cast<T>(-0.0) : std::numeric_limits<T>::quiet_NaN();
    } else {
      x[i] = T{};
    }
  }
  return x;
}

template <typename T>
double AsDouble(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));  // float16, bfloat16: exact through float
  }
}

struct RefRow {
  long double fprod = 1;
  std::uint64_t uprod = 1;
  bool nan = false;
  std::uint64_t nonzero = 0;
  std::uint64_t count = 0;
};

template <DType D>
std::vector<RefRow> Reference(const std::vector<V<D>>& x, std::uint64_t row, const std::vector<std::uint32_t>* mask) {
  const std::uint64_t r = row == 0 ? std::max<std::uint64_t>(x.size(), 1) : row;
  std::vector<RefRow> out(row == 0 ? 1 : x.size() / row);
  for (std::uint64_t i = 0; i < x.size(); ++i) {
    if (mask != nullptr && ((*mask)[i / 32] >> (i % 32) & 1u) == 0) continue;
    RefRow& o = out[i / r];
    const V<D> v = x[i];
    ++o.count;
    if constexpr (rules::IsFloat(D)) {
      const double d = AsDouble(v);
      o.fprod *= d;
      o.nan = o.nan || std::isnan(d);
      o.nonzero += d != 0.0 ? 1 : 0;
    } else {
      using W = std::conditional_t<std::is_signed_v<V<D>>, std::int64_t, std::uint64_t>;
      o.uprod *= static_cast<std::uint64_t>(static_cast<W>(v));
      o.nonzero += v != V<D>{} ? 1 : 0;
    }
  }
  return out;
}

// The plan over x fed in chunks of `chunk` elements (0: one Aggregate), the
// state and scratch poisoned first; the result bytes.
std::vector<unsigned char> RunFold(const AggregatePlan& plan, const void* x, std::uint64_t chunk) {
  std::vector<unsigned char> out;
  const kernels::ResultLayout lay = kernels::LayoutOf(plan);
  const std::size_t bytes = plan.length * rules::SizeOf(plan.dtype);
  void *d_x = nullptr, *d_state = nullptr, *d_scratch = nullptr, *h = nullptr;
  std::uint32_t* d_mask = nullptr;
  cudaStream_t stream = nullptr;
  std::size_t scratch = 0;
  auto run = [&]() {
    CUDA_OK(kernels::Validate(plan));
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&d_x, bytes + 16));
    if (bytes) {
      CUDA_OK(cudaMemcpy(d_x, x, bytes, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMalloc(&d_state, lay.bytes + 1));
    CUDA_OK(cudaMemset(d_state, 0xA5, lay.bytes + 1));
    CUDA_OK(kernels::ScratchBytes(plan, chunk == 0 ? plan.length : chunk, &scratch));
    CUDA_OK(cudaMalloc(&d_scratch, scratch + 1));
    CUDA_OK(cudaMemset(d_scratch, 0x5A, scratch + 1));
    CUDA_OK(cudaMallocHost(&h, lay.bytes + 1));
    std::memset(h, 0x77, lay.bytes + 1);
    AggregatePlan p = plan;
    if (plan.validity != nullptr) {
      const std::size_t words = (plan.length + 31) / 32 + 1;
      CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d_mask), words * 4));
      CUDA_OK(cudaMemcpy(d_mask, plan.validity, words * 4, cudaMemcpyHostToDevice));
      p.validity = d_mask;
    }
    if (chunk == 0) {
      CUDA_OK(kernels::Aggregate(p, d_x, d_state, d_scratch, scratch, h, stream));
    } else {
      std::uint64_t off = 0;
      do {
        const std::uint64_t n = std::min<std::uint64_t>(chunk, plan.length - off);
        CUDA_OK(kernels::Accumulate(p, static_cast<unsigned char*>(d_x) + off * rules::SizeOf(plan.dtype), n, off,
                                    d_state, d_scratch, scratch, stream));
        off += n;
      } while (off < plan.length);
      CUDA_OK(kernels::Finalize(p, d_state, h, stream));
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    out.assign(static_cast<unsigned char*>(h), static_cast<unsigned char*>(h) + lay.bytes);
  };
  run();
  TALLY_CUDA_CHECK_NOTHROW(cudaFree(d_x));
  TALLY_CUDA_CHECK_NOTHROW(cudaFree(d_state));
  TALLY_CUDA_CHECK_NOTHROW(cudaFree(d_scratch));
  TALLY_CUDA_CHECK_NOTHROW(cudaFree(d_mask));
  TALLY_CUDA_CHECK_NOTHROW(cudaFreeHost(h));
  if (stream) TALLY_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream));
  return out;
}

template <DType D>
void CheckCase(const std::vector<V<D>>& x, std::uint64_t row, std::uint64_t chunk, rules::OpMask ops,
               const std::vector<std::uint32_t>* mask, const std::string& what) {
  SCOPED_TRACE(::testing::Message() << rules::Name(D) << " " << what << " n=" << x.size() << " row=" << row
                                    << " chunk=" << chunk << (mask ? " masked" : ""));
  AggregatePlan plan;
  plan.dtype = D;
  plan.ops = ops;
  plan.length = x.size();
  plan.row_length = row;
  plan.validity = mask != nullptr ? mask->data() : nullptr;  // RunFold copies it to the device
  const std::vector<unsigned char> res = RunFold(plan, x.data(), chunk);
  if (::testing::Test::HasFatalFailure()) return;
  const ResultView view(plan, res.data());
  const std::vector<RefRow> ref = Reference<D>(x, row, mask);
  ASSERT_EQ(view.Rows(), ref.size());
  int failures = 0;
  for (std::uint64_t r = 0; r < ref.size() && failures < 3; ++r) {
    const RefRow& o = ref[r];
    if (mask != nullptr && view.Count(r) != o.count) {
      ADD_FAILURE() << "row " << r << " count " << view.Count(r) << " want " << o.count;
      ++failures;
    }
    if (rules::Has(ops, OpKind::kCountNonzero) && view.Nonzero(r) != o.nonzero) {
      ADD_FAILURE() << "row " << r << " nonzero " << view.Nonzero(r) << " want " << o.nonzero;
      ++failures;
    }
    if (!rules::Has(ops, OpKind::kProduct)) continue;
    if constexpr (rules::IsFloat(D)) {
      const double got = view.Product(r).f64;
      const bool ok = o.nan ? std::isnan(got)
                            : std::fabs(got - static_cast<double>(o.fprod)) <= 1e-10 * std::fabs(static_cast<double>(o.fprod)) &&
                                  std::signbit(got) == std::signbit(static_cast<double>(o.fprod));
      if (!ok) {
        ADD_FAILURE() << "row " << r << " product " << got << " want " << static_cast<double>(o.fprod);
        ++failures;
      }
    } else if (view.Product(r).u64 != o.uprod) {
      ADD_FAILURE() << "row " << r << " product " << view.Product(r).u64 << " want " << o.uprod;
      ++failures;
    }
  }
}

std::vector<std::uint32_t> RandomMask(std::uint64_t n) {
  std::vector<std::uint32_t> m((n + 31) / 32 + 1);
  for (auto& w : m) w = static_cast<std::uint32_t>(Rng()() | Rng()());  // about 3 in 4 valid
  if (n >= 64) m[1] = 0;                                                // elements 32..63 all masked
  return m;
}

TEST(Fold, WholeArraysEveryDtypeAndSize) {
  TALLY_REQUIRE_GPU("fold pass tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::uint64_t n : {0ull, 1ull, 5ull, 4095ull, 4096ull, 100003ull, (1ull << 22) + 3}) {
      if (Small() && n > 100003) continue;
      for (const bool specials : {false, true}) {
        const auto x = Values<D>(n, specials);
        CheckCase<D>(x, 0, 0, kProd, nullptr, "prod");
        CheckCase<D>(x, 0, 0, kNonzero, nullptr, "nonzero");
        CheckCase<D>(x, 0, 4099, kWithFused, nullptr, "with fused, chunked");
      }
    }
  });
}

TEST(Fold, RowsShortAndLongOverChunksThatCutThem) {
  TALLY_REQUIRE_GPU("fold pass tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    for (std::uint64_t row : {1ull, 3ull, 33ull, 4095ull, 4096ull, 10007ull, 300007ull}) {
      const std::uint64_t rows = row >= 10007 ? 5 : 3001;
      const auto x = Values<D>(row * rows, row < 4096);
      for (std::uint64_t chunk : {0ull, 4099ull, 65543ull, 1234567ull}) {
        if (Small() && chunk == 4099 && row * rows > 100000) continue;
        CheckCase<D>(x, row, chunk, kWithFused, nullptr, "rows");
      }
    }
  });
}

TEST(Fold, ValidityMasksSkipElementsAndCountTheRest) {
  TALLY_REQUIRE_GPU("fold pass tests");
  ForEachDType([&](auto c) {
    constexpr DType D = decltype(c)::value;
    const auto x = Values<D>(33 * 4001, true);
    const auto mask = RandomMask(x.size());
    for (std::uint64_t row : {0ull, 1ull, 33ull, 4001ull * 3}) {
      for (std::uint64_t chunk : {0ull, 7001ull}) {
        CheckCase<D>(x, row, chunk, kProd | kNonzero, &mask, "masked fold alone");
        CheckCase<D>(x, row, chunk, kWithFused, &mask, "masked with fused");
      }
    }
  });
}

TEST(Fold, SameBitsRunAfterRun) {
  TALLY_REQUIRE_GPU("fold pass tests");
  const auto x = Values<DType::kFloat64>(3'000'017, false);
  for (std::uint64_t row : {0ull, 77ull, 1'000'000ull}) {
    AggregatePlan plan;
    plan.dtype = DType::kFloat64;
    plan.ops = kProd | kNonzero;
    plan.length = row == 0 ? x.size() : x.size() / row * row;
    plan.row_length = row;
    const auto a = RunFold(plan, x.data(), 65543);
    const auto b = RunFold(plan, x.data(), 65543);
    EXPECT_EQ(a, b) << "row " << row;
  }
}

TEST(Fold, FoldOpsAreValidPlanBits) {
  AggregatePlan plan;
  plan.dtype = DType::kInt8;
  plan.length = 10;
  plan.ops = kProd;
  EXPECT_EQ(kernels::Validate(plan), cudaSuccess);
  const kernels::ResultLayout lay = kernels::LayoutOf(plan);
  EXPECT_NE(lay.product, kernels::ResultLayout::kAbsent);
  EXPECT_EQ(lay.nonzero, kernels::ResultLayout::kAbsent);
  EXPECT_EQ(lay.sum, kernels::ResultLayout::kAbsent);
}

}  // namespace
}  // namespace tally::testing
