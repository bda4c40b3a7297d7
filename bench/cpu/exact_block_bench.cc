// tally-exact-block-bench: the CPU's exact block sums
// (server/engine/cpu/exact_block.h) against today's float64 lane sum of the
// same blocks (DoubleSumLanes), one thread, the same array in L1-sized
// blocks; and the exact answer against rules::ExactSum of every element.
//
// usage: tally-exact-block-bench [MiB, default 1024] [rounds, default 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "server/engine/cpu/block_kernels.h"
#include "server/engine/cpu/exact_block.h"

namespace {

using tally::cpu::AddExactBlock;
using tally::cpu::DoubleSumLanes;
using tally::rules::ExactAccumulator;
using tally::rules::ExactSum;
constexpr std::size_t kBlock = tally::cpu::CpuPolicy::kBlockElements;

double Seconds(const std::chrono::steady_clock::time_point& a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

template <typename V>
void Run(const char* name, const char* data, std::size_t bytes, int rounds) {
  const std::size_t n = bytes / sizeof(V);
  std::vector<V> x(n);
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::lognormal_distribution<double> wide(0.0, 12.0);
  const bool is_wide = std::strcmp(data, "lognormal(0,12)") == 0;
  for (V& v : x) v = static_cast<V>(is_wide ? wide(rng) * ((rng() & 1) ? 1 : -1) : normal(rng));
  double best_plain = 1e30, best_exact = 1e30;
  double plain = 0;
  ExactAccumulator exact;
  for (int r = 0; r < rounds; ++r) {
    auto t = std::chrono::steady_clock::now();
    double s = 0;
    for (std::size_t at = 0; at < n; at += kBlock) s += DoubleSumLanes(x.data() + at, std::min(kBlock, n - at));
    best_plain = std::min(best_plain, Seconds(t));
    plain = s;
    t = std::chrono::steady_clock::now();
    ExactAccumulator acc;
    for (std::size_t at = 0; at < n; at += kBlock) {
      const std::size_t len = std::min(kBlock, n - at);
      AddExactBlock(x.data() + at, len, false, len, acc);
    }
    best_exact = std::min(best_exact, Seconds(t));
    exact = std::move(acc);
  }
  ExactSum check;
  for (const V& v : x) check.Add(static_cast<double>(v));
  const bool same = check.Bytes() == exact.ToExactSum().Bytes();
  std::printf("%-8s %-16s %5zu MiB, 1 thread: float64 lane sum %6.2f GB/s | exact %6.2f GB/s = %.2fx | exact %s "
              "ExactSum (%.17g; lane sum %.17g)\n",
              name, data, bytes >> 20, bytes / best_plain / 1e9, bytes / best_exact / 1e9, best_plain / best_exact,
              same ? "==" : "!=", exact.Rounded(tally::rules::kFloat64Format), plain);
  if (!same) std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  for (const char* data : {"normal(0,1)", "lognormal(0,12)"}) {
    Run<float>("float32", data, mib << 20, rounds);
    Run<double>("float64", data, mib << 20, rounds);
  }
  return 0;
}
