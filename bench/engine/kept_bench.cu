// tally-kept-bench [log2 elements, default 28] [repetitions, default 9]
//                  [dtypes, default float32,float64,int32,int64]
// The functions that keep their own state over an array resident on the
// GPU, for float32, float64 and int32 (and int64 for hll):
//   - cub::DeviceRadixSort::SortKeys of the same array, in the same run
//     (the obvious way to get order statistics), device time;
//   - the kernel passes (tally/kernels/select.h): median, 64 quantiles,
//     topk and bottomk for k = 8, 1024, 65536, hll at precision 12 to 18,
//     ddsketch at 1% and 0.1%;
//     wall time of the call (each synchronizes), and the full reads of the
//     array it took (top-k's call copies its entries into pageable vectors;
//     the server's path brings them through pinned blocks);
//   - the server's path (the cuda backend's StartKeptOnDevice: stream and
//     scratch taken, passes, answers built by rules/agg), wall time, and
//     what taking the stream and scratch alone costs, with tally-server's
//     malloc (server/allocator.cc).
// Medians of the repetitions. Every selection is checked against the sorted
// array, every top-k's k-th entry too: a wrong answer stops the bench.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/engine/device_bench.cuh"
#include "server/allocator.h"
#include "server/engine/backend_factory.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/select.h"

namespace {

using Clock = std::chrono::steady_clock;
using tally::rules::DType;
using tally::rules::OpKind;

using tally::bench::Die;
using tally::bench::Median;
using tally::bench::Spread;

// Floats uniform in [-1000, 1000), integers over their whole range.
template <typename T>
__global__ void Fill(T* x, unsigned long long n, unsigned long long seed) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const unsigned long long h = Spread(i ^ seed);
    if constexpr (std::is_floating_point_v<T>) {
      x[i] = static_cast<T>(static_cast<double>(h >> 11) * (2000.0 / 9007199254740992.0) - 1000.0);
    } else {
      x[i] = static_cast<T>(h);
    }
  }
}

struct Row {
  std::string what;
  double ms = 0;
  std::string note;
};

template <typename T>
std::uint64_t BitsOf(T v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

template <typename T>
void Bench(DType dtype, const char* name, std::uint64_t n, int reps, std::uint64_t seed, tally::Backend& cuda,
           bool hll_only, std::vector<Row>& rows) {
  T* data = nullptr;
  CHECK(cudaMalloc(&data, n * sizeof(T)));
  Fill<T><<<1024, 256>>>(data, n, seed);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const tally::kernels::DeviceArray array{dtype, data, n};
  const double gb = static_cast<double>(n * sizeof(T)) / 1e9;
  const auto add = [&](const std::string& what, double ms, const std::string& note) {
    rows.push_back({std::string(name) + "  " + what, ms, note});
  };
  const auto timed = [&](const std::function<void()>& f) {
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up
      const auto t0 = Clock::now();
      f();
      if (r > 0) t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return Median(t);
  };

  // The sorted array: the baseline's time, and the truth to check against.
  std::vector<T> sorted_at;  // sorted[i] read back where needed
  T* sorted = nullptr;
  if (!hll_only) {
    CHECK(cudaMalloc(&sorted, n * sizeof(T)));
    std::size_t temp_bytes = 0;
    CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, data, sorted, static_cast<int>(n), 0,
                                         static_cast<int>(sizeof(T) * 8), stream));
    void* temp = nullptr;
    CHECK(cudaMalloc(&temp, temp_bytes));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      CHECK(cudaEventRecord(e0, stream));
      CHECK(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, data, sorted, static_cast<int>(n), 0,
                                           static_cast<int>(sizeof(T) * 8), stream));
      CHECK(cudaEventRecord(e1, stream));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) t.push_back(ms);
    }
    add("cub::DeviceRadixSort::SortKeys", Median(t), "device time");
    CHECK(cudaFree(temp));
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
  }
  const auto sorted_value = [&](std::uint64_t i) {
    T v;
    CHECK(cudaMemcpy(&v, sorted + i, sizeof v, cudaMemcpyDeviceToHost));
    return v;
  };

  if (!hll_only) {
    // Order statistics: the median's two ranks, and 64 quantiles' 128.
    // The median with hints (the counting pass gathers its buckets: one
    // read) and without (a second read gathers them), then 64 quantiles.
    for (const int quantiles : {1, 0, 64}) {
      const bool hinted = quantiles != 0;
      std::vector<std::uint64_t> ranks;
      std::vector<double> hints;  // as the cuda backend passes them: the ops' fractions
      for (int i = 0; i < std::max(quantiles, 1); ++i) {
        const std::uint64_t r = quantiles <= 1 ? n / 2 - 1 : static_cast<std::uint64_t>((n - 1) * ((i + 1) / 65.0));
        ranks.push_back(r);
        ranks.push_back(r + 1);
        if (hinted) hints.push_back(quantiles == 1 ? 0.5 : (i + 1) / 65.0);
      }
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      std::size_t bytes = 0;
      CHECK(tally::kernels::OrderStatistics::ScratchBytes(array, ranks.size(), &bytes));
      void* scratch = nullptr;
      CHECK(cudaMalloc(&scratch, bytes));
      std::vector<std::uint64_t> bits(ranks.size());
      int passes = 0;
      bool gathered = false;
      const double ms = timed([&] {
        tally::kernels::OrderStatistics select(array, ranks.size(), scratch, bytes, stream);
        std::uint64_t nan = 0;
        CHECK(select.Count(&nan, hints));
        CHECK(select.Select(ranks, bits));
        passes = select.stats().full_passes;
        gathered = select.stats().gathered_while_counting;
      });
      for (std::size_t i = 0; i < ranks.size(); ++i) {
        if (bits[i] != BitsOf(sorted_value(ranks[i]))) Die("a selected element is not the sorted array's");
      }
      add(quantiles == 1 ? "median (2 ranks)" : quantiles == 0 ? "median, no hints" : "64 quantiles (128 ranks)", ms,
          std::to_string(passes) + " full reads" + (gathered ? " (gathered while counting)" : "") + ", scratch " +
              std::to_string(bytes >> 20) + " MiB");
      CHECK(cudaFree(scratch));
    }
    for (const std::uint32_t k : {8u, 1024u, 65536u}) {
      for (const bool largest : {true, false}) {
        std::size_t bytes = 0;
        CHECK(tally::kernels::TopKScratchBytes(array, k, &bytes));
        void* scratch = nullptr;
        CHECK(cudaMalloc(&scratch, bytes));
        std::vector<std::uint64_t> bits(k), index(k);
        std::uint64_t count = 0;
        tally::kernels::PassStats stats;
        const double ms = timed([&] {
          stats = {};
          CHECK(tally::kernels::TopK(array, k, largest, scratch, bytes, stream, bits.data(), index.data(), &count,
                                     &stats));
        });
        // The k-th entry is the sorted array's (k-1)-th from its end.
        if (count != k || bits[k - 1] != BitsOf(sorted_value(largest ? n - k : k - 1))) {
          Die("a top-k's last entry is not the sorted array's");
        }
        add(std::string(largest ? "topk" : "bottomk") + " k=" + std::to_string(k), ms,
            std::to_string(stats.full_passes) + " full reads" + (stats.fell_back ? ", the guess missed" : ""));
        CHECK(cudaFree(scratch));
      }
    }
  }
  for (const std::uint32_t p : {12u, 14u, 16u, 18u}) {
    std::size_t bytes = 0;
    CHECK(tally::kernels::HllScratchBytes(array, p, &bytes));
    void* scratch = nullptr;
    CHECK(cudaMalloc(&scratch, bytes));
    tally::kernels::HllSketch sketch;
    const double ms = timed([&] { CHECK(tally::kernels::Hll(array, p, scratch, bytes, stream, &sketch)); });
    char note[96];
    std::snprintf(note, sizeof note, "%.0f GB/s, %d full reads, %s", gb / ms * 1e3, sketch.stats.full_passes,
                  sketch.dense ? "dense" : "exact");
    add("hll p=" + std::to_string(p), ms, note);
    CHECK(cudaFree(scratch));
  }

  for (const double alpha : {0.01, 0.001}) {
    std::size_t bytes = 0;
    CHECK(tally::kernels::DdSketchScratchBytes(array, alpha, &bytes));
    void* scratch = nullptr;
    CHECK(cudaMalloc(&scratch, bytes));
    tally::kernels::DdSketchCounts counts;
    const double ms = timed([&] { CHECK(tally::kernels::DdSketch(array, alpha, scratch, bytes, stream, &counts)); });
    std::uint64_t counted = counts.zero + counts.negative_inf + counts.positive_inf;
    for (const auto* buckets : {&counts.negative, &counts.positive}) {
      for (const auto& b : *buckets) counted += b.count;
    }
    if (counted > n) Die("ddsketch counted more elements than the array holds");
    char note[96];
    std::snprintf(note, sizeof note, "%.0f GB/s, %zu buckets", gb / ms * 1e3,
                  counts.negative.size() + counts.positive.size());
    add("ddsketch " + std::to_string(alpha).substr(0, 5), ms, note);
    CHECK(cudaFree(scratch));
  }

  // The server's path: the cuda backend's device pass, answers built.
  const tally::Extent extent{{reinterpret_cast<const std::byte*>(data), n * sizeof(T)},
                             tally::Placement::Device(0)};
  std::vector<std::pair<std::string, tally::OpSpec>> plans = {
      {"hll p=14 (server)", {.kind = OpKind::kHll, .precision = 14}},
      {"ddsketch 1%, 3 q (server)", {.kind = OpKind::kDdSketch, .q = {0.01, 0.5, 0.99}, .relative_accuracy = 0.01}}};
  if (!hll_only) {
    tally::OpSpec q{.kind = OpKind::kQuantile};
    for (int i = 1; i <= 64; ++i) q.q.push_back(i / 65.0);
    plans.insert(plans.begin(), {{"median (server)", {.kind = OpKind::kMedian}},
                                 {"64 quantiles (server)", q},
                                 {"topk k=8 (server)", {.kind = OpKind::kTopK, .k = 8}},
                                 {"topk k=65536 (server)", {.kind = OpKind::kTopK, .k = 65536}}});
  }
  for (const auto& [what, op] : plans) {
    const tally::AggregationPlan plan{.array = {.dtype = dtype, .length = n}, .ops = {op}};
    if (what == plans.front().first) {
      // What the path costs before any pass: its stream and scratch.
      const double ms = timed([&] {
        absl::StatusOr<std::unique_ptr<tally::Reduction>> r = cuda.StartKeptOnDevice(plan, extent.placement);
        if (!r.ok()) Die(what + ": " + r.status().ToString());
      });
      add(what + ", start only", ms, "stream and scratch, taken and given back");
    }
    const double ms = timed([&] {
      absl::StatusOr<std::unique_ptr<tally::Reduction>> r = cuda.StartKeptOnDevice(plan, extent.placement);
      if (!r.ok()) Die(what + ": " + r.status().ToString());
      if (absl::Status s = (*r)->Consume(extent); !s.ok()) Die(what + ": " + s.ToString());
      absl::StatusOr<tally::AggregationResult> res = (*r)->Finish();
      if (!res.ok()) Die(what + ": " + res.status().ToString());
    });
    add(what, ms, "StartKeptOnDevice to Finish");
  }
  if (sorted != nullptr) CHECK(cudaFree(sorted));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(data));
}

}  // namespace

int main(int argc, char** argv) {
  const int log2n = argc > 1 ? std::atoi(argv[1]) : 28;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 9;
  if (log2n < 10 || log2n > 31) Die("log2 elements must be 10 to 31");
  const std::uint64_t n = std::uint64_t{1} << log2n;
  const std::uint64_t seed = std::random_device{}();
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, 2^%d elements, seed %llu, median of %d\n", prop.name, log2n,
              static_cast<unsigned long long>(seed), reps);
  // The server's malloc and its settings, so that the server path's
  // answers (up to 1 MB at k = 65536) are allocated as the server does.
  if (absl::Status kept = tally::KeepLargeBuffersForReuse(); !kept.ok()) Die(kept.ToString());
  tally::BackendOptions options;
  options.kind = "cuda";
  options.cuda_devices = {0};
  options.route_calibration = false;
  absl::StatusOr<std::unique_ptr<tally::Backend>> cuda = tally::MakeBackend(options);
  if (!cuda.ok()) Die(cuda.status().ToString());
  const std::string only = argc > 3 ? argv[3] : "float32,float64,int32,int64";
  const auto wanted = [&](const char* dtype) {
    return ("," + only + ",").find(std::string(",") + dtype + ",") != std::string::npos;
  };
  std::vector<Row> rows;
  if (wanted("float32")) Bench<float>(DType::kFloat32, "float32", n, reps, seed, **cuda, false, rows);
  if (wanted("float64")) Bench<double>(DType::kFloat64, "float64", n, reps, seed, **cuda, false, rows);
  if (wanted("int32")) Bench<std::int32_t>(DType::kInt32, "int32  ", n, reps, seed, **cuda, false, rows);
  if (wanted("int64")) Bench<std::int64_t>(DType::kInt64, "int64  ", n, reps, seed, **cuda, true, rows);
  std::printf("\n%-46s %10s  %s\n", "what", "ms", "");
  for (const Row& r : rows) std::printf("%-46s %10.3f  %s\n", r.what.c_str(), r.ms, r.note.c_str());
  return 0;
}
