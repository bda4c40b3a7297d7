// A CUDA IPC client of tally: an array that already lives in this process's
// GPU memory is aggregated by a tally server on the same host without being
// copied anywhere. Allocate and fill, export a handle, register it once,
// aggregate as often as needed, unregister.
//
//   tally-cuda-ipc-example [--target=HOST:PORT] [--mib=N] [--repeat=R] [--ops=LIST]
//
// Prints the results, checks them against the host's own computation, and
// reports the server's time per query (Execution.server_seconds, median of
// R queries) and the rate at which the server read the array.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tally/client/aggregations.h"
#include "tally/client/client.h"
#include "tally/client/reference.h"

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tally-cuda-ipc-example: %s\n", what.c_str());
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorName(e));
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind(prefix, 0) == 0) return std::string(argv[i]).substr(prefix.size());
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  namespace tc = tally::client;
  const std::string target = Flag(argc, argv, "target", "127.0.0.1:50051");
  const std::uint64_t n = std::stoull(Flag(argc, argv, "mib", "1024")) * (1 << 20) / sizeof(float);
  const int repeat = std::stoi(Flag(argc, argv, "repeat", "10"));
  auto ops = tc::ParseAggregations(Flag(argc, argv, "ops", "sum,max,hist:256:-1:1"));
  if (!ops.ok()) Die(std::string(ops.status().message()));

  // 1. The array, in this process's GPU memory (filled from the host here;
  //    in a real client it is already there: a training step's output, say).
  std::vector<float> host(n);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<float> dist(-1.2f, 1.2f);  // some values outside hist:...:-1:1
  for (float& x : host) x = dist(rng);
  void* device = nullptr;
  Check(cudaMalloc(&device, n * sizeof(float)), "cudaMalloc");
  Check(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");

  // 2. Export it, and register the handle with the server once.
  cudaIpcMemHandle_t handle;
  Check(cudaIpcGetMemHandle(&handle, device), "cudaIpcGetMemHandle");
  int ordinal = 0;
  Check(cudaGetDevice(&ordinal), "cudaGetDevice");
  tc::Client client(tc::MakeChannel(target));
  const std::string region = "cuda-ipc-example-" + std::to_string(getpid());
  auto info = client.RegisterCudaRegion(
      region, std::string(reinterpret_cast<const char*>(&handle), sizeof handle), ordinal, n * sizeof(float),
      absl::Seconds(60));
  if (!info.ok()) Die("RegisterCudaRegion: " + std::string(info.status().message()));

  // 3. Aggregate it where it lies: only the request and the results travel.
  tally::v1::ArraySpec spec;
  spec.set_dtype(tally::v1::DTYPE_FLOAT32);
  spec.set_length(n);
  std::vector<double> server_seconds;
  tally::v1::AggregateResponse last;
  for (int i = 0; i < repeat; ++i) {
    auto response = client.AggregateRegion(region, 0, spec, *ops, absl::Seconds(60));
    if (!response.ok()) Die("AggregateRegion: " + std::string(response.status().message()));
    server_seconds.push_back(response->execution().server_seconds());
    last = *std::move(response);
  }

  // 4. Check the answer against the host's own, then let the region go.
  const tc::ArrayRef array{tally::rules::DType::kFloat32, reinterpret_cast<const std::byte*>(host.data()), n, 0};
  auto expected = tc::ComputeReference(array, *ops);
  const absl::Status same = expected.ok() ? tc::CompareResults(*expected, last) : expected.status();
  (void)client.UnregisterRegion(region, absl::Seconds(60));
  Check(cudaFree(device), "cudaFree");
  if (!same.ok()) Die("the server's answer differs from the host's: " + std::string(same.message()));

  std::sort(server_seconds.begin(), server_seconds.end());
  const double median = server_seconds[server_seconds.size() / 2];
  std::printf("region %s: %llu float32 (%.0f MiB) on %s, backend %s\n", region.c_str(),
              static_cast<unsigned long long>(n), n * 4.0 / (1 << 20), info->place().c_str(),
              last.execution().backend().c_str());
  for (const auto& r : last.results()) {
    if (r.has_doubles()) std::printf("  op %d = %.17g\n", r.aggregation().op(), r.doubles().values(0));
    if (r.has_histograms()) {
      std::printf("  histogram: %d bins, %llu below, %llu above\n", r.histograms().histograms(0).counts_size(),
                  static_cast<unsigned long long>(r.histograms().histograms(0).below()),
                  static_cast<unsigned long long>(r.histograms().histograms(0).above()));
    }
  }
  std::printf("answers match the host's; server time per query: median %.3f ms, min %.3f ms over %d (%.1f GB/s)\n",
              median * 1e3, server_seconds.front() * 1e3, repeat, n * 4.0 / median / 1e9);
  return 0;
}
