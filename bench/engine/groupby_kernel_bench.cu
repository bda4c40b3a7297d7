// tally-groupby-kernel-bench [log2 rows, default 28] [repetitions, default 5]
//                            [groups, default 16,4096,65536,1000000,16000000]
// Group-by's device passes alone (tally/kernels/group.h), no server: int32
// keys uniform over G groups and float32 values, 2^rows of each, resident
// on the GPU; per G, medians of the repetitions, wall time of each call
// (each synchronizes), scratch taken once beforehand:
//   - a read of keys and values (a plain sum, device time): the floor;
//   - SpreadOfKeys (the keys' range and the values' magnitude);
//   - SumByKey (the direct pass: a copy per lane, buckets read in place, or
//     buckets moved),
//     its groups left on the GPU, and again with their keys and counts
//     copied back;
//   - OrderByKey and GatherRows of the values (the order by key, which
//     takes every other function).
// Every direct answer is checked against the order's: the same keys, the
// same count in each group.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/engine/device_bench.cuh"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/group.h"

namespace {

using Clock = std::chrono::steady_clock;
using tally::rules::DType;
namespace k = tally::kernels;

using tally::bench::Die;
using tally::bench::Median;
using tally::bench::Spread;

__global__ void FillKeys(int* keys, unsigned long long n, unsigned long long groups, unsigned long long seed) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    keys[i] = static_cast<int>(Spread(i ^ seed) % groups);
  }
}
__global__ void FillValues(float* v, unsigned long long n, unsigned long long seed) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    v[i] = static_cast<float>(static_cast<double>(Spread(i ^ seed) >> 11) * (2000.0 / 9007199254740992.0) - 1000.0);
  }
}
// The floor: keys and values read once (each thread's sum kept live).
__global__ void ReadBoth(const int4* keys, const float4* values, unsigned long long n4, float* sink) {
  float acc = 0;
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
    const int4 a = keys[i];
    const float4 b = values[i];
    acc += static_cast<float>(a.x + a.y + a.z + a.w) + b.x + b.y + b.z + b.w;
  }
  if (acc == 12345.678f) *sink = acc;
}

}  // namespace

int main(int argc, char** argv) {
  const int log2_rows = argc > 1 ? std::atoi(argv[1]) : 28;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<unsigned long long> group_counts = {16, 4096, 65536, 1000000, 16000000};
  if (argc > 3) {
    group_counts.clear();
    std::stringstream list(argv[3]);
    for (std::string g; std::getline(list, g, ',');) group_counts.push_back(std::stoull(g));
  }
  if (log2_rows < 10 || log2_rows > 30 || reps < 1) Die("usage: [log2 rows 10-30] [repetitions] [groups,...]");
  const unsigned long long n = 1ull << log2_rows;
  int* keys = nullptr;
  float* values = nullptr;
  float* sink = nullptr;
  CHECK(cudaMalloc(&keys, n * 4));
  CHECK(cudaMalloc(&values, n * 4));
  CHECK(cudaMalloc(&sink, 4));
  FillValues<<<2048, 256>>>(values, n, 7);
  CHECK(cudaGetLastError());
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, 2^%d rows (int32 keys, float32 values), median of %d\n", prop.name, log2_rows, reps);
  std::printf("groups\tpass\tms\tG rows/s\tnote\n");
  const auto timed = [&](const std::function<void()>& f) {
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {  // the first is a warm-up
      const auto t0 = Clock::now();
      f();
      if (r > 0) t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return Median(t);
  };
  const auto row = [&](unsigned long long g, const char* pass, double ms, const std::string& note) {
    std::printf("%llu\t%s\t%.3f\t%.2f\t%s\n", g, pass, ms, static_cast<double>(n) / ms / 1e6, note.c_str());
    std::fflush(stdout);
  };
  void* small = nullptr;
  CHECK(cudaMalloc(&small, k::kKeySpreadScratchBytes));
  for (const unsigned long long groups : group_counts) {
    FillKeys<<<2048, 256>>>(keys, n, groups, groups * 31 + 1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    const k::GroupKeys gk{DType::kInt32, keys, n};
    const k::DenseValues dv{DType::kFloat32, values};

    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      CHECK(cudaEventRecord(e0, stream));
      ReadBoth<<<prop.multiProcessorCount * 8, 512, 0, stream>>>(reinterpret_cast<const int4*>(keys),
                                                                reinterpret_cast<const float4*>(values), n / 4, sink);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(e1, stream));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) t.push_back(ms);
    }
    const double read_ms = Median(t);
    row(groups, "read keys and values", read_ms,
        std::to_string(static_cast<int>(8.0 * n / read_ms / 1e6)) + " GB/s, device time");

    k::KeyBounds bounds;
    CHECK(k::BoundsOfKeys(gk, small, stream, &bounds));
    std::size_t order_bytes = 0;
    CHECK(k::GroupByKeyScratchBytes(gk, bounds, &order_bytes));
    void* order_scratch = nullptr;
    std::uint32_t* order_rows = nullptr;
    float* gathered = nullptr;
    CHECK(cudaMalloc(&order_scratch, order_bytes));
    CHECK(cudaMalloc(&order_rows, n * 4));
    CHECK(cudaMalloc(&gathered, n * 4));
    k::KeyOrder order;
    const double order_ms = timed([&] {
      CHECK(k::BoundsOfKeys(gk, small, stream, &bounds));
      CHECK(k::OrderByKey(gk, bounds, order_scratch, order_bytes, stream, order_rows, &order));
      CHECK(k::GatherRows(4, values, order_rows, n, gathered, stream));
      CHECK(cudaStreamSynchronize(stream));
    });
    row(groups, "OrderByKey + GatherRows", order_ms, std::to_string(order.groups) + " groups");
    CHECK(cudaFree(order_scratch));
    CHECK(cudaFree(order_rows));
    CHECK(cudaFree(gathered));
    k::KeySpread spread;
    row(groups, "SpreadOfKeys", timed([&] { CHECK(k::SpreadOfKeys(gk, dv, small, stream, &spread)); }), "");
    std::size_t bytes = 0;
    if (k::DenseGroupScratchBytes(gk, DType::kFloat32, spread, &bytes) == cudaSuccess) {
      void* scratch = nullptr;
      CHECK(cudaMalloc(&scratch, bytes));
      k::DenseGroups out;
      std::vector<std::uint32_t> out_keys;  // int32 keys: the key dtype's bytes
      std::vector<std::uint64_t> out_count;
      const double ms = timed([&] {
        CHECK(k::SumByKey(gk, dv, spread, scratch, bytes, stream, &out));
        out_keys.resize(out.groups);
        out_count.resize(out.groups);
        CHECK(cudaMemcpy(out_keys.data(), out.keys, out.groups * 4, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(out_count.data(), out.count, out.groups * 8, cudaMemcpyDeviceToHost));
      });
      // The order by key's groups: the same keys, the same counts.
      if (out.groups != order.groups) Die("not the order's groups");
      for (std::size_t g = 0; g < out.groups; ++g) {
        if (out_keys[g] != static_cast<std::uint32_t>(order.keys[g])) Die("not the order's keys");
      }
      for (std::size_t g = 0; g < out.groups; ++g) {
        if (out_count[g] != order.offsets[g + 1] - order.offsets[g]) Die("not the order's counts");
      }
      const double device_ms = timed([&] { CHECK(k::SumByKey(gk, dv, spread, scratch, bytes, stream, &out)); });
      row(groups, "SumByKey", device_ms,
          std::string(spread.range <= k::kMaxLaneCopiesRange ? "a copy per lane" : spread.range <= k::kMaxInPlaceRange ? "buckets read in place" : "partitioned") + ", " +
              std::to_string(bytes >> 20) + " MiB scratch, groups left on the GPU");
      row(groups, "SumByKey, keys and counts copied back", ms, "");
      CHECK(cudaFree(scratch));
    } else {
      row(groups, "SumByKey", 0, "not taken");
    }

    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
  }
  return 0;
}
