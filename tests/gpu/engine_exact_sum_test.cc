// Exact float sums and moments on the GPU (kernels/src/exact,
// ResultView::ExactState): a float whole array's sum, nansum, mean,
// nanmean, sum_squares, var, std, nanvar and nanstd on the cuda backend
// are the cpu backend's bits, with or without a validity mask, streamed in
// any chunks or read where they lie on the GPU, and their partial states
// carry the same exact bytes; so are every integer dtype's mean,
// sum_squares, var and std (rules/exact_integers.h), whole or per row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "server/engine/reduce_pieces.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/exact_sum.h"
#include "tally/rules/half.h"
#include "tests/gpu/engine_test_util.h"

namespace tally::engine_test {
namespace {

// Near-cancelling pairs over a wide spread of binades (`narrow`: within a
// few) and plain normal values; with `specials` a NaN, a -0.0 and (float64)
// an element whose square overflows.
template <typename T>
std::vector<std::byte> IllConditioned(std::uint64_t n, std::mt19937_64& rng, bool specials, bool narrow = false) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> v;
  v.reserve(n);
  const int spread = narrow ? 4 : sizeof(T) == 8 ? 600 : sizeof(T) == 4 ? 100 : 16;
  while (v.size() + 3 <= n) {
    const T big = static_cast<T>(std::ldexp(normal(rng), static_cast<int>(rng() % spread) - spread / 2));
    v.push_back(big);
    v.push_back(-big);
    v.push_back(static_cast<T>(normal(rng)));
  }
  while (v.size() < n) v.push_back(static_cast<T>(normal(rng)));
  std::shuffle(v.begin(), v.end(), rng);
  if (specials && n > 100) {
    v[rng() % n] = static_cast<T>(std::numeric_limits<double>::quiet_NaN());
    v[rng() % n] = static_cast<T>(-0.0);
    if constexpr (sizeof(T) == 8) v[rng() % n] = T{0x1p600};
  }
  std::vector<std::byte> out(n * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Runs of narrow groups at their limits (kernels/src/exact/exact_levels.cuh,
// NarrowRun): each element's binade drawn from the `window` + 1 below a
// top that moves every 65,536 elements (so a thread's groups end runs and
// start new ones), a quarter of them with every significand bit set, of
// either sign; the tops reach the ends of the grids' ranges, float32's
// subnormals and float64's squares past 2^1024.
template <typename T>
std::vector<std::byte> AtTheWindowsEdges(std::uint64_t n, std::mt19937_64& rng, int window) {
  constexpr bool kDouble = sizeof(T) == 8;
  const std::vector<int> tops = kDouble ? std::vector<int>{0, 200, -300, 505, -468, 1000, -1000}
                                        : std::vector<int>{0, 100, -100, 126, -120};
  const double largest = kDouble ? 2.0 - 0x1p-52 : 2.0 - 0x1p-23;
  std::vector<T> v(n);
  int top = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (i % 65536 == 0) top = tops[rng() % tops.size()];
    const int k = top - static_cast<int>(rng() % static_cast<std::uint64_t>(window + 1));
    const double m = rng() % 4 == 0 ? largest : 1.0 + static_cast<double>(rng() >> 11) * 0x1p-53;
    v[i] = static_cast<T>(std::ldexp((rng() & 1) != 0 ? -m : m, k));
  }
  std::vector<std::byte> out(n * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<std::byte> DataOf(DType dt, std::uint64_t n, std::mt19937_64& rng, bool specials, bool narrow = false) {
  switch (dt) {
    case DType::kFloat64: return IllConditioned<double>(n, rng, specials, narrow);
    case DType::kFloat16: return IllConditioned<rules::Float16>(n, rng, specials, narrow);
    case DType::kBFloat16: return IllConditioned<rules::BFloat16>(n, rng, specials, narrow);
    default: return IllConditioned<float>(n, rng, specials, narrow);
  }
}

// About three elements in four valid, bits past n cleared.
Validity RandomMask(std::uint64_t n, std::mt19937_64& rng) {
  auto words = std::make_shared<std::vector<std::uint32_t>>((n + 31) / 32);
  for (std::uint64_t i = 0; i < n; ++i) {
    if (rng() % 4 != 0) (*words)[i / 32] |= 1u << (i % 32);
  }
  return words;
}

std::vector<OpSpec> ExactOps(bool with_max) {
  std::vector<OpSpec> ops = {{.kind = OpKind::kSum},         {.kind = OpKind::kNanSum},
                             {.kind = OpKind::kMean},        {.kind = OpKind::kNanMean},
                             {.kind = OpKind::kSumSquares},  {.kind = OpKind::kVariance},
                             {.kind = OpKind::kStddev, .ddof = 1.0}, {.kind = OpKind::kNanVariance},
                             {.kind = OpKind::kNanStddev, .ddof = 1.0}};
  // These keep a fused pass beside the exact one.
  if (with_max) {
    for (const OpKind k : {OpKind::kNanMax, OpKind::kCount, OpKind::kNanCount, OpKind::kArgmax}) ops.push_back({.kind = k});
  }
  return ops;
}

// `data` uploaded to the GPU and reduced where it lies (a resident
// dataset's bytes: one launch over the whole array).
absl::StatusOr<AggregationResult> RunResident(Backend& cuda, const AggregationPlan& plan,
                                              std::span<const std::byte> data) {
  absl::StatusOr<std::unique_ptr<ResidentMemory>> m = cuda.AllocateResident(data.size(), 0);
  if (!m.ok()) return m.status();
  if (absl::Status s = (*m)->Append(Extent::PageableHost(data)); !s.ok()) return s;
  if (absl::Status s = (*m)->Seal(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Reduction>> r = cuda.Start(plan, (*m)->extent().placement);
  if (!r.ok()) return r.status();
  if (absl::Status s = (*r)->Consume((*m)->extent()); !s.ok()) return s;
  return (*r)->Finish();
}

// Whether op `k` of dtype `dt` keeps its exact sums in its partial state.
bool KeepsExactSums(OpKind k, DType dt) { return rules::agg::ExactFor(rules::agg::Of(k), dt); }

// `plan` over `data` on the cuda backend, sent in one piece and in each of
// `pieces`, and read where it lies on the GPU (a resident dataset's bytes:
// one launch over the whole array): the cpu backend's bits every time.
void ExpectTheCpuBits(Backend& cuda, Backend& cpu, const AggregationPlan& plan, const std::vector<std::byte>& data,
                      const std::vector<std::vector<std::uint64_t>>& pieces, const std::string& what) {
  absl::StatusOr<AggregationResult> want = RunRequest(cpu, plan, data);
  ASSERT_TRUE(want.ok()) << want.status() << " " << what;
  for (const std::vector<std::uint64_t>& p : pieces) {
    absl::StatusOr<AggregationResult> got = RunRequest(cuda, plan, data, p);
    ASSERT_TRUE(got.ok()) << got.status() << " " << what;
    EXPECT_EQ(got->backend, "cuda") << what;
    ExpectSame(plan, *want, *got, Match::kBits, what + " pieces " + std::to_string(p.size()));
  }
  if (plan.array.length == 0) return;
  absl::StatusOr<AggregationResult> got = RunResident(cuda, plan, data);
  ASSERT_TRUE(got.ok()) << got.status() << " " << what;
  ExpectSame(plan, *want, *got, Match::kBits, what + " resident");
}

// The partial states of `plan`'s ops (a whole array) from both backends:
// the same counts and exact bytes, and the same rounded fields.
void ExpectTheCpuStates(Backend& cuda, Backend& cpu, AggregationPlan plan, const std::vector<std::byte>& data,
                        const std::string& what) {
  for (OpSpec& op : plan.ops) op.partial = true;
  absl::StatusOr<AggregationResult> cpu_states = RunRequest(cpu, plan, data);
  absl::StatusOr<AggregationResult> cuda_states = RunRequest(cuda, plan, data, {4096});
  ASSERT_TRUE(cpu_states.ok() && cuda_states.ok()) << cpu_states.status() << cuda_states.status();
  for (std::size_t k = 0; k < plan.ops.size(); ++k) {
    const auto& c = std::get<std::vector<rules::PartialState>>(cpu_states->values[k]).at(0);
    const auto& g = std::get<std::vector<rules::PartialState>>(cuda_states->values[k]).at(0);
    const std::string op = what + " op " + rules::Name(plan.ops[k].kind);
    EXPECT_EQ(c.count, g.count) << op;
    EXPECT_EQ(c.elements, g.elements) << op;
    if (c.count != 0 && KeepsExactSums(plan.ops[k].kind, plan.array.dtype)) {
      EXPECT_FALSE(g.exact_sum.empty() && g.exact_sum_squares.empty()) << op;
    }
    EXPECT_EQ(c.exact_sum, g.exact_sum) << op;
    EXPECT_EQ(c.exact_sum_squares, g.exact_sum_squares) << op;
    EXPECT_TRUE(SameDouble(c.float_sum, g.float_sum, true) && SameDouble(c.mean, g.mean, true) &&
                SameDouble(c.m2, g.m2, true) && SameDouble(c.sum_squares, g.sum_squares, true))
        << op << ": the states' rounded fields differ";
  }
}

// Integers over the dtype's whole range, a fifth at each end (sums past
// 2^53, int64 squares past 2^127).
template <typename V>
std::vector<std::byte> WideIntegers(std::uint64_t n, std::mt19937_64& rng) {
  std::vector<V> v(n);
  for (V& x : v) {
    const std::uint64_t r = rng();
    x = r % 5 == 0 ? std::numeric_limits<V>::max() : r % 5 == 1 ? std::numeric_limits<V>::min() : static_cast<V>(r);
  }
  std::vector<std::byte> out(n * sizeof(V));
  if (n > 0) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<std::byte> IntegerDataOf(DType dt, std::uint64_t n, std::mt19937_64& rng) {
  switch (dt) {
    case DType::kInt8: return WideIntegers<std::int8_t>(n, rng);
    case DType::kInt16: return WideIntegers<std::int16_t>(n, rng);
    case DType::kInt32: return WideIntegers<std::int32_t>(n, rng);
    case DType::kInt64: return WideIntegers<std::int64_t>(n, rng);
    case DType::kUInt16: return WideIntegers<std::uint16_t>(n, rng);
    case DType::kUInt32: return WideIntegers<std::uint32_t>(n, rng);
    case DType::kUInt64: return WideIntegers<std::uint64_t>(n, rng);
    case DType::kBool: {
      std::vector<std::byte> out(n);
      for (std::byte& b : out) b = std::byte{static_cast<unsigned char>(rng() % 3 == 0)};
      return out;
    }
    default: return WideIntegers<std::uint8_t>(n, rng);
  }
}

// Both backends, the cuda one with its exact pass, and a fresh seed.
class EngineExactSum : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_REQUIRE_GPU();
    BackendOptions o = TestOptions();
    o.cuda_exact_sums = true;
    cuda_ = MakeCuda(o);
    ASSERT_NE(cuda_, nullptr);
    cpu_ = MakeCpu();
  }
  std::unique_ptr<Backend> cuda_, cpu_;
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(EngineExactSum, CudaSumsAndMomentsAreTheCpuBitsStreamedMaskedOrResidentAndTheirStatesTheSameBytes) {
  for (const DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    // Up to arrays whose single launch (resident) runs every loop of the kernel.
    // 2^24 + 5: several groups a thread, so runs go on and end (the runs'
    // variants only, unmasked).
    for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{300007},
                                  std::uint64_t{(3 << 20) + 77}, std::uint64_t{(1 << 24) + 5}}) {
      // 0: wide, 1: wide with specials, 2: narrow (a float32 vector's
      // elements within 2^26 of each other: the kernel's grouped path);
      // float32 and float64: 3 and 4 at the runs' windows' edges, the
      // squares' window (with every op) and the elements' (sums alone).
      const bool runs = dt == DType::kFloat32 || dt == DType::kFloat64;
      for (const int variant : {0, 1, 2, 3, 4}) {
        if (variant >= 3 && !runs) continue;
        const bool specials = variant == 1;
        const bool sums_alone = variant == 4;
        for (const bool masked : {false, true}) {
          if (n > (1 << 22) && (variant < 3 || masked)) continue;
          std::vector<std::byte> data;
          if (variant >= 3) {
            const int window = dt == DType::kFloat32 ? 18 : sums_alone ? 32 : 15;
            data = dt == DType::kFloat32 ? AtTheWindowsEdges<float>(n, rng_, window)
                                         : AtTheWindowsEdges<double>(n, rng_, window);
          } else {
            data = DataOf(dt, n, rng_, specials, variant == 2);
          }
          AggregationPlan plan = Plan(dt, n, 0,
                                      sums_alone ? std::vector<OpSpec>{{.kind = OpKind::kSum}, {.kind = OpKind::kMean}}
                                                 : ExactOps(n >= 1000));
          if (masked) plan.array.validity = RandomMask(n, rng_);
          const std::string what = std::string(rules::Name(dt)) + " n=" + std::to_string(n) +
                                   (specials ? " with NaN, -0.0 and overflow" : "") + (variant == 2 ? " narrow" : "") +
                                   (variant == 3 ? " at the squares' window" : "") +
                                   (sums_alone ? " at the sums' window, sums alone" : "") + (masked ? " masked" : "");
          ExpectTheCpuBits(*cuda_, *cpu_, plan, data, {{}, {777, 10000, 1}, {65536}}, what);
          ExpectTheCpuStates(*cuda_, *cpu_, plan, data, what);
        }
      }
    }
  }
}

// Exact sums beside other ops of an unmasked float32 or float64 array: the
// fused slice kernel takes the exact pass inside it (kernels/src/exact/
// exact_in_fused.cuh), one read for both; each plan below reaches another
// of its variants (kHist, kLean, kSimple, kHistOnly), with sums alone or
// with squares. Streamed pieces shorter than a group and resident arrays
// longer than a run.
TEST_F(EngineExactSum, CudaExactSumsInsideTheFusedPassAreTheCpuBits) {
  const rules::HistogramSpec hist{256, -4.0, 4.0};
  const std::vector<std::vector<OpSpec>> plans = {
      {{.kind = OpKind::kSum}, {.kind = OpKind::kMax}, {.kind = OpKind::kHistogram, .histogram = hist}},
      {{.kind = OpKind::kVariance}, {.kind = OpKind::kMin}, {.kind = OpKind::kMax}, {.kind = OpKind::kArgmax}},
      {{.kind = OpKind::kMean}, {.kind = OpKind::kMin}},
      {{.kind = OpKind::kSum}, {.kind = OpKind::kHistogram, .histogram = hist}},
      {{.kind = OpKind::kSumSquares}, {.kind = OpKind::kArgmin}, {.kind = OpKind::kSum}},
      {{.kind = OpKind::kStddev, .ddof = 1.0}, {.kind = OpKind::kHistogram, .histogram = hist}, {.kind = OpKind::kMin}},
  };
  for (const DType dt : {DType::kFloat32, DType::kFloat64}) {
    for (const std::uint64_t n : {std::uint64_t{1000}, std::uint64_t{300007}, std::uint64_t{(1 << 24) + 5}}) {
      // 0: wide, 1: wide with specials, 2: narrow, 3: at the squares'
      // window (float32's one window), 4: at float64's sums' window.
      for (const int variant : {0, 1, 2, 3, 4}) {
        if (variant == 4 && dt != DType::kFloat64) continue;
        if (n > (1 << 22) && variant < 3) continue;
        std::vector<std::byte> data;
        if (variant >= 3) {
          const int window = dt == DType::kFloat32 ? 18 : variant == 4 ? 32 : 15;
          data = dt == DType::kFloat32 ? AtTheWindowsEdges<float>(n, rng_, window)
                                       : AtTheWindowsEdges<double>(n, rng_, window);
        } else {
          data = DataOf(dt, n, rng_, variant == 1, variant == 2);
        }
        for (std::size_t k = 0; k < plans.size(); ++k) {
          // Past float64's squares' window only the plans of sums alone.
          if (variant == 4 && (k == 1 || k == 4 || k == 5)) continue;
          const AggregationPlan plan = Plan(dt, n, 0, plans[k]);
          const std::string what = std::string(rules::Name(dt)) + " n=" + std::to_string(n) + " data " +
                                   std::to_string(variant) + " plan " + std::to_string(k);
          ExpectTheCpuBits(*cuda_, *cpu_, plan, data, {{777, 10000, 1}}, what);
        }
        ExpectTheCpuStates(*cuda_, *cpu_, Plan(dt, n, 0, plans[2]), data, std::string(rules::Name(dt)) + " states");
      }
    }
  }
}

TEST_F(EngineExactSum, CudaRowsAreEachRowsCpuBitsStreamedMaskedOrResident) {
  struct Shape {
    std::uint64_t n, row_length;
  };
  for (const DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    // Rows shorter than a warp's tile, of several tiles, and two rows longer
    // than a chunk.
    for (const Shape shape : {Shape{3000, 3}, Shape{300000, 1000}, Shape{3 << 20, 3 << 19}}) {
      for (const bool masked : {false, true}) {
        const std::vector<std::byte> data = DataOf(dt, shape.n, rng_, /*specials=*/true);
        // nanmax and argmax refuse a row without valid elements, which short
        // masked rows have.
        AggregationPlan plan = Plan(dt, shape.n, shape.row_length, ExactOps(!masked || shape.row_length >= 1000));
        if (masked) plan.array.validity = RandomMask(shape.n, rng_);
        const std::string what = std::string(rules::Name(dt)) + " rows of " + std::to_string(shape.row_length) +
                                 (masked ? " masked" : "");
        ExpectTheCpuBits(*cuda_, *cpu_, plan, data, {{}, {777, 10000, 1}}, what);
      }
    }
  }
}

TEST_F(EngineExactSum, CudaIntegerMomentsAreTheCpuBitsWholeOrRowsStreamedMaskedOrResident) {
  struct Shape {
    std::uint64_t n, row_length;
  };
  // sum and max keep a fused pass beside the exact one.
  const std::vector<OpSpec> ops = {{.kind = OpKind::kMean},     {.kind = OpKind::kSumSquares},
                                   {.kind = OpKind::kVariance}, {.kind = OpKind::kStddev, .ddof = 1.0},
                                   {.kind = OpKind::kSum},      {.kind = OpKind::kMax}};
  for (const DType dt : {DType::kInt8, DType::kUInt8, DType::kInt16, DType::kUInt16, DType::kInt32, DType::kUInt32,
                         DType::kInt64, DType::kUInt64, DType::kBool}) {
    for (const Shape shape : {Shape{1, 0}, Shape{300007, 0}, Shape{(3 << 20) + 77, 0}, Shape{3000, 3},
                              Shape{300000, 1000}}) {
      for (const bool masked : {false, true}) {
        const std::vector<std::byte> data = IntegerDataOf(dt, shape.n, rng_);
        // max refuses a row without valid elements, which short masked rows may have.
        std::vector<OpSpec> plan_ops = ops;
        if (masked && std::min(shape.n, shape.row_length == 0 ? shape.n : shape.row_length) < 1000) plan_ops.pop_back();
        AggregationPlan plan = Plan(dt, shape.n, shape.row_length, plan_ops);
        if (masked) plan.array.validity = RandomMask(shape.n, rng_);
        const std::string what = std::string(rules::Name(dt)) + " n=" + std::to_string(shape.n) + " rows of " +
                                 std::to_string(shape.row_length) + (masked ? " masked" : "");
        ExpectTheCpuBits(*cuda_, *cpu_, plan, data, {{}, {777, 10000, 1}}, what);
        if (shape.row_length == 0) ExpectTheCpuStates(*cuda_, *cpu_, plan, data, what);
      }
    }
  }
}

}  // namespace
}  // namespace tally::engine_test
