// tally-kernel-bench: tally's kernels against CUB (the CCCL shipped with the
// CUDA toolkit) and the memory ceiling, on one GPU in one run. 1 GiB float32
// random input; CUDA events; median of kReps timed runs after warm-up.
// Prints one table (markdown) with the issue's targets.
#include <cub/cub.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tally/kernels/aggregate.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/segmented.h"

namespace {

using tally::kernels::AggregatePlan;
using tally::rules::Bit;
using tally::rules::DType;
using tally::rules::OpKind;

constexpr int kWarmup = 5;
int kReps = 25;  // TALLY_BENCH_REPS overrides (a profiler needs few)
// Timing mode. Queued (the default): a spin kernel keeps the stream busy
// while the host enqueues the start event, the work and the end event, so
// the events bracket device time only, for tally and CUB alike. Direct
// (TALLY_BENCH_DIRECT=1): the host's own launch cost (argument checks,
// occupancy queries, CUB's two launches) falls between the events too.
bool g_queued = true;

#define CHECK(expr)                                                                        \
  do {                                                                                     \
    const cudaError_t e_ = (expr);                                                         \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s %s\n", __FILE__, __LINE__, #expr,                 \
                   cudaGetErrorName(e_), tally::cuda::LastErrorWhere().c_str());           \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void FillUniform(float* x, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 0x9E3779B9u ^ seed ^ static_cast<unsigned>(i >> 32);
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    x[i] = (h >> 8) * (1.0f / 16777216.0f);  // [0, 1)
  }
}
// [0, 1) stretched to [lo, hi).
__global__ void Stretch(float* x, std::size_t n, float lo, float hi) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = lo + x[i] * (hi - lo);
}
// Random validity bits (about half set), 32 elements a word.
__global__ void FillBits(unsigned* w, std::size_t words, unsigned seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 0x9E3779B9u ^ seed;
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    w[i] = h;
  }
}
// normal(0, 1)-like float64 (the sum of four uniforms, centred), so the
// exact pass sees float64 elements with full significands.
__global__ void FillNormal64(double* x, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    double v = 0.0;
    for (unsigned k = 0; k < 4; ++k) {
      unsigned h = static_cast<unsigned>(i) * 0x9E3779B9u ^ (seed + k * 0x632BE5ABu) ^ static_cast<unsigned>(i >> 32);
      h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
      v += h * (1.0 / 4294967296.0);
    }
    x[i] = (v - 2.0) * 1.7320508075688772;
  }
}
__global__ void FillConst(float* x, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}
// The read ceiling: 16-byte loads, four in flight, almost no arithmetic.
__global__ void PlainRead(const float4* x, std::size_t n4, float* sink) {
  float acc = 0.f;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n4; i += 4 * stride) {
    const float4 a = __ldg(x + i), b = __ldg(x + i + stride), c = __ldg(x + i + 2 * stride),
                 d = __ldg(x + i + 3 * stride);
    acc += a.x + b.y + c.z + d.w;
  }
  for (; i < n4; i += stride) acc += __ldg(x + i).x;
  if (acc == -1.f) *sink = acc;
}

// Holds the stream for about `ns` nanoseconds.
__global__ void Spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Median time in ms of f() over `reps` runs (kReps unless given) after
// kWarmup, by CUDA events.
double MedianMs(cudaStream_t s, const std::function<void()>& f, int reps = kReps) {
  for (int i = 0; i < kWarmup; ++i) f();
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> ms(reps);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    if (g_queued) {
      Spin<<<1, 32, 0, s>>>(200000);
      CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(a, s));
    f();
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

struct Tally {
  AggregatePlan plan;
  void* state = nullptr;
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  void* host = nullptr;
  Tally(DType dt, tally::rules::OpMask ops, std::uint64_t n, std::uint64_t row, std::uint32_t bins = 0,
        const std::uint32_t* validity = nullptr, bool exact = false) {
    plan.exact_sums = exact;
    plan.dtype = dt;
    plan.ops = ops;
    plan.length = n;
    plan.row_length = row;
    plan.validity = validity;
    if (bins) plan.histogram = {bins, 0.0, 1.0};
    CHECK(tally::kernels::Validate(plan));
    const auto lay = tally::kernels::LayoutOf(plan);
    CHECK(cudaMalloc(&state, lay.bytes));
    CHECK(tally::kernels::ScratchBytes(plan, n, &scratch_bytes));
    CHECK(cudaMalloc(&scratch, scratch_bytes + 1));
    CHECK(cudaMallocHost(&host, lay.bytes));
  }
  ~Tally() {
    cudaFree(state);
    cudaFree(scratch);
    cudaFreeHost(host);
  }
  void Run(const void* d, cudaStream_t s) {
    CHECK(tally::kernels::Accumulate(plan, d, plan.length, 0, state, scratch, scratch_bytes, s));
  }
};

struct Row {
  std::string name;
  double ours_gbs, ref_gbs;
  std::string ref_name, target;
  bool met;
};

// CSR offsets over n elements from segment lengths drawn with a fixed seed;
// the last segment is cut so that the lengths add up to n. empty_every > 0:
// every empty_every-th segment is empty (the others are drawn as without).
std::vector<std::int64_t> CsrOffsets(std::int64_t n, const std::function<std::int64_t(std::mt19937_64&)>& draw,
                                     int empty_every = 0) {
  std::mt19937_64 rng(20261202);
  std::vector<std::int64_t> off{0};
  std::int64_t total = 0;
  for (std::int64_t k = 1; total < n; ++k) {
    if (empty_every > 0 && k % empty_every == 0) {
      off.push_back(total);
      continue;
    }
    total += std::min(draw(rng), n - total);
    off.push_back(total);
  }
  return off;
}

// Compares AggregateSegments' results (d_result, device) with a host long
// double reference: sums and dsums to 1e-12 of the segment's sum of |x|,
// min and max exactly. Returns the largest relative sum error, or -1 after
// printing the first mismatches.
double CheckSegments(const std::vector<float>& hx, const std::vector<std::int64_t>& off,
                     const tally::kernels::SegmentedPlan& plan, const void* d_result) {
  const tally::kernels::SegmentedLayout lay = tally::kernels::LayoutOf(plan);
  std::vector<unsigned char> res(lay.bytes);
  CHECK(cudaMemcpy(res.data(), d_result, lay.bytes, cudaMemcpyDeviceToHost));
  auto field = [&](std::size_t at, std::size_t seg) {
    double v;
    std::memcpy(&v, res.data() + at + seg * 8, 8);
    return v;
  };
  constexpr std::size_t kAbsent = tally::kernels::SegmentedLayout::kAbsent;
  double worst = 0.0;
  int bad = 0;
  for (std::size_t seg = 0; seg + 1 < off.size(); ++seg) {
    long double sum = 0, abs_sum = 0;
    float mn = INFINITY, mx = -INFINITY;
    for (std::int64_t i = off[seg]; i < off[seg + 1]; ++i) {
      const float v = hx[static_cast<std::size_t>(i)];
      sum += v;
      abs_sum += std::fabs(v);
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    bool ok = true;
    for (const std::size_t at : {lay.sum, lay.dsum}) {
      if (at == kAbsent) continue;
      const double got = field(at, seg);
      const double err = abs_sum > 0 ? static_cast<double>(std::fabs(got - sum) / abs_sum) : std::fabs(got);
      worst = std::max(worst, err);
      ok = ok && err <= 1e-12;
    }
    if (lay.min != kAbsent) ok = ok && field(lay.min, seg) == static_cast<double>(mn);
    if (lay.max != kAbsent) ok = ok && field(lay.max, seg) == static_cast<double>(mx);
    if (!ok && bad++ < 5) {
      std::fprintf(stderr, "segment %zu [%lld, %lld): sum %.17g (want %.17Lg) min %.9g (want %.9g) max %.9g (want %.9g)\n",
                   seg, static_cast<long long>(off[seg]), static_cast<long long>(off[seg + 1]),
                   lay.sum != kAbsent ? field(lay.sum, seg) : 0.0, sum,
                   lay.min != kAbsent ? field(lay.min, seg) : 0.0, mn, lay.max != kAbsent ? field(lay.max, seg) : 0.0, mx);
    }
  }
  return bad > 0 ? -1.0 : worst;
}

}  // namespace

// Usage: tally-kernel-bench [bytes [filter]]. Rows whose name does not
// contain `filter` are skipped ("latency" selects the latency table); a
// filter "=name" keeps only the row named exactly so.
int main(int argc, char** argv) {
  const std::size_t n = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1ull << 30)) / 4;
  const std::string filter = argc > 2 ? argv[2] : "";
  auto wanted = [&](const std::string& name) {
    if (!filter.empty() && filter[0] == '=') return name == filter.substr(1);
    return name.find(filter) != std::string::npos;
  };
  if (const char* r = std::getenv("TALLY_BENCH_REPS")) kReps = std::max(1, std::atoi(r));
  if (const char* d = std::getenv("TALLY_BENCH_DIRECT")) g_queued = std::atoi(d) == 0;
  const double bytes = static_cast<double>(n) * 4;
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int rt = 0, drv = 0;
  CHECK(cudaRuntimeGetVersion(&rt));
  CHECK(cudaDriverGetVersion(&drv));
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf("device: %s (%d SMs), CUDA runtime %d.%d, driver %d.%d, CCCL %d.%d.%d, %s\n", prop.name,
              prop.multiProcessorCount, rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10,
              CCCL_MAJOR_VERSION, CCCL_MINOR_VERSION, CCCL_PATCH_VERSION, date);
  std::printf("input: %zu float32 (%.3f GiB), median of %d runs after %d warm-up, %s\n\n", n,
              bytes / (1ull << 30), kReps, kWarmup,
              g_queued ? "device time (launches queued behind a busy stream)"
                       : "direct (host launch cost included)");

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  float *x, *skew, *wide, *copy_dst, *sink;
  CHECK(cudaMalloc(&x, n * 4));
  CHECK(cudaMalloc(&skew, n * 4));
  CHECK(cudaMalloc(&wide, n * 4));
  CHECK(cudaMalloc(&copy_dst, n * 4));
  CHECK(cudaMalloc(&sink, 64));
  FillUniform<<<1024, 256, 0, s>>>(x, n, 12345u);
  FillConst<<<1024, 256, 0, s>>>(skew, n, 0.3f);
  // One value in six outside the histograms' [0, 1]: real data has outliers.
  FillUniform<<<1024, 256, 0, s>>>(wide, n, 777u);
  Stretch<<<1024, 256, 0, s>>>(wide, n, -0.1f, 1.1f);
  CHECK(cudaStreamSynchronize(s));
  auto gbs = [&](double ms) { return bytes / (ms * 1e-3) / 1e9; };

  // Ceilings.
  const double copy_ms = MedianMs(s, [&] { CHECK(cudaMemcpyAsync(copy_dst, x, n * 4, cudaMemcpyDeviceToDevice, s)); });
  const double read_ms = MedianMs(s, [&] {
    PlainRead<<<prop.multiProcessorCount * 8, 256, 0, s>>>(reinterpret_cast<const float4*>(x), n / 4, sink);
  });
  const double copy_gbs = 2 * bytes / (copy_ms * 1e-3) / 1e9, read_gbs = gbs(read_ms);
  std::printf("ceiling: device-to-device copy %.0f GB/s (read+write), plain read %.0f GB/s\n\n",
              copy_gbs, read_gbs);

  // CUB.
  void* cub_tmp = nullptr;
  std::size_t cub_bytes = 0, t = 0;
  float* f_out;
  cuda::std::int64_t* i_out;
  unsigned* h_out;
  CHECK(cudaMalloc(&f_out, 64));
  CHECK(cudaMalloc(&i_out, 64));
  CHECK(cudaMalloc(&h_out, 65537 * 4));
  CHECK(cub::DeviceReduce::Sum(nullptr, t, x, f_out, n, s)); cub_bytes = std::max(cub_bytes, t);
  CHECK(cub::DeviceReduce::Max(nullptr, t, x, f_out, n, s)); cub_bytes = std::max(cub_bytes, t);
  CHECK(cub::DeviceReduce::ArgMax(nullptr, t, x, f_out, i_out, n, s)); cub_bytes = std::max(cub_bytes, t);
  for (int bins : {256, 4096, 65536}) {
    CHECK(cub::DeviceHistogram::HistogramEven(nullptr, t, x, h_out, bins + 1, 0.f, 1.f, static_cast<long long>(n), s));
    cub_bytes = std::max(cub_bytes, t);
  }
  CHECK(cudaMalloc(&cub_tmp, cub_bytes));
  auto cub_sum = [&] { t = cub_bytes; CHECK(cub::DeviceReduce::Sum(cub_tmp, t, x, f_out, n, s)); };
  auto cub_min = [&] { t = cub_bytes; CHECK(cub::DeviceReduce::Min(cub_tmp, t, x, f_out, n, s)); };
  auto cub_max = [&] { t = cub_bytes; CHECK(cub::DeviceReduce::Max(cub_tmp, t, x, f_out, n, s)); };
  auto cub_argmax = [&] { t = cub_bytes; CHECK(cub::DeviceReduce::ArgMax(cub_tmp, t, x, f_out, i_out, n, s)); };
  auto cub_hist = [&](const float* d, int bins) {
    t = cub_bytes;
    CHECK(cub::DeviceHistogram::HistogramEven(cub_tmp, t, d, h_out, bins + 1, 0.f, 1.f, static_cast<long long>(n), s));
  };

  std::vector<Row> rows;
  auto compare = [&](const std::string& name, tally::rules::OpMask ops, std::uint32_t bins,
                     const float* d, const std::function<void()>& ref, const std::string& ref_name,
                     double min_ratio, double min_gbs) {
    if (!wanted(name)) return;
    Tally tl(DType::kFloat32, ops, n, 0, bins);
    const double ours = gbs(MedianMs(s, [&] { tl.Run(d, s); }));
    const double theirs = ref ? gbs(MedianMs(s, ref)) : 0.0;
    std::string target;
    bool met = true;
    char buf[64];
    if (min_ratio > 0) {
      std::snprintf(buf, sizeof buf, ">= %.2fx %s", min_ratio, ref_name.c_str());
      target = buf;
      met = ours >= min_ratio * theirs;
    }
    if (min_gbs > 0) {
      std::snprintf(buf, sizeof buf, ">= %.0f GB/s", min_gbs);
      target = buf;
      met = ours >= min_gbs;
    }
    rows.push_back({name, ours, theirs, ref_name, target, met});
  };
  const std::function<void()> none;
  compare("sum", Bit(OpKind::kSum), 0, x, cub_sum, "CUB", 1.0, 0);
  compare("min", Bit(OpKind::kMin), 0, x, cub_min, "CUB", 1.0, 0);
  compare("max", Bit(OpKind::kMax), 0, x, cub_max, "CUB", 1.0, 0);
  compare("argmax", Bit(OpKind::kArgmax), 0, x, cub_argmax, "CUB", 1.0, 0);
  compare("argmin", Bit(OpKind::kArgmin), 0, x, none, "-", 0, 0);
  compare("mean+variance", Bit(OpKind::kVariance), 0, x, none, "-", 0, 0);
  compare("histogram 256", Bit(OpKind::kHistogram), 256, x, [&] { cub_hist(x, 256); }, "CUB", 1.0, 0);
  compare("histogram 4096", Bit(OpKind::kHistogram), 4096, x, [&] { cub_hist(x, 4096); }, "CUB", 0, 2500);
  compare("histogram 65536", Bit(OpKind::kHistogram), 65536, x, [&] { cub_hist(x, 65536); }, "CUB", 0, 1000);
  auto ours_of = [&](const std::string& name) {
    for (const Row& r : rows)
      if (r.name == name) return r.ours_gbs;
    return 0.0;
  };
  const double uni256 = ours_of("histogram 256"), uni4k = ours_of("histogram 4096"),
               uni64k = ours_of("histogram 65536");
  compare("histogram 256, 1/6 outside", Bit(OpKind::kHistogram), 256, wide, [&] { cub_hist(wide, 256); }, "CUB", 1.0, 0);
  compare("histogram 4096, 1/6 outside", Bit(OpKind::kHistogram), 4096, wide, [&] { cub_hist(wide, 4096); }, "CUB", 0, 0);
  compare("histogram 65536, 1/6 outside", Bit(OpKind::kHistogram), 65536, wide, [&] { cub_hist(wide, 65536); }, "CUB", 0, 0);
  compare("histogram 256 skewed", Bit(OpKind::kHistogram), 256, skew, [&] { cub_hist(skew, 256); }, "CUB", 0, 0.8 * uni256);
  compare("histogram 4096 skewed", Bit(OpKind::kHistogram), 4096, skew, [&] { cub_hist(skew, 4096); }, "CUB", 0, 0.8 * uni4k);
  compare("histogram 65536 skewed", Bit(OpKind::kHistogram), 65536, skew, [&] { cub_hist(skew, 65536); }, "CUB", 0, 0.8 * uni64k);
  // Fused: five ops in one call vs five CUB calls back to back.
  if (wanted("fused")) {
    const tally::rules::OpMask five = Bit(OpKind::kSum) | Bit(OpKind::kMin) | Bit(OpKind::kMax) |
                                    Bit(OpKind::kArgmax) | Bit(OpKind::kHistogram);
    Tally tl(DType::kFloat32, five, n, 0, 256);
    const double ours_ms = MedianMs(s, [&] { tl.Run(x, s); });
    const double cub_ms = MedianMs(s, [&] { cub_sum(); cub_min(); cub_max(); cub_argmax(); cub_hist(x, 256); });
    rows.push_back({"fused sum+min+max+argmax+hist256 (speedup " + std::to_string(cub_ms / ours_ms).substr(0, 4) + "x)",
                    gbs(ours_ms), gbs(cub_ms), "5 CUB calls", ">= 4x faster", cub_ms / ours_ms >= 4.0});
    Tally all(DType::kFloat32, (1u << tally::rules::kNumKernelOpKinds) - 1, n, 0, 256);
    rows.push_back({"fused all 11 ops (hist 256)", gbs(MedianMs(s, [&] { all.Run(x, s); })), 0, "-", "", true});
  }
  // Validity masks and NaN-skipping ops (float32, the same input, no NaNs in
  // it), against the plain sum timed in the same run. A masked pass reads
  // the mask too: its GB/s count 4 + 1/8 bytes an element, so a pass
  // bound by memory as the plain sum is shows the same GB/s; the floor of
  // its time is 1.03125x the plain sum's.
  {
    const std::string masked_sum = "sum, random validity mask (data + mask bytes)";
    const std::string masked_three = "sum+min+max, random validity mask (data + mask bytes)";
    const std::string nansum = "nansum", nan_three = "nansum+nanmin+nanmax";
    const std::string masked_nan_three = "nansum+nanmin+nanmax, random validity mask (data + mask bytes)";
    if (wanted(masked_sum) || wanted(masked_three) || wanted(nansum) || wanted(nan_three) ||
        wanted(masked_nan_three)) {
      Tally plain(DType::kFloat32, Bit(OpKind::kSum), n, 0);
      const double plain_gbs = gbs(MedianMs(s, [&] { plain.Run(x, s); }));
      rows.push_back({"sum (plain, in this block's run)", plain_gbs, read_gbs, "plain read", "", true});
      const std::size_t words = (n + 31) / 32;
      unsigned* bits;
      CHECK(cudaMalloc(&bits, words * 4));
      FillBits<<<1024, 256, 0, s>>>(bits, words, 4242u);
      CHECK(cudaGetLastError());
      CHECK(cudaStreamSynchronize(s));
      const double with_mask = (static_cast<double>(n) * 4 + static_cast<double>(n) / 8) / bytes;
      auto row = [&](const std::string& name, tally::rules::OpMask ops, bool masked) {
        if (!wanted(name)) return;
        Tally tl(DType::kFloat32, ops, n, 0, 0, masked ? bits : nullptr);
        const double ours = gbs(MedianMs(s, [&] { tl.Run(x, s); })) * (masked ? with_mask : 1.0);
        char label[200];
        std::snprintf(label, sizeof label, "%s: %.3fx the plain sum", name.c_str(), ours / plain_gbs);
        rows.push_back({label, ours, plain_gbs, "plain sum, same run", ">= 0.95x", ours >= 0.95 * plain_gbs});
      };
      row(masked_sum, Bit(OpKind::kSum), true);
      row(nansum, Bit(OpKind::kNanSum), false);
      row(nan_three, Bit(OpKind::kNanSum) | Bit(OpKind::kNanMin) | Bit(OpKind::kNanMax), false);
      row(masked_three, Bit(OpKind::kSum) | Bit(OpKind::kMin) | Bit(OpKind::kMax), true);
      row(masked_nan_three, Bit(OpKind::kNanSum) | Bit(OpKind::kNanMin) | Bit(OpKind::kNanMax), true);
      CHECK(cudaFree(bits));
    }
  }
  // Exact sums and moments (plan.exact_sums: the exact pass, same bits on
  // every path) against the fused pass's float64 sums, both in this run,
  // float32 uniform [0, 1) and float64 normal(0, 1), the same bytes.
  if (wanted("exact")) {
    double* x64;
    CHECK(cudaMalloc(&x64, n * 4));
    FillNormal64<<<1024, 256, 0, s>>>(x64, n / 2, 2468u);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    const tally::rules::OpMask smv = Bit(OpKind::kSum) | Bit(OpKind::kMean) | Bit(OpKind::kVariance);
    const tally::rules::OpMask smmm = Bit(OpKind::kSum) | Bit(OpKind::kMin) | Bit(OpKind::kMax) | Bit(OpKind::kMean);
    // The last four take the exact pass inside the fused kernels (kSimple,
    // kHist, kHistOnly and kLean with squares).
    const tally::rules::OpMask smh = Bit(OpKind::kSum) | Bit(OpKind::kMax) | Bit(OpKind::kHistogram);
    const tally::rules::OpMask vmma =
        Bit(OpKind::kVariance) | Bit(OpKind::kMin) | Bit(OpKind::kMax) | Bit(OpKind::kArgmax);
    struct Case { const char* name; tally::rules::OpMask ops; std::uint32_t bins; };
    for (const Case& c : {Case{"sum", Bit(OpKind::kSum), 0}, Case{"sum+mean+var", smv, 0},
                          Case{"sum+min+max+mean", smmm, 0}, Case{"sum+max+hist:256", smh, 256},
                          Case{"sum+hist:256", Bit(OpKind::kSum) | Bit(OpKind::kHistogram), 256},
                          Case{"var+min+max+argmax", vmma, 0}}) {
      for (const DType dt : {DType::kFloat32, DType::kFloat64}) {
        const std::uint64_t elems = dt == DType::kFloat32 ? n : n / 2;
        const void* d = dt == DType::kFloat32 ? static_cast<const void*>(x) : static_cast<const void*>(x64);
        Tally fused(dt, c.ops, elems, 0, c.bins), exact(dt, c.ops, elems, 0, c.bins, nullptr, true);
        const double f = gbs(MedianMs(s, [&] { fused.Run(d, s); }));
        const double e = gbs(MedianMs(s, [&] { exact.Run(d, s); }));
        char label[160];
        std::snprintf(label, sizeof label, "exact %s, %s: %.3fx the fused pass", c.name,
                      dt == DType::kFloat32 ? "float32" : "float64", e / f);
        // The 0.9x target is the sums' and sum+mean+var's; the mixed plans'
        // rows say where they stand.
        const bool targeted = c.ops == Bit(OpKind::kSum) || c.ops == smv;
        rows.push_back({label, e, f, "fused float64 sums, same run", targeted ? ">= 0.9x" : "",
                        !targeted || e >= 0.9 * f});
      }
    }
    // Rows: the exact rows kernel (a warp per tile of one row) against the
    // fused pass's rows, float32 sum.
    for (const std::uint64_t len : {std::uint64_t{1024}, std::uint64_t{65536}}) {
      Tally fused(DType::kFloat32, Bit(OpKind::kSum), n, len), exact(DType::kFloat32, Bit(OpKind::kSum), n, len, 0,
                                                                     nullptr, true);
      const double f = gbs(MedianMs(s, [&] { fused.Run(x, s); }));
      const double e = gbs(MedianMs(s, [&] { exact.Run(x, s); }));
      char label[160];
      std::snprintf(label, sizeof label, "exact sum, float32 rows of %llu: %.3fx the fused pass",
                    static_cast<unsigned long long>(len), e / f);
      rows.push_back({label, e, f, "fused float64 sums, same run", ">= 0.9x", e >= 0.9 * f});
    }
    CHECK(cudaFree(x64));
  }
  // Segmented sums vs the read ceiling.
  for (std::uint64_t len : {32ull, 1024ull, 65536ull, 16ull << 20}) {
    if (n % len || !wanted("segmented sum, rows of " + std::to_string(len))) continue;
    Tally tl(DType::kFloat32, Bit(OpKind::kSum), n, len);
    const double ours = gbs(MedianMs(s, [&] { tl.Run(x, s); }));
    rows.push_back({"segmented sum, rows of " + std::to_string(len), ours, read_gbs, "plain read",
                    ">= 85% of read", ours >= 0.85 * read_gbs});
  }
  if (wanted("segmented sum+max+argmin")) {
    Tally tl(DType::kFloat32, Bit(OpKind::kSum) | Bit(OpKind::kMax) | Bit(OpKind::kArgmin), n, 1024);
    rows.push_back({"segmented sum+max+argmin, rows of 1024", gbs(MedianMs(s, [&] { tl.Run(x, s); })), read_gbs, "plain read", "", true});
  }

  // Variable-length segments over CSR offsets (tally/kernels/segmented.h):
  // sums of the same float32 input in segments of three length
  // distributions drawn on the host (fixed seed), tally against CUB's
  // DeviceSegmentedReduce::Sum (float output) in the same run. GB/s counts
  // the data bytes alone; the offsets (8 bytes) and tally's float64 sums (8
  // bytes) per segment come on top, so the floor in these GB/s is the read
  // ceiling x data / (data + 16 x segments). Every run's sums are checked
  // against a host long double reference, min and max exactly on one
  // distribution; a mismatch fails the bench.
  bool csr_failed = false;
  const std::int64_t ni = static_cast<std::int64_t>(n);
  auto uniform = [](std::int64_t lo, std::int64_t hi) {
    return std::function<std::int64_t(std::mt19937_64&)>(
        [=](std::mt19937_64& r) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(r); });
  };
  // P(length >= k) = k^-0.5, so P(length = k) ~ k^-1.5 (zeta-like, alpha
  // 1.5), capped at 2^24: mean length about 8200.
  const std::function<std::int64_t(std::mt19937_64&)> power_law = [](std::mt19937_64& r) {
    const double u = 1.0 - static_cast<double>(r() >> 11) * 0x1p-53;  // (0, 1]
    return static_cast<std::int64_t>(std::min(std::floor(1.0 / (u * u)), 16777216.0));
  };
  struct Dist {
    std::string name;
    std::function<std::vector<std::int64_t>()> make;
    bool cub;  // timed against CUB too
    std::vector<std::int64_t> off;
  };
  std::vector<Dist> dists;
  dists.push_back({"uniform 1-64", [&] { return CsrOffsets(ni, uniform(1, 64)); }, true, {}});
  dists.push_back({"uniform 1K-64K", [&] { return CsrOffsets(ni, uniform(1024, 65536)); }, true, {}});
  dists.push_back({"power-law a=1.5 max 2^24", [&] { return CsrOffsets(ni, power_law); }, true, {}});
  dists.push_back({"uniform 1-64, every 7th empty", [&] { return CsrOffsets(ni, uniform(1, 64), 7); }, false, {}});
  dists.push_back({"uniform 1K-64K, every 7th empty", [&] { return CsrOffsets(ni, uniform(1024, 65536), 7); }, false, {}});
  dists.push_back({"power-law, every 7th empty", [&] { return CsrOffsets(ni, power_law, 7); }, false, {}});
  dists.push_back({"uniform 1-64, 2^20 empty at one offset",
                   [&] {
                     // 2^20 empty segments piled up at one offset, mid-array.
                     std::vector<std::int64_t> off = CsrOffsets(ni, uniform(1, 64));
                     const std::size_t mid = off.size() / 2;
                     off.insert(off.begin() + static_cast<std::ptrdiff_t>(mid), std::size_t{1} << 20, off[mid]);
                     return off;
                   },
                   false, {}});
  // The row names start so, for the filter.
  auto sum_name = [](const Dist& d) { return "segmented csr sum, " + d.name; };
  auto all_name = [](const Dist& d) { return "segmented csr sum+min+max+mean, " + d.name; };
  bool any_csr = false;
  for (Dist& d : dists) {
    const bool want = wanted(sum_name(d)) || (d.name == "uniform 1-64" && wanted(all_name(d)));
    if (want) d.off = d.make();
    any_csr = any_csr || want;
  }
  if (any_csr) {
    std::vector<float> hx(n);
    CHECK(cudaMemcpy(hx.data(), x, n * 4, cudaMemcpyDeviceToHost));
    std::size_t max_segs = 0;
    for (const Dist& d : dists) max_segs = std::max(max_segs, d.off.empty() ? 0 : d.off.size() - 1);
    std::int64_t* d_off;
    void *d_res, *d_scr, *d_cub_tmp = nullptr;
    float* d_cub_out;
    tally::kernels::SegmentedPlan most;
    most.ops = Bit(OpKind::kSum) | Bit(OpKind::kMin) | Bit(OpKind::kMax) | Bit(OpKind::kMean);
    most.length = n;
    most.segments = max_segs;
    std::size_t scr_bytes = 0, cub_tmp_bytes = 0;
    CHECK(tally::kernels::SegmentedScratchBytes(most, &scr_bytes));
    CHECK(cudaMalloc(&d_off, (max_segs + 1) * 8));
    CHECK(cudaMalloc(&d_res, tally::kernels::LayoutOf(most).bytes));
    CHECK(cudaMalloc(&d_scr, scr_bytes));
    CHECK(cudaMalloc(&d_cub_out, max_segs * 4));
    for (const Dist& d : dists) {
      if (d.off.empty()) continue;
      const std::int64_t segs = static_cast<std::int64_t>(d.off.size() - 1);
      char label[160];
      std::snprintf(label, sizeof label, "%s, %.2fM segments (GB/s of data bytes)", sum_name(d).c_str(),
                    segs / 1e6);
      const bool also_all = d.name == "uniform 1-64" && wanted(all_name(d));
      CHECK(cudaMemcpy(d_off, d.off.data(), d.off.size() * 8, cudaMemcpyHostToDevice));
      tally::kernels::SegmentedPlan plan;
      plan.ops = Bit(OpKind::kSum);
      plan.length = n;
      plan.segments = static_cast<std::uint64_t>(segs);
      if (wanted(sum_name(d))) {
        CHECK(cudaMemset(d_res, 0xA5, tally::kernels::LayoutOf(plan).bytes));
        const double ours = gbs(MedianMs(s, [&] {
          CHECK(tally::kernels::AggregateSegments(plan, x, d_off, d_res, d_scr, scr_bytes, s));
        }));
        const double err = CheckSegments(hx, d.off, plan, d_res);
        std::printf("check: %s: %lld segment sums, max relative error %.2g (limit 1e-12)%s\n", d.name.c_str(),
                    static_cast<long long>(segs), err, err < 0 ? ": MISMATCH" : "");
        csr_failed = csr_failed || err < 0;
        const double floor = read_gbs * static_cast<double>(n) * 4 / (static_cast<double>(n) * 4 + 16.0 * segs);
        char name[320];
        if (d.cub) {
          std::size_t need = 0;
          CHECK(cub::DeviceSegmentedReduce::Sum(nullptr, need, x, d_cub_out, segs, d_off, d_off + 1, s));
          if (need > cub_tmp_bytes) {
            CHECK(cudaFree(d_cub_tmp));
            CHECK(cudaMalloc(&d_cub_tmp, need));
            cub_tmp_bytes = need;
          }
          const double theirs = gbs(MedianMs(s, [&] {
            std::size_t tb = cub_tmp_bytes;
            CHECK(cub::DeviceSegmentedReduce::Sum(d_cub_tmp, tb, x, d_cub_out, segs, d_off, d_off + 1, s));
          }));
          std::snprintf(name, sizeof name, "%s: %.2fx CUB, %.2fx read (bytes floor %.2fx)", label,
                        ours / theirs, ours / read_gbs, floor / read_gbs);
          rows.push_back({name, ours, theirs, "CUB DeviceSegmentedReduce::Sum",
                          ">= 1.5x CUB, >= 0.80x read", ours >= 1.5 * theirs && ours >= 0.80 * read_gbs});
        } else {
          std::snprintf(name, sizeof name, "%s: %.2fx read (bytes floor %.2fx)", label, ours / read_gbs,
                        floor / read_gbs);
          rows.push_back({name, ours, read_gbs, "plain read", ">= 0.80x read", ours >= 0.80 * read_gbs});
        }
      }
      if (also_all) {
        // The full variant (min, max and the float64 sum for the mean
        // beside the sum), min and max checked exactly.
        CHECK(cudaMemset(d_res, 0xA5, tally::kernels::LayoutOf(most).bytes));
        tally::kernels::SegmentedPlan all = plan;
        all.ops = most.ops;
        const double full = gbs(MedianMs(s, [&] {
          CHECK(tally::kernels::AggregateSegments(all, x, d_off, d_res, d_scr, scr_bytes, s));
        }));
        const double err_all = CheckSegments(hx, d.off, all, d_res);
        std::printf("check: %s, sum+min+max+mean: %lld segments, max relative sum error %.2g, min and max exact%s\n",
                    d.name.c_str(), static_cast<long long>(segs), err_all, err_all < 0 ? ": MISMATCH" : "");
        csr_failed = csr_failed || err_all < 0;
        char name[320];
        std::snprintf(name, sizeof name, "%s (GB/s of data bytes): %.2fx read", all_name(d).c_str(),
                      full / read_gbs);
        rows.push_back({name, full, read_gbs, "plain read", "", true});
      }
    }
    CHECK(cudaFree(d_off));
    CHECK(cudaFree(d_res));
    CHECK(cudaFree(d_scr));
    CHECK(cudaFree(d_cub_out));
    CHECK(cudaFree(d_cub_tmp));
  }

  // Every dtype's sum and fused sum+min+max+argmax over the same bytes
  // (random bit patterns of each type), against the read ceiling.
  for (const DType dt : tally::rules::kAllDTypes) {
    const std::string type = tally::rules::Name(dt);
    const std::uint64_t elements = n * 4 / tally::rules::SizeOf(dt);
    const tally::rules::OpMask four = Bit(OpKind::kSum) | Bit(OpKind::kMin) | Bit(OpKind::kMax) | Bit(OpKind::kArgmax);
    for (const auto& [what, ops] : {std::pair<std::string, tally::rules::OpMask>{"sum", Bit(OpKind::kSum)},
                                    {"sum+min+max+argmax", four}}) {
      const std::string name = what + " (" + type + ")";
      if (!wanted(name)) continue;
      Tally tl(dt, ops, elements, 0);
      const double ours = gbs(MedianMs(s, [&] { tl.Run(x, s); }));
      // The 16-bit floats' sum is held to 0.97x the read ceiling.
      const bool held = ops == Bit(OpKind::kSum) && (dt == DType::kFloat16 || dt == DType::kBFloat16);
      rows.push_back({name, ours, read_gbs, "plain read", held ? ">= 0.97x" : "", ours >= 0.97 * read_gbs});
    }
  }

  // The fold pass (prod, count_nonzero: a generic kernel, not the fused
  // one), whole and in rows short and long, against the read ceiling; no
  // target yet.
  for (const DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kUInt8, DType::kFloat16}) {
    const std::uint64_t elements = n * 4 / tally::rules::SizeOf(dt);
    for (const auto& [what, ops] : {std::pair<std::string, tally::rules::OpMask>{"prod", Bit(OpKind::kProduct)},
                                    {"count_nonzero", Bit(OpKind::kCountNonzero)}}) {
      for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{64}, std::uint64_t{1} << 20}) {
        const std::string name = what + (row == 0 ? "" : " rows of " + std::to_string(row)) + " (" +
                                 tally::rules::Name(dt) + ")";
        if (!wanted(name) || (row != 0 && elements % row != 0)) continue;
        Tally tl(dt, ops, elements, row);
        const double ours = gbs(MedianMs(s, [&] { tl.Run(x, s); }));
        rows.push_back({name, ours, read_gbs, "plain read", "", true});
      }
    }
  }

  std::printf("| op (float32 unless named, 1 GiB) | tally GB/s | reference GB/s | reference | target | met |\n");
  std::printf("|---|---:|---:|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.0f | %.0f | %s | %s | %s |\n", r.name.c_str(), r.ours_gbs, r.ref_gbs,
                r.ref_name.c_str(), r.target.c_str(), r.target.empty() ? "" : (r.met ? "yes" : "NO"));

  // Latency: 1K floats, launch to result on the host, p50 of wall time.
  if (wanted("latency")) {
    const std::size_t m = 1024;
    Tally tl(DType::kFloat32, Bit(OpKind::kSum), m, 0);
    float* h_f;
    CHECK(cudaMallocHost(&h_f, 64));
    // p50 of f()'s wall time over 2000 runs after 200; with the sync in the
    // timing (launch to result) or after it (the host call alone).
    auto p50 = [&](const std::function<void()>& f, bool timed_sync = true) {
      std::vector<double> us;
      for (int i = 0; i < 2200; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        if (timed_sync) CHECK(cudaStreamSynchronize(s));
        const auto t1 = std::chrono::steady_clock::now();
        if (!timed_sync) CHECK(cudaStreamSynchronize(s));
        if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    const double ours = p50([&] {
      CHECK(tally::kernels::Aggregate(tl.plan, x, tl.state, tl.scratch, tl.scratch_bytes, tl.host, s));
    });
    const double theirs = p50([&] {
      t = cub_bytes;
      CHECK(cub::DeviceReduce::Sum(cub_tmp, t, x, f_out, m, s));
      CHECK(cudaMemcpyAsync(h_f, f_out, 4, cudaMemcpyDeviceToHost, s));
    });
    // Each measured three ways below.
    const std::function<void()> accumulate = [&] {
      CHECK(tally::kernels::Accumulate(tl.plan, x, m, 0, tl.state, tl.scratch, tl.scratch_bytes, s));
    };
    const std::function<void()> cub_sum_small = [&] {
      t = cub_bytes;
      CHECK(cub::DeviceReduce::Sum(cub_tmp, t, x, f_out, m, s));
    };
    const std::function<void()> empty_kernel = [&] {
      Spin<<<1, 32, 0, s>>>(0);
      CHECK(cudaGetLastError());
    };
    const double accumulate_only = p50(accumulate);
    const double finalize_only = p50([&] { CHECK(tally::kernels::Finalize(tl.plan, tl.state, tl.host, s)); });
    const double cub_only = p50(cub_sum_small);
    // Where the time goes: the host's share (the call returning, before the
    // sync), the device's (events around the work queued behind a spin), and
    // the floor (an empty kernel, launch plus sync).
    const double accumulate_host = p50(accumulate, /*timed_sync=*/false);
    const double cub_host = p50(cub_sum_small, /*timed_sync=*/false);
    const double empty = p50(empty_kernel);
    const double accumulate_dev = 1e3 * MedianMs(s, accumulate, 301);
    const double cub_dev = 1e3 * MedianMs(s, cub_sum_small, 301);
    const double empty_dev = 1e3 * MedianMs(s, empty_kernel, 301);
    std::printf("\nlatency parts (p50 us, each + sync): tally Accumulate %.1f, Finalize %.1f; CUB Sum %.1f; "
                "empty kernel %.1f\n",
                accumulate_only, finalize_only, cub_only, empty);
    std::printf("latency parts (us): host call alone: tally Accumulate %.2f, CUB Sum %.2f; "
                "device (events, median of 301): tally %.2f, CUB %.2f, empty kernel %.2f\n",
                accumulate_host, cub_host, accumulate_dev, cub_dev, empty_dev);
    std::printf("\n| latency, sum of 1K float32 to host | tally p50 %.1f us | CUB p50 %.1f us | target: no slower | %s |\n",
                ours, theirs, ours <= theirs ? "yes" : "NO");
    cudaFreeHost(h_f);
  }
  if (csr_failed) {
    std::fprintf(stderr, "segmented csr: results differ from the host reference\n");
    return 1;
  }
  return 0;
}
