// tally-engine-bench [GiB to stream, default 4] [Consume piece MiB, default 4]
// Streams float32 through the CUDA backend in pieces (as the streaming RPC
// delivers them) and reports GB/s, for 1, 2, 4, 8 and 16 requests at once
// (each on its own thread, as the server's chunk workers run them): the
// engine's own ceiling, with no gRPC; then times CPU and GPU on requests of
// growing size, the measurement behind --small_request_bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/backend_factory.h"
#include "server/engine/cpu/cpu_backend.h"

namespace {

using Clock = std::chrono::steady_clock;

double Once(tally::Backend& b, const tally::AggregationPlan& plan, std::span<const std::byte> data,
            std::size_t piece) {
  const auto t0 = Clock::now();
  auto r = b.Start(plan);
  if (!r.ok()) {
    std::fprintf(stderr, "start: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  for (std::size_t at = 0; at < data.size(); at += piece) {
    if (!(*r)->Consume(data.subspan(at, std::min(piece, data.size() - at))).ok()) std::exit(1);
  }
  if (auto res = (*r)->Finish(); !res.ok()) {
    std::fprintf(stderr, "finish: %s\n", res.status().ToString().c_str());
    std::exit(1);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

tally::AggregationPlan Plan(std::uint64_t n) {
  using tally::rules::OpKind;
  return {.array = {.dtype = tally::rules::DType::kFloat32, .length = n},
          .ops = {{.kind = OpKind::kSum}, {.kind = OpKind::kMax}, {.kind = OpKind::kVariance}}};
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 4.0;
  const std::size_t piece = static_cast<std::size_t>((argc > 2 ? std::atof(argv[2]) : 4.0) * (1 << 20)) / 4 * 4;
  tally::BackendOptions o;
  o.kind = "cuda";
  o.routing = "size";
  o.small_request_bytes = 0;
  auto cuda = tally::MakeBackend(o);
  if (!cuda.ok()) {
    std::fprintf(stderr, "%s\n", cuda.status().ToString().c_str());
    return 1;
  }
  auto cpu = tally::MakeCpuBackend({});
  std::printf("%s | %s\n", (*cuda)->device().c_str(), cpu->device().c_str());

  // Streaming: each request sends one piece-sized buffer of its own over
  // and over; the clock runs from the first Start() to the last Finish().
  const std::uint64_t pieces = static_cast<std::uint64_t>(gib * (1ull << 30) / piece);
  for (const int streams : {1, 2, 4, 8, 16}) {
    std::vector<std::vector<float>> bufs(static_cast<std::size_t>(streams),
                                         std::vector<float>(piece / 4));
    for (std::vector<float>& buf : bufs) {
      for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i % 1000) * 0.5f;
    }
    std::vector<absl::Status> status(static_cast<std::size_t>(streams));
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < streams; ++t) {
      threads.emplace_back([&, t] {
        const std::vector<float>& buf = bufs[static_cast<std::size_t>(t)];
        absl::Status& st = status[static_cast<std::size_t>(t)];
        auto r = (*cuda)->Start(Plan(pieces * buf.size()));
        if (!r.ok()) {
          st = r.status();
          return;
        }
        for (std::uint64_t p = 0; p < pieces && st.ok(); ++p) {
          st = (*r)->Consume(std::as_bytes(std::span(buf)));
        }
        if (st.ok()) st = (*r)->Finish().status();
      });
    }
    for (std::thread& t : threads) t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const absl::Status& st : status) {
      if (!st.ok()) {
        std::fprintf(stderr, "%d streams: %s\n", streams, st.ToString().c_str());
        return 1;
      }
    }
    std::printf("%2d stream(s) of %.2f GiB in %zu-byte pieces: %.3f s, %.2f GB/s\n", streams, gib,
                piece, s, static_cast<double>(pieces * piece) * streams / s / 1e9);
    std::fflush(stdout);
  }

  // Latency by size, median of 21: where the GPU starts to win.
  std::printf("%12s %12s %12s\n", "bytes", "cpu_us", "cuda_us");
  for (std::uint64_t n = 1024; n <= (std::uint64_t{16} << 20) / 4; n *= 4) {
    std::vector<float> x(n, 1.5f);
    const auto bytes = std::as_bytes(std::span(x));
    double t[2];
    tally::Backend* backends[2] = {cpu.get(), cuda->get()};
    for (int k = 0; k < 2; ++k) {
      std::vector<double> runs;
      for (int i = 0; i < 21; ++i) runs.push_back(Once(*backends[k], Plan(n), bytes, bytes.size()));
      std::nth_element(runs.begin(), runs.begin() + 10, runs.end());
      t[k] = runs[10] * 1e6;
    }
    std::printf("%12llu %12.1f %12.1f\n", static_cast<unsigned long long>(n * 4), t[0], t[1]);
  }
  return 0;
}
