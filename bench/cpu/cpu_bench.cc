// tally-cpu-bench: throughput of the CPU backend on a large float32,
// float64, int32 or int64 array (1 GiB by default) for sum, min, max and
// the three fused, and the moments (mean, var, sum_squares, sum+mean+var),
// whole or in rows (--row_length), driving the Backend interface directly
// (no network).
// compare_numpy.py runs it next to numpy on an array of the same size and
// prints both.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/mman.h>

#include "server/engine/cpu/cpu_backend.h"

namespace {

struct Flags {
  double gib = 1.0;
  int reps = 5;
  int threads = 0;
  std::uint64_t piece_mib = 0;  // 0: the whole array in one Consume()
  std::uint64_t row_length = 0;  // 0: not segmented
  bool tsv = false;
  std::string dtype = "float32";
  std::string only;  // a case's name: that case alone
};

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string(name) + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("--gib")) {
      f.gib = std::atof(v);
    } else if (const char* v = value("--reps")) {
      f.reps = std::max(1, std::atoi(v));
    } else if (const char* v = value("--threads")) {
      f.threads = std::atoi(v);
    } else if (const char* v = value("--piece_mib")) {
      f.piece_mib = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("--row_length")) {
      f.row_length = std::strtoull(v, nullptr, 10);
    } else if (a == "--tsv") {
      f.tsv = true;
    } else if (const char* v = value("--dtype")) {
      f.dtype = v;
      if (f.dtype != "float32" && f.dtype != "float64" && f.dtype != "int32" && f.dtype != "int64") {
        std::fprintf(stderr, "--dtype must be float32, float64, int32 or int64, not %s\n", v);
        std::exit(2);
      }
    } else if (const char* v = value("--case")) {
      f.only = v;
    } else {
      std::fprintf(stderr,
                   "usage: tally-cpu-bench [--gib=1] [--reps=5] [--threads=0 (all)]\n"
                   "                       [--piece_mib=0 (one piece)] [--row_length=0] [--tsv]\n"
                   "                       [--dtype=float32|float64|int32|int64] [--case=NAME (one case: sum, var, ...)]\n");
      std::exit(a == "--help" ? 0 : 2);
    }
  }
  return f;
}

// The array, in transparent huge pages where the kernel allows them, as
// numpy allocates large arrays (it madvises MADV_HUGEPAGE on Linux): with 4
// KiB pages, TLB misses and prefetchers that stop at page boundaries cost
// streaming reads a large part of their bandwidth.
template <typename T>
struct HugeArray {
  explicit HugeArray(std::size_t n) : size(n) {
    constexpr std::size_t kHuge = 2 << 20;
    bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    data = static_cast<T*>(std::aligned_alloc(kHuge, bytes));
    if (data == nullptr) std::abort();
    madvise(data, bytes, MADV_HUGEPAGE);  // a hint: fine if it is refused
  }
  ~HugeArray() { std::free(data); }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  std::span<T> span() const { return {data, size}; }

  T* data = nullptr;
  std::size_t size = 0;
  std::size_t bytes = 0;
};

struct Case {
  const char* name;
  std::vector<tally::OpKind> ops;
};

// The array's values: xorshift64*, uniform [0, 1) like numpy's random() of
// the dtype for floats, over the whole range for integers.
template <typename T>
void Fill(std::span<T> values) {
  std::uint64_t s = 0x9e3779b97f4a7c15ull;
  for (T& v : values) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const std::uint64_t r = s * 0x2545f4914f6cdd1dull;
    if constexpr (std::is_integral_v<T>) {
      v = static_cast<T>(r);
    } else if constexpr (sizeof(T) == 4) {
      v = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
    } else {
      v = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
    }
  }
}

// The first value of an op's answer as a double, whatever its type.
double FirstValue(const tally::OpValues& v) {
  if (const auto* d = std::get_if<std::vector<double>>(&v)) return d->at(0);
  if (const auto* i = std::get_if<std::vector<std::int64_t>>(&v)) return static_cast<double>(i->at(0));
  if (const auto* u = std::get_if<std::vector<std::uint64_t>>(&v)) return static_cast<double>(u->at(0));
  return 0.0;
}

template <typename T>
int Run(const Flags& flags, tally::DType dtype) {
  std::uint64_t n = static_cast<std::uint64_t>(flags.gib * (1ull << 30)) / sizeof(T);
  if (flags.row_length > 0) n -= n % flags.row_length;
  HugeArray<T> array(n);
  Fill(array.span());
  const auto backend = tally::MakeCpuBackend({.threads = flags.threads});
  const std::span<const std::byte> bytes = std::as_bytes(std::span<const T>(array.span()));
  const std::size_t piece = flags.piece_mib == 0 ? bytes.size() : flags.piece_mib << 20;
  const char* dtype_name = flags.dtype.c_str();

  const Case cases[] = {
      {"sum", {tally::OpKind::kSum}},
      {"min", {tally::OpKind::kMin}},
      {"max", {tally::OpKind::kMax}},
      {"sum+min+max", {tally::OpKind::kSum, tally::OpKind::kMin, tally::OpKind::kMax}},
      {"mean", {tally::OpKind::kMean}},
      {"var", {tally::OpKind::kVariance}},
      {"sum_squares", {tally::OpKind::kSumSquares}},
      {"sum+mean+var", {tally::OpKind::kSum, tally::OpKind::kMean, tally::OpKind::kVariance}},
  };
  if (!flags.tsv) {
    std::printf("tally cpu backend: %s, %.2f GiB %s (%llu elements, rows of %llu), %s, "
                "best of %d\n",
                backend->device().c_str(), flags.gib, dtype_name, static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(flags.row_length),
                flags.piece_mib == 0 ? "one Consume()"
                                     : (std::to_string(flags.piece_mib) + " MiB pieces").c_str(),
                flags.reps);
    std::printf("%-12s %10s %10s %22s\n", "op", "best s", "GB/s", "result");
  }
  for (const Case& c : cases) {
    if (!flags.only.empty() && flags.only != c.name) continue;
    tally::AggregationPlan plan;
    plan.array = {.dtype = dtype,
                  .length = n,
                  .row_length = flags.row_length};
    for (tally::OpKind k : c.ops) plan.ops.push_back({.kind = k});
    double best = 1e300, result = 0.0;
    for (int r = 0; r < flags.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto reduction = backend->Start(plan);
      if (!reduction.ok()) return 1;
      for (std::size_t off = 0; off < bytes.size(); off += piece) {
        if (!(*reduction)->Consume(bytes.subspan(off, std::min(piece, bytes.size() - off))).ok()) {
          return 1;
        }
      }
      auto out = (*reduction)->Finish();
      const auto t1 = std::chrono::steady_clock::now();
      if (!out.ok()) return 1;
      best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
      result = FirstValue(out->values[0]);
    }
    const double gbps = static_cast<double>(bytes.size()) / best / 1e9;
    if (flags.tsv) {
      std::printf("%s\t%.6f\t%.3f\t%.17g\n", c.name, best, gbps, result);
    } else {
      std::printf("%-12s %10.4f %10.2f %22.10g\n", c.name, best, gbps, result);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = Parse(argc, argv);
  if (flags.dtype == "float64") return Run<double>(flags, tally::DType::kFloat64);
  if (flags.dtype == "int32") return Run<std::int32_t>(flags, tally::DType::kInt32);
  if (flags.dtype == "int64") return Run<std::int64_t>(flags, tally::DType::kInt64);
  return Run<float>(flags, tally::DType::kFloat32);
}
