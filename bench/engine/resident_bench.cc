// tally-resident-bench [GiB, default 1]
// Resident datasets through the engine, in-process (no network):
// 1. the upload of a float32 array into GPU memory (PutDataset's engine
//    side), GB/s;
// 2. one query, sum+max+hist:256 over the whole dataset, against the same
//    fused pass launched straight through the kernel API on the same buffer
//    in the same run (the floor): median times and their ratio;
// 3. 64 threads querying resident datasets of 1 MiB to the given size with
//    mixed ops for 5 s: the aggregate scan rate (resident bytes read per
//    second), failures;
// 4. the cpu backend's resident sum of the same array, GB/s.
// Every result is checked: GPU queries against each other bitwise, against
// the cpu backend exactly for max and the histogram, and to 1e-9 for the sum.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "bench/engine/run_query.h"
#include "server/engine/backend_factory.h"
#include "server/engine/cpu/cpu_backend.h"
#include "tally/kernels/aggregate.h"

namespace {

using Clock = std::chrono::steady_clock;
using tally::AggregationPlan;
using tally::AggregationResult;
using tally::rules::DType;
using tally::rules::OpKind;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tally-resident-bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorName(e));
}

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

AggregationPlan SumMaxHist(std::uint64_t n) {
  return {.array = {.dtype = DType::kFloat32, .length = n},
          .ops = {{.kind = OpKind::kSum}, {.kind = OpKind::kMax},
                  {.kind = OpKind::kHistogram, .histogram = {256, -1.0, 1.0}}}};
}

AggregationResult Query(tally::Backend& b, const AggregationPlan& plan, const tally::Extent& e) {
  absl::StatusOr<AggregationResult> res = tally::bench::RunQuery(b, plan, e);
  if (!res.ok()) Die("query: " + res.status().ToString());
  return std::move(*res);
}

std::unique_ptr<tally::ResidentMemory> Upload(tally::Backend& b, const std::vector<float>& x, double* gbs) {
  const auto bytes = std::as_bytes(std::span(x));
  const auto t0 = Clock::now();
  auto m = b.AllocateResident(bytes.size(), 0);
  if (!m.ok()) Die("allocate: " + m.status().ToString());
  constexpr std::size_t kPiece = 4 << 20;  // as the client's stream chunks arrive
  for (std::size_t at = 0; at < bytes.size(); at += kPiece) {
    if (auto s = (*m)->Append(tally::Extent::PageableHost(bytes.subspan(at, std::min(kPiece, bytes.size() - at))));
        !s.ok()) {
      Die("append: " + s.ToString());
    }
  }
  if (auto s = (*m)->Seal(); !s.ok()) Die("seal: " + s.ToString());
  *gbs = static_cast<double>(bytes.size()) / Seconds(t0) / 1e9;
  return std::move(*m);
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 1.0;
  const std::uint64_t n = static_cast<std::uint64_t>(gib * (1ull << 30)) / 4;
  tally::BackendOptions o;
  o.kind = "cuda";
  // TALLY_BENCH_EXACT=0: the fused pass's float64 sums (--cuda_exact_sums=false),
  // to set the exact passes beside them in one call.
  if (const char* e = std::getenv("TALLY_BENCH_EXACT")) o.cuda_exact_sums = std::atoi(e) != 0;
  auto made = tally::MakeBackend(o);
  if (!made.ok()) Die(made.status().ToString());
  tally::Backend& cuda = **made;
  auto cpu = tally::MakeCpuBackend({});
  std::printf("%s | %s | %.2f GiB float32 | exact sums %s\n", cuda.device().c_str(), cpu->device().c_str(), gib,
              o.cuda_exact_sums ? "on" : "off");

  std::vector<float> x(n);
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.2f, 1.2f);
  for (float& v : x) v = dist(rng);

  // 1. Upload.
  double upload_gbs = 0;
  auto dev = Upload(cuda, x, &upload_gbs);
  std::printf("upload to GPU memory: %.2f GB/s\n", upload_gbs);

  // 2. One query against the fused pass through the kernel API.
  const AggregationPlan plan = SumMaxHist(n);
  tally::kernels::AggregatePlan kp;
  kp.dtype = DType::kFloat32;
  kp.ops = tally::rules::Bit(OpKind::kSum) | tally::rules::Bit(OpKind::kMax) | tally::rules::Bit(OpKind::kHistogram);
  kp.histogram = {256, -1.0, 1.0};
  kp.length = n;
  std::size_t scratch_bytes = 0;
  Check(tally::kernels::ScratchBytes(kp, n, &scratch_bytes), "ScratchBytes");
  void *state = nullptr, *scratch = nullptr, *result = nullptr;
  Check(cudaMalloc(&state, tally::kernels::LayoutOf(kp).bytes), "cudaMalloc");
  Check(cudaMalloc(&scratch, std::max<std::size_t>(scratch_bytes, 1)), "cudaMalloc");
  Check(cudaMallocHost(&result, tally::kernels::LayoutOf(kp).bytes), "cudaMallocHost");
  cudaStream_t s;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e0, e1;
  Check(cudaEventCreate(&e0), "cudaEventCreate");
  Check(cudaEventCreate(&e1), "cudaEventCreate");
  const tally::Extent whole = dev->extent();
  std::vector<double> kernel_ms, query_ms;
  AggregationResult first = Query(cuda, plan, whole);
  for (int rep = 0; rep < 60; ++rep) {
    Check(cudaEventRecord(e0, s), "cudaEventRecord");
    Check(tally::kernels::Aggregate(kp, whole.bytes.data(), state, scratch, scratch_bytes, result, s), "Aggregate");
    Check(cudaEventRecord(e1, s), "cudaEventRecord");
    Check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    kernel_ms.push_back(ms);
    const auto t0 = Clock::now();
    AggregationResult r = Query(cuda, plan, whole);
    query_ms.push_back(Seconds(t0) * 1e3);
    if (r.values != first.values) Die("two queries on the same dataset differ");
  }
  const double k = Median(kernel_ms), q = Median(query_ms);
  std::printf("sum+max+hist:256 over %.2f GiB: kernel pass %.3f ms (%.0f GB/s), resident query %.3f ms "
              "(%.0f GB/s): %.3fx the kernel pass\n",
              gib, k, static_cast<double>(n) * 4 / k / 1e6, q, static_cast<double>(n) * 4 / q / 1e6, q / k);

  // Checked against the cpu backend on the same bytes.
  auto host = cpu->AllocateResident(n * 4, 0);
  if (!host.ok()) Die(host.status().ToString());
  if (auto st = (*host)->Append(tally::Extent::PageableHost(std::as_bytes(std::span(x)))); !st.ok()) Die(st.ToString());
  if (auto st = (*host)->Seal(); !st.ok()) Die(st.ToString());
  AggregationResult ref = Query(*cpu, plan, (*host)->extent());
  const double gs = std::get<0>(first.values[0])[0], rs = std::get<0>(ref.values[0])[0];
  const bool same = std::fabs(gs - rs) <= 1e-9 * std::max(1.0, std::fabs(rs)) && first.values[1] == ref.values[1] &&
                    first.values[2] == ref.values[2];
  std::printf("against the cpu backend: sum %.17g vs %.17g, max and histogram %s\n", gs, rs,
              same ? "equal" : "DIFFERENT");
  if (!same) Die("the GPU and CPU answers differ");

  // 3. 64 threads over datasets of 1 MiB .. the full size, mixed ops.
  std::vector<std::unique_ptr<tally::ResidentMemory>> sets;
  std::vector<std::uint64_t> lengths;
  for (std::uint64_t len = (1 << 20) / 4; len < n; len *= 4) {
    double ignored = 0;
    sets.push_back(Upload(cuda, std::vector<float>(x.begin(), x.begin() + static_cast<long>(len)), &ignored));
    lengths.push_back(len);
  }
  lengths.push_back(n);
  std::vector<std::vector<tally::OpSpec>> mixes = {
      {{.kind = OpKind::kSum}},
      {{.kind = OpKind::kMin}, {.kind = OpKind::kMax}, {.kind = OpKind::kArgmax}},
      {{.kind = OpKind::kMean}, {.kind = OpKind::kStddev, .ddof = 1}},
      plan.ops};
  // TALLY_BENCH_MIX=0,2: only those of the mixes above, to see what each costs.
  if (const char* only = std::getenv("TALLY_BENCH_MIX")) {
    std::vector<std::vector<tally::OpSpec>> kept;
    for (const char* c = only; *c != '\0'; ++c) {
      if (*c >= '0' && *c < '0' + static_cast<int>(mixes.size())) kept.push_back(mixes[*c - '0']);
    }
    if (kept.empty()) Die("TALLY_BENCH_MIX names none of the mixes 0-3");
    mixes = std::move(kept);
    std::printf("mixes: %s\n", only);
  }
  std::atomic<std::uint64_t> bytes_read{0}, queries{0}, failures{0};
  const auto t0 = Clock::now();
  const auto stop = t0 + std::chrono::seconds(5);
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 pick(static_cast<unsigned>(t));
      while (Clock::now() < stop) {
        const std::size_t d = pick() % lengths.size();
        const tally::Extent e = d < sets.size() ? sets[d]->extent() : whole;
        AggregationPlan p{.array = {.dtype = DType::kFloat32, .length = lengths[d]}, .ops = mixes[pick() % mixes.size()]};
        auto r = cuda.Start(p, e.placement);
        if (!r.ok() || !(*r)->Consume(e).ok() || !(*r)->Finish().ok()) {
          ++failures;
          continue;
        }
        bytes_read += lengths[d] * 4;
        ++queries;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double secs = Seconds(t0);
  std::printf("64 threads, datasets 1 MiB..%.2f GiB, mixed ops: %llu queries in %.2f s, %.0f GB/s of resident "
              "bytes, %llu failed\n",
              gib, static_cast<unsigned long long>(queries.load()), secs, static_cast<double>(bytes_read) / secs / 1e9,
              static_cast<unsigned long long>(failures.load()));

  // 4. The cpu backend's resident sum.
  const AggregationPlan sum{.array = {.dtype = DType::kFloat32, .length = n}, .ops = {{.kind = OpKind::kSum}}};
  std::vector<double> cpu_s;
  for (int rep = 0; rep < 9; ++rep) {
    const auto c0 = Clock::now();
    (void)Query(*cpu, sum, (*host)->extent());
    cpu_s.push_back(Seconds(c0));
  }
  std::printf("cpu backend resident sum: %.1f ms, %.2f GB/s\n", Median(cpu_s) * 1e3,
              static_cast<double>(n) * 4 / Median(cpu_s) / 1e9);
  return failures.load() == 0 ? 0 : 1;
}
