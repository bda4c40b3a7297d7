// GPU tests of the cuda backend's device passes for the functions that keep
// their own state (server/engine/cuda/kept_on_device.h): quantile,
// nanquantile, median, nanmedian (every method), topk and bottomk (k up to
// 65536), hll and ddsketch over arrays in GPU memory, against the host steps (the
// function router over the cpu backend, reading the same bytes from host
// memory), bitwise. Arrays carry NaN of several payloads, -0.0 beside 0.0,
// infinities, ties and few distinct values. Also: the router takes the
// device pass (backend "cuda") and mixes it with the fused ops; what the
// passes do not cover (count_distinct, mode, float16, masks, rows,
// partial states) answers UNIMPLEMENTED and the router's host steps answer
// instead; several pieces of one array give the same answers.
// Every seed is printed; TALLY_GPU_TEST_SMALL=1 drops the largest sizes.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "server/engine/functions/function_router.h"
#include "tests/gpu/engine_test_util.h"

namespace tally::engine_test {
namespace {

using rules::agg::RowAnswer;

bool Small() {
  const char* s = std::getenv("TALLY_GPU_TEST_SMALL");
  return s != nullptr && s[0] == '1';
}

std::uint64_t Seed() {
  const std::uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

enum class Shape { kSpread, kFewDistinct, kSorted, kConstant, kAllNan };

// n elements of `dtype`: kSpread draws over a wide range with 1% NaN
// (three payloads, both signs), infinities and signed zeros in floats;
// kFewDistinct seven values (floats: -2.5, 0, -0.0, 1, 7, inf, NaN).
std::vector<std::byte> MakeArray(DType dtype, std::uint64_t n, Shape shape, std::mt19937_64& rng) {
  std::vector<std::byte> out(n * rules::SizeOf(dtype));
  rules::VisitDType(dtype, [&](auto d) {
    using V = typename rules::Traits<decltype(d)::value>::value;
    if constexpr (std::is_floating_point_v<V> || std::is_integral_v<V>) {
      V* x = reinterpret_cast<V*>(out.data());
      constexpr bool kFloat = std::is_floating_point_v<V>;
      for (std::uint64_t i = 0; i < n; ++i) {
        V v{};
        const std::uint64_t r = rng();
        switch (shape) {
          case Shape::kSpread:
            if constexpr (kFloat) {
              v = static_cast<V>(std::normal_distribution<double>(3.0, 100.0)(rng));
              switch (r % 200) {
                case 0: v = std::numeric_limits<V>::quiet_NaN(); break;
                case 1: v = -std::numeric_limits<V>::quiet_NaN(); break;
                case 2: v = std::bit_cast<V>(static_cast<std::conditional_t<sizeof(V) == 8, std::uint64_t,
                                                                             std::uint32_t>>(
                            sizeof(V) == 8 ? 0x7ff0000000000abcull : 0x7f800abcu));
                  break;
                case 3: v = std::numeric_limits<V>::infinity(); break;
                case 4: v = -std::numeric_limits<V>::infinity(); break;
                case 5: v = V(0); break;
                case 6: v = V(-0.0); break;
                default: break;
              }
            } else {
              v = static_cast<V>(r);
              if (r % 50 == 0) v = V(0);  // ties
            }
            break;
          case Shape::kFewDistinct:
            if constexpr (kFloat) {
              const V values[] = {V(-2.5), V(0), V(-0.0), V(1), V(7), std::numeric_limits<V>::infinity(),
                                  std::numeric_limits<V>::quiet_NaN()};
              v = values[r % 7];
            } else {
              const V values[] = {V(3), V(0), V(1), std::numeric_limits<V>::max(), std::numeric_limits<V>::lowest(),
                                  V(42), V(7)};
              v = values[r % 7];
            }
            break;
          case Shape::kSorted: v = static_cast<V>(kFloat ? static_cast<double>(i) * 0.25 - 1e5 : static_cast<double>(i)); break;
          case Shape::kConstant: v = V(5); break;
          case Shape::kAllNan:
            if constexpr (kFloat) v = std::numeric_limits<V>::quiet_NaN();
            break;
        }
        x[i] = v;
      }
    }
  });
  return out;
}

// The device's copy of host bytes, freed at the end of the scope.
class DeviceCopy {
 public:
  explicit DeviceCopy(std::span<const std::byte> bytes) : size_(bytes.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<std::size_t>(size_, 16)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, bytes.data(), size_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceCopy() { (void)cudaFree(p_); }
  Extent extent(std::uint64_t from = 0, std::uint64_t bytes = ~0ull) const {
    const std::uint64_t n = std::min<std::uint64_t>(bytes, size_ - from);
    return Extent{{static_cast<const std::byte*>(p_) + from, n}, Placement::Device(0)};
  }

 private:
  void* p_ = nullptr;
  std::size_t size_;
};

// The plan's answer through `backend` with the bytes in the pieces given.
absl::StatusOr<AggregationResult> RunPlan(Backend& backend, const AggregationPlan& plan, std::span<const Extent> pieces,
                                          bool kept_on_device = false) {
  absl::StatusOr<std::unique_ptr<Reduction>> r =
      kept_on_device ? backend.StartKeptOnDevice(plan, pieces.front().placement)
                     : backend.Start(plan, pieces.front().placement);
  if (!r.ok()) return r.status();
  for (const Extent& e : pieces) {
    if (absl::Status s = (*r)->Consume(e); !s.ok()) return s;
  }
  return (*r)->Finish();
}

bool SameDouble(double a, double b, bool zero_sign_free) {
  if (std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b)) return true;
  if (std::isnan(a) && std::isnan(b)) return true;  // NaN answers come from one constant, but payloads may not
  return zero_sign_free && a == 0 && b == 0;
}

// The two answers of op i agree: bitwise, but for the sign of a zero that
// an order statistic of a quantile op is (the host's nth_element leaves
// either of -0.0 and 0.0 at a rank; the device reports 0.0).
void ExpectSame(const OpValues& got, const OpValues& want, const OpSpec& op, const std::string& what) {
  const auto* g = std::get_if<std::vector<RowAnswer>>(&got);
  const auto* w = std::get_if<std::vector<RowAnswer>>(&want);
  ASSERT_TRUE(g != nullptr && w != nullptr) << what;
  ASSERT_EQ(g->size(), w->size()) << what;
  const bool zero_sign_free = op.kind != OpKind::kTopK && op.kind != OpKind::kBottomK;
  for (std::size_t r = 0; r < g->size(); ++r) {
    const RowAnswer& a = (*g)[r];
    const RowAnswer& b = (*w)[r];
    ASSERT_EQ(a.doubles.size(), b.doubles.size()) << what;
    for (std::size_t i = 0; i < a.doubles.size(); ++i) {
      ASSERT_TRUE(SameDouble(a.doubles[i], b.doubles[i], zero_sign_free))
          << what << ": value " << i << ": device " << a.doubles[i] << ", host " << b.doubles[i];
    }
    if (!zero_sign_free) {
      for (std::size_t i = 0; i < a.doubles.size(); ++i) {
        // topk's values are the elements themselves: NaN payloads too.
        ASSERT_EQ(std::bit_cast<std::uint64_t>(a.doubles[i]), std::bit_cast<std::uint64_t>(b.doubles[i]))
            << what << ": value " << i;
      }
    }
    ASSERT_EQ(a.int64s, b.int64s) << what;
    ASSERT_EQ(a.uint64s, b.uint64s) << what;
    ASSERT_EQ(a.indices, b.indices) << what;
  }
}

std::vector<OpSpec> KeptOps(std::uint64_t n) {
  std::vector<OpSpec> ops;
  ops.push_back({.kind = OpKind::kMedian});
  ops.push_back({.kind = OpKind::kNanMedian});
  OpSpec q{.kind = OpKind::kQuantile};
  for (int i = 0; i <= 64; ++i) q.q.push_back(i / 64.0);
  q.q.push_back(0.999);
  for (int m = 0; m < rules::kNumQuantileMethods; ++m) {
    q.method = static_cast<rules::QuantileMethod>(m);
    q.kind = m % 2 == 0 ? OpKind::kQuantile : OpKind::kNanQuantile;
    ops.push_back(q);
  }
  for (const std::uint32_t k : {1u, 8u, 1000u, 65536u}) {
    if (k > 4 * n && k != 65536u) continue;
    ops.push_back({.kind = OpKind::kTopK, .k = k});
    ops.push_back({.kind = OpKind::kBottomK, .k = k});
  }
  for (const std::uint32_t p : {4u, 12u, 18u}) ops.push_back({.kind = OpKind::kHll, .precision = p});
  ops.push_back({.kind = OpKind::kDdSketch, .relative_accuracy = 0.01});  // the median
  ops.push_back({.kind = OpKind::kDdSketch, .q = {0.0, 0.001, 0.25, 0.5, 0.99, 1.0}, .relative_accuracy = 0.001});
  ops.push_back({.kind = OpKind::kDdSketch, .q = {0.1, 0.9}, .relative_accuracy = 0.5});
  return ops;
}

class KeptOnDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) GTEST_SKIP() << "no CUDA device visible: the device passes of quantiles, top-k and hll need a GPU";
    BackendOptions options = TestOptions();
    options.max_holistic_bytes = std::uint64_t{16} << 30;
    absl::StatusOr<std::unique_ptr<Backend>> cuda = MakeBackend(options);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    device_ = std::move(*cuda);
    host_ = MakeFunctionRouter(MakeCpu(), std::uint64_t{16} << 30);
  }

  // Every op on the device pass and on the host steps, compared.
  void Compare(DType dtype, std::uint64_t n, Shape shape, std::mt19937_64& rng) {
    const std::vector<std::byte> bytes = MakeArray(dtype, n, shape, rng);
    DeviceCopy on_gpu(bytes);
    const std::string what = std::string(rules::Name(dtype)) + " n=" + std::to_string(n) + " shape " +
                             std::to_string(static_cast<int>(shape));
    const AggregationPlan plan = Plan(dtype, n, 0, KeptOps(n));
    const Extent whole = on_gpu.extent();
    absl::StatusOr<AggregationResult> device = RunPlan(*device_, plan, {&whole, 1}, /*kept_on_device=*/true);
    ASSERT_TRUE(device.ok()) << what << ": " << device.status();
    EXPECT_EQ(device->backend, "cuda") << what;
    const Extent host_bytes = Extent::PageableHost(bytes);
    absl::StatusOr<AggregationResult> host = RunPlan(*host_, plan, {&host_bytes, 1});
    ASSERT_TRUE(host.ok()) << what << ": " << host.status();
    ASSERT_EQ(device->values.size(), plan.ops.size());
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
      ExpectSame(device->values[i], host->values[i], plan.ops[i], what + " " + plan.NameOf(i));
      if (HasFatalFailure()) return;
    }
  }

  std::unique_ptr<Backend> device_;  // the router over the cuda backend
  std::unique_ptr<Backend> host_;    // the router over the cpu backend
};

TEST_F(KeptOnDeviceTest, EveryFunctionMatchesTheHostSteps) {
  std::mt19937_64 rng(Seed());
  std::vector<std::uint64_t> sizes = {1, 2, 1000, (1u << 20) + 7};
  if (!Small()) sizes.push_back((1u << 24) + 3);
  for (const DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt32,
                            DType::kUInt64}) {
    for (const std::uint64_t n : sizes) {
      for (const Shape shape : {Shape::kSpread, Shape::kFewDistinct, Shape::kSorted, Shape::kConstant,
                                Shape::kAllNan}) {
        if (n > (1u << 20) && shape != Shape::kSpread && shape != Shape::kFewDistinct) continue;
        Compare(dtype, n, shape, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The router starts the device pass for device bytes, beside the fused
// kernels' ops, and the whole plan answers in order.
TEST_F(KeptOnDeviceTest, TheRouterMixesTheDevicePassWithFusedOps) {
  std::mt19937_64 rng(Seed());
  const std::uint64_t n = (1u << 20) + 5;
  const std::vector<std::byte> bytes = MakeArray(DType::kFloat32, n, Shape::kSpread, rng);
  DeviceCopy on_gpu(bytes);
  const AggregationPlan plan =
      Plan(DType::kFloat32, n, 0,
           {Op(OpKind::kNanSum), {.kind = OpKind::kNanMedian}, Op(OpKind::kMax), {.kind = OpKind::kTopK, .k = 10},
            {.kind = OpKind::kHll, .precision = 14}, {.kind = OpKind::kNanQuantile, .q = {0.1, 0.5, 0.9}}});
  const Extent whole = on_gpu.extent();
  absl::StatusOr<AggregationResult> device = RunPlan(*device_, plan, {&whole, 1});
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(device->backend, "cuda");
  const Extent host_bytes = Extent::PageableHost(bytes);
  absl::StatusOr<AggregationResult> host = RunPlan(*host_, plan, {&host_bytes, 1});
  ASSERT_TRUE(host.ok()) << host.status();
  for (const std::size_t i : {1u, 3u, 4u, 5u}) ExpectSame(device->values[i], host->values[i], plan.ops[i], plan.NameOf(i));
}

// An array handed over in several pieces is joined on the device first.
TEST_F(KeptOnDeviceTest, PiecesGiveTheSameAnswers) {
  std::mt19937_64 rng(Seed());
  const std::uint64_t n = 300001;
  const std::vector<std::byte> bytes = MakeArray(DType::kInt64, n, Shape::kSpread, rng);
  DeviceCopy on_gpu(bytes);
  const AggregationPlan plan = Plan(DType::kInt64, n, 0,
                                    {{.kind = OpKind::kMedian}, {.kind = OpKind::kBottomK, .k = 100},
                                     {.kind = OpKind::kHll, .precision = 10}});
  const Extent pieces[] = {on_gpu.extent(0, 8 * 1000), on_gpu.extent(8 * 1000, 8 * 123457),
                           on_gpu.extent(8 * 124457)};
  absl::StatusOr<AggregationResult> device = RunPlan(*device_, plan, pieces, /*kept_on_device=*/true);
  ASSERT_TRUE(device.ok()) << device.status();
  const Extent host_bytes = Extent::PageableHost(bytes);
  absl::StatusOr<AggregationResult> host = RunPlan(*host_, plan, {&host_bytes, 1});
  ASSERT_TRUE(host.ok()) << host.status();
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    ExpectSame(device->values[i], host->values[i], plan.ops[i], plan.NameOf(i));
  }
}

// What the device passes do not cover answers UNIMPLEMENTED, and the router
// then answers on the host from the same device bytes.
TEST_F(KeptOnDeviceTest, WhatThePassesDoNotCoverRunsOnTheHost) {
  std::mt19937_64 rng(Seed());
  const std::uint64_t n = 5000;
  struct Case {
    const char* what;
    AggregationPlan plan;
  };
  const std::vector<std::byte> f32 = MakeArray(DType::kFloat32, n, Shape::kSpread, rng);
  const std::vector<std::byte> f16(n * 2, std::byte{0x3c});  // float16 1.0
  std::vector<Case> cases = {
      {"mode", Plan(DType::kFloat32, n, 0, {{.kind = OpKind::kMode}})},
      {"count_distinct", Plan(DType::kFloat32, n, 0, {{.kind = OpKind::kCountDistinct}})},
      {"top-k per row", Plan(DType::kFloat32, n, 1000, {{.kind = OpKind::kTopK, .k = 3}})},
      {"a median per row beside hll", Plan(DType::kFloat32, n, 1000, {{.kind = OpKind::kMedian},
                                                                          {.kind = OpKind::kHll, .precision = 8}})},
      {"partial", Plan(DType::kFloat32, n, 0, {{.kind = OpKind::kMedian, .partial = true}})},
      {"float16", Plan(DType::kFloat16, n, 0, {{.kind = OpKind::kMedian}})},
  };
  for (const Case& c : cases) {
    const std::vector<std::byte>& bytes = c.plan.array.dtype == DType::kFloat16 ? f16 : f32;
    DeviceCopy on_gpu(bytes);
    absl::StatusOr<std::unique_ptr<Reduction>> r = device_->StartKeptOnDevice(c.plan, Placement::Device(0));
    EXPECT_TRUE(absl::IsUnimplemented(r.status())) << c.what << ": " << r.status();
    const Extent whole = on_gpu.extent();
    absl::StatusOr<AggregationResult> routed = RunPlan(*device_, c.plan, {&whole, 1});
    ASSERT_TRUE(routed.ok()) << c.what << ": " << routed.status();
    const Extent host_bytes = Extent::PageableHost(bytes);
    absl::StatusOr<AggregationResult> host = RunPlan(*host_, c.plan, {&host_bytes, 1});
    ASSERT_TRUE(host.ok()) << c.what << ": " << host.status();
    ASSERT_EQ(routed->values.size(), host->values.size());
    for (std::size_t i = 0; i < c.plan.ops.size(); ++i) {
      if (c.plan.ops[i].partial) continue;  // partial states: the bytes are the host state's either way
      ExpectSame(routed->values[i], host->values[i], c.plan.ops[i], c.what);
    }
  }
}

// Quantile ops per row and per segment: every segment sorted on the device
// (kernels::SortedSegments), each answered as the host's states answer it.
TEST_F(KeptOnDeviceTest, QuantilesPerRowAndSegmentMatchTheHostSteps) {
  std::mt19937_64 rng(Seed());
  const std::uint64_t n = Small() ? 100003 : 3000017;
  std::vector<OpSpec> ops = {{.kind = OpKind::kMedian}, {.kind = OpKind::kNanMedian}};
  OpSpec q{.q = {0.0, 0.01, 0.25, 0.5, 0.9, 0.999, 1.0}};
  for (int m = 0; m < rules::kNumQuantileMethods; ++m) {
    q.method = static_cast<rules::QuantileMethod>(m);
    q.kind = m % 2 == 0 ? OpKind::kQuantile : OpKind::kNanQuantile;
    ops.push_back(q);
  }
  // Segments of 1 to about 2,000 elements and a few long ones, and rows of
  // 1,000 (the last row short of none: n is cut to whole rows).
  std::vector<std::uint64_t> offsets = {0};
  while (offsets.back() < n) {
    const std::uint64_t len = rng() % 50 == 0 ? 1 + rng() % 200000 : 1 + rng() % 2000;
    offsets.push_back(std::min(n, offsets.back() + len));
  }
  for (const DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt32,
                            DType::kUInt64}) {
    for (const Shape shape : {Shape::kSpread, Shape::kFewDistinct, Shape::kAllNan}) {
      const std::vector<std::byte> bytes = MakeArray(dtype, n, shape, rng);
      DeviceCopy on_gpu(bytes);
      AggregationPlan segments = Plan(dtype, n, 0, ops);
      segments.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(offsets);
      const std::uint64_t whole_rows = n / 1000 * 1000;
      AggregationPlan rows = Plan(dtype, whole_rows, 1000, ops);
      for (const AggregationPlan* plan : {&segments, &rows}) {
        const std::string what = std::string(rules::Name(dtype)) + " shape " + std::to_string(static_cast<int>(shape)) +
                                 (plan == &rows ? ", rows" : ", segments");
        const Extent whole = on_gpu.extent(0, plan->array.bytes());
        absl::StatusOr<AggregationResult> device = RunPlan(*device_, *plan, {&whole, 1}, /*kept_on_device=*/true);
        ASSERT_TRUE(device.ok()) << what << ": " << device.status();
        EXPECT_EQ(device->backend, "cuda") << what;
        const Extent host_bytes = Extent::PageableHost(std::span(bytes).first(plan->array.bytes()));
        absl::StatusOr<AggregationResult> host = RunPlan(*host_, *plan, {&host_bytes, 1});
        ASSERT_TRUE(host.ok()) << what << ": " << host.status();
        for (std::size_t i = 0; i < plan->ops.size(); ++i) {
          ExpectSame(device->values[i], host->values[i], plan->ops[i], what + " " + plan->NameOf(i));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  // An empty segment's median is NaN (numpy's median of an empty array,
  // with a warning), on the device as on the host.
  AggregationPlan empty = Plan(DType::kFloat64, 10, 0, {{.kind = OpKind::kMedian}});
  empty.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0, 4, 4, 10});
  const std::vector<std::byte> bytes = MakeArray(DType::kFloat64, 10, Shape::kSpread, rng);
  DeviceCopy on_gpu(bytes);
  const Extent whole = on_gpu.extent();
  absl::StatusOr<AggregationResult> device = RunPlan(*device_, empty, {&whole, 1}, /*kept_on_device=*/true);
  ASSERT_TRUE(device.ok()) << device.status();
  const Extent host_bytes = Extent::PageableHost(bytes);
  absl::StatusOr<AggregationResult> host = RunPlan(*host_, empty, {&host_bytes, 1});
  ASSERT_TRUE(host.ok()) << host.status();
  ExpectSame(device->values[0], host->values[0], empty.ops[0], "an empty segment");
  const auto& rows = std::get<std::vector<RowAnswer>>(device->values[0]);
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_EQ(rows[1].doubles.size(), 1u);
  EXPECT_TRUE(std::isnan(rows[1].doubles[0]));
}

}  // namespace
}  // namespace tally::engine_test
