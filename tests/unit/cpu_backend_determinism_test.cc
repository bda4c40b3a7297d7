// Bitwise determinism: the same request gives the same bits however
// Consume() pieces the array (whole, one element at a time, uneven, primes)
// and whatever the thread count, and when many requests share one backend.
#include <cstdint>
#include <span>
#include <utility>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/host_runs.h"
#include "tests/unit/cpu_test_util.h"

namespace tally::testing {
namespace {

void ExpectSameBits(const AggregationResult& want, const AggregationResult& got,
                    const ::testing::Message& what) {
  ASSERT_EQ(want.values.size(), got.values.size());
  for (std::size_t k = 0; k < want.values.size(); ++k) {
    EXPECT_TRUE(SameBits(want.values[k], got.values[k])) << what << ", op " << k;
  }
}

TEST(CpuDeterminism, PiecesAndThreadCountsDoNotChangeABit) {
  TALLY_SEEDED_RNG(rng);
  std::vector<std::unique_ptr<Backend>> backends;
  for (int t : {1, 2, 3, 8}) backends.push_back(MakeCpuBackend({.threads = t}));
  std::uniform_int_distribution<std::uint64_t> uneven(1, 150000);
  std::vector<std::uint64_t> random_pieces;
  for (int i = 0; i < 64; ++i) random_pieces.push_back(uneven(rng));
  const std::vector<std::vector<std::uint64_t>> piecings = {
      {}, {1}, random_pieces, {2039, 65521, 7}, {1000002, 1}, {65536}, {3, 1, 4, 1, 5, 9, 2, 6}};
  struct Case {
    DType dtype;
    std::uint64_t n, row_length;
  };
  const Case cases[] = {{DType::kFloat32, 1000003, 0},    {DType::kFloat64, 1000003, 0},
                        {DType::kInt64, 1000003, 0},      {DType::kFloat32, 1000000, 1000},
                        {DType::kFloat64, 1000000, 200000}, {DType::kUInt8, 999999, 33}};
  for (const Case& c : cases) {
    const Array a = RandomArray(c.dtype, c.n, rng, Fill::kWide);
    const auto ops = AllOps(c.dtype, Fill::kWide);
    auto want = RunPieces(*backends[0], Plan(a, c.row_length, ops), a.bytes);
    ASSERT_TRUE(want.ok()) << want.status();
    for (std::size_t b = 0; b < backends.size(); ++b) {
      for (std::size_t p = 0; p < piecings.size(); ++p) {
        // One-element pieces are slow-ish; once per case is enough.
        if (piecings[p] == std::vector<std::uint64_t>{1} && b != 1) continue;
        auto got = RunPieces(*backends[b], Plan(a, c.row_length, ops), a.bytes, piecings[p]);
        ASSERT_TRUE(got.ok()) << got.status();
        ExpectSameBits(*want, *got,
                       ::testing::Message() << rules::Name(c.dtype) << " n=" << c.n << " rows of "
                                            << c.row_length << " backend " << b << " piecing " << p);
      }
    }
    // And right, not only repeatable.
    ExpectMatchesReference(a, c.row_length, ops, *want);
  }
}

// Runs `plan` over `bytes`: the first `lead` elements through Consume(),
// the rest cut into runs of the given byte sizes (repeating the list; cuts
// fall inside elements), handed to ConsumeRuns() in `calls` groups of whole
// elements.
absl::StatusOr<AggregationResult> RunRuns(Backend& backend, const AggregationPlan& plan,
                                          std::span<const std::byte> bytes, std::uint64_t lead,
                                          const std::vector<std::uint64_t>& run_bytes, int calls) {
  auto reduction = backend.Start(plan);
  if (!reduction.ok()) return reduction.status();
  const std::size_t size = rules::SizeOf(plan.array.dtype);
  if (lead > 0) {
    if (absl::Status s = (*reduction)->Consume(bytes.first(lead * size)); !s.ok()) return s;
  }
  const std::uint64_t elements = bytes.size() / size - lead;
  std::size_t off = lead * size, k = 0;
  for (int c = 0; c < calls; ++c) {
    const std::size_t end = (lead + elements * static_cast<std::uint64_t>(c + 1) / calls) * size;
    std::vector<Extent> runs;
    while (off < end) {
      const std::size_t len = std::min<std::size_t>(end - off, run_bytes[k++ % run_bytes.size()]);
      runs.push_back(Extent::PageableHost(bytes.subspan(off, len)));
      off += len;
    }
    if (absl::Status s = (*reduction)->ConsumeRuns(HostRuns(runs)); !s.ok()) return s;
  }
  return (*reduction)->Finish();
}

TEST(CpuDeterminism, RunsGiveTheBitsOfPieces) {
  TALLY_SEEDED_RNG(rng);
  std::vector<std::unique_ptr<Backend>> backends;
  for (int t : {1, 3, 8}) backends.push_back(MakeCpuBackend({.threads = t}));
  std::uniform_int_distribution<std::uint64_t> uneven(1, 70000);
  std::vector<std::uint64_t> random_runs;
  for (int i = 0; i < 64; ++i) random_runs.push_back(uneven(rng));
  // gRPC's receive slices (8 and 64 KiB, the first shorter by the message's
  // header), odd sizes that cut elements, and runs longer than a chunk.
  const std::vector<std::vector<std::uint64_t>> cuts = {
      {7833, 8192}, {65076, 65536}, random_runs, {3, 5, 7}, {1 << 20, 13}};
  struct Case {
    DType dtype;
    std::uint64_t n, row_length;
  };
  const Case cases[] = {{DType::kFloat32, 1000003, 0},   {DType::kFloat64, 700001, 0},
                        {DType::kInt64, 600000, 0},      {DType::kFloat32, 1000000, 1000},
                        {DType::kFloat64, 800000, 200000}, {DType::kUInt8, 999999, 33},
                        {DType::kFloat32, 5000, 0}};
  for (const Case& c : cases) {
    const Array a = RandomArray(c.dtype, c.n, rng, Fill::kWide);
    const auto ops = AllOps(c.dtype, Fill::kWide);
    auto want = RunPieces(*backends[0], Plan(a, c.row_length, ops), a.bytes);
    ASSERT_TRUE(want.ok()) << want.status();
    std::uniform_int_distribution<std::uint64_t> lead_of(1, c.n / 3);
    for (std::size_t b = 0; b < backends.size(); ++b) {
      for (std::size_t k = 0; k < cuts.size(); ++k) {
        if (cuts[k] == std::vector<std::uint64_t>{3, 5, 7} && b != 1) continue;  // slow-ish; once per case
        for (const auto& [lead, calls] : {std::pair<std::uint64_t, int>{0, 1}, {lead_of(rng), 1}, {0, 5}}) {
          auto got = RunRuns(*backends[b], Plan(a, c.row_length, ops), a.bytes, lead, cuts[k], calls);
          ASSERT_TRUE(got.ok()) << got.status();
          ExpectSameBits(*want, *got,
                         ::testing::Message() << rules::Name(c.dtype) << " n=" << c.n << " rows of " << c.row_length
                                              << " backend " << b << " cuts " << k << " lead " << lead
                                              << " calls " << calls);
        }
      }
    }
  }
}

TEST(CpuDeterminism, RunsThatAreNotWholeElementsAreRefused) {
  auto backend = MakeCpuBackend({.threads = 2});
  std::vector<float> x(100000, 1.0f);
  const auto* bytes = reinterpret_cast<const std::byte*>(x.data());
  AggregationPlan plan{ArraySpec{DType::kFloat32, x.size(), 0}, {Op(OpKind::kSum)}};
  auto r = backend->Start(plan);
  ASSERT_TRUE(r.ok());
  const Extent runs[] = {Extent::PageableHost({bytes, 6}), Extent::PageableHost({bytes + 6, 300000})};
  const absl::Status s = (*r)->ConsumeRuns(HostRuns(runs));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a whole number"), std::string::npos) << s;
  auto r2 = backend->Start(plan);
  ASSERT_TRUE(r2.ok());
  const Extent too_many[] = {Extent::PageableHost({bytes, x.size() * 4}), Extent::PageableHost({bytes, 4})};
  const absl::Status s2 = (*r2)->ConsumeRuns(HostRuns(too_many));
  EXPECT_EQ(s2.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s2.message().find("more than the 100000 elements"), std::string::npos) << s2;
}

TEST(CpuDeterminism, ConcurrentRequestsOnOneBackend) {
  TALLY_SEEDED_RNG(rng);
  auto shared = MakeCpuBackend({.threads = 2});
  auto alone = MakeCpuBackend({.threads = 1});
  constexpr int kClients = 4, kRequests = 4;
  std::vector<Array> arrays;
  for (int i = 0; i < kClients * kRequests; ++i) {
    arrays.push_back(RandomArray(rules::kAllDTypes[i % 6], 150000 + 1000 * i, rng, Fill::kWide));
  }
  std::vector<absl::StatusOr<AggregationResult>> got(arrays.size());
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      for (int i = t; i < kClients * kRequests; i += kClients) {
        const Array& a = arrays[i];
        got[i] = RunPieces(*shared, Plan(a, i % 3 == 0 ? 1000 : 0, AllOps(a.dtype, Fill::kWide)),
                           a.bytes, {4096 + static_cast<std::uint64_t>(i)});
      }
    });
  }
  for (std::thread& c : clients) c.join();
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const Array& a = arrays[i];
    auto want =
        RunPieces(*alone, Plan(a, i % 3 == 0 ? 1000 : 0, AllOps(a.dtype, Fill::kWide)), a.bytes);
    ASSERT_TRUE(want.ok() && got[i].ok());
    ExpectSameBits(*want, *got[i], ::testing::Message() << "request " << i);
  }
}

}  // namespace
}  // namespace tally::testing
