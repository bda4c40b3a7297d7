// Exact float sums on the GPU (kernels/src/exact, ResultView::Exact): a
// float32 or float64 whole array's sum and nansum on the cuda backend are
// the cpu backend's bits, streamed in any chunks or read where they lie on
// the GPU, and their partial states carry the same exact bytes.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "server/engine/reduce_pieces.h"
#include "tally/rules/exact_sum.h"
#include "tests/gpu/engine_test_util.h"

namespace tally::engine_test {
namespace {

template <typename T>
std::vector<std::byte> IllConditioned(std::uint64_t n, std::mt19937_64& rng, bool specials) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> v;
  v.reserve(n);
  const int spread = sizeof(T) == 4 ? 100 : 600;
  while (v.size() + 3 <= n) {
    const T big = static_cast<T>(std::ldexp(normal(rng), static_cast<int>(rng() % spread) - spread / 2));
    v.push_back(big);
    v.push_back(-big);
    v.push_back(static_cast<T>(normal(rng)));
  }
  while (v.size() < n) v.push_back(static_cast<T>(normal(rng)));
  std::shuffle(v.begin(), v.end(), rng);
  if (specials && n > 100) {
    v[rng() % n] = std::numeric_limits<T>::quiet_NaN();
    v[rng() % n] = -0.0f;
  }
  std::vector<std::byte> out(n * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::uint64_t Bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

TEST(EngineExactSum, CudaSumsAreTheCpuBitsStreamedOrResidentAndTheirStatesTheSameBytes) {
  TALLY_REQUIRE_GPU();
  BackendOptions o = TestOptions();
  o.cuda_exact_sums = true;
  auto cuda = MakeCuda(o);
  auto cpu = MakeCpu();
  ASSERT_NE(cuda, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  for (const DType dt : {DType::kFloat32, DType::kFloat64}) {
    for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{300007}}) {
      for (const bool specials : {false, true}) {
        const std::vector<std::byte> data = dt == DType::kFloat32 ? IllConditioned<float>(n, rng, specials)
                                                                  : IllConditioned<double>(n, rng, specials);
        // max (where there is an element) keeps a fused pass beside the exact one.
        std::vector<OpSpec> ops = {{.kind = OpKind::kSum}, {.kind = OpKind::kNanSum}};
        if (n > 0) ops.push_back({.kind = OpKind::kMax});
        const AggregationPlan plan = Plan(dt, n, 0, ops);
        for (OpSpec& op : ops) op.partial = true;
        const AggregationPlan partial = Plan(dt, n, 0, ops);
        const std::string what = std::string(rules::Name(dt)) + " n=" + std::to_string(n) +
                                 (specials ? " with NaN and -0.0" : "");
        absl::StatusOr<AggregationResult> want = RunRequest(*cpu, plan, data);
        ASSERT_TRUE(want.ok()) << want.status();
        for (const std::vector<std::uint64_t>& pieces :
             {std::vector<std::uint64_t>{}, {777, 10000, 1}, {65536}}) {
          absl::StatusOr<AggregationResult> got = RunRequest(*cuda, plan, data, pieces);
          ASSERT_TRUE(got.ok()) << got.status();
          EXPECT_EQ(got->backend, "cuda") << what;
          for (int k = 0; k < 2; ++k) {
            const double w = std::get<std::vector<double>>(want->values[k]).at(0);
            const double g = std::get<std::vector<double>>(got->values[k]).at(0);
            if (std::isnan(w)) {
              EXPECT_TRUE(std::isnan(g)) << what << " op " << k;
            } else {
              EXPECT_EQ(Bits(w), Bits(g)) << what << " op " << k << ": cuda " << g << ", cpu " << w;
            }
          }
        }
        // Read where they lie on the GPU (a resident dataset's bytes).
        if (n > 0) {
          absl::StatusOr<std::unique_ptr<ResidentMemory>> m = cuda->AllocateResident(data.size(), 0);
          ASSERT_TRUE(m.ok()) << m.status();
          ASSERT_TRUE((*m)->Append(Extent::PageableHost(data)).ok());
          ASSERT_TRUE((*m)->Seal().ok());
          absl::StatusOr<std::unique_ptr<Reduction>> r = cuda->Start(plan, (*m)->extent().placement);
          ASSERT_TRUE(r.ok()) << r.status();
          ASSERT_TRUE((*r)->Consume((*m)->extent()).ok());
          absl::StatusOr<AggregationResult> got = (*r)->Finish();
          ASSERT_TRUE(got.ok()) << got.status();
          for (int k = 0; k < 2; ++k) {
            const double w = std::get<std::vector<double>>(want->values[k]).at(0);
            const double g = std::get<std::vector<double>>(got->values[k]).at(0);
            EXPECT_TRUE(std::isnan(w) ? std::isnan(g) : Bits(w) == Bits(g)) << what << " resident, op " << k;
          }
        }
        // Partial states: the same exact bytes from both backends.
        absl::StatusOr<AggregationResult> cpu_states = RunRequest(*cpu, partial, data);
        absl::StatusOr<AggregationResult> cuda_states = RunRequest(*cuda, partial, data, {4096});
        ASSERT_TRUE(cpu_states.ok() && cuda_states.ok()) << cpu_states.status() << cuda_states.status();
        for (int k = 0; k < 2; ++k) {
          const auto& c = std::get<std::vector<rules::PartialState>>(cpu_states->values[k]).at(0);
          const auto& g = std::get<std::vector<rules::PartialState>>(cuda_states->values[k]).at(0);
          EXPECT_EQ(c.count, g.count) << what << " op " << k;
          if (c.count != 0) {
            EXPECT_FALSE(g.exact_sum.empty()) << what;
            EXPECT_EQ(c.exact_sum, g.exact_sum) << what << " op " << k;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tally::engine_test
