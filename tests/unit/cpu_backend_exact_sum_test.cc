// Float sums on the cpu backend are exact, rounded once (tally/rules/
// exact_sum.h): math.fsum's answer for ill-conditioned arrays, the same
// bits however the bytes arrive, on any thread count, in any row layout,
// and partial states that merge, in any order, into the one-request bits.
// So are sums of squares, and variances come from the exact sums
// (tally/rules/exact_moments.h) with the same independence of the path;
// integer dtypes' means, variances and sums of squares too
// (tally/rules/exact_integers.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "tally/rules/exact_moments.h"
#include "tally/rules/exact_sum.h"
#include "tally/rules/partial.h"
#include "tests/unit/cpu_test_util.h"
#include "tests/unit/test_seed.h"

namespace tally::testing {
namespace {

using rules::ExactSum;
using rules::OpKind;

std::uint64_t Bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

double OneDouble(const OpValues& v) { return std::get<std::vector<double>>(v).at(0); }

// The rounded exact sum of values (NaNs skipped for nansum).
double ExactOf(const std::vector<double>& values, bool skip_nan) {
  ExactSum s;
  for (double v : values) {
    if (!(skip_nan && std::isnan(v))) s.Add(v);
  }
  return s.ToDouble();
}

std::vector<double> IllConditioned(std::mt19937_64& rng, std::size_t n) {
  // Huge values that cancel in pairs, shuffled among small ones and
  // subnormals: float64 sums in any order lose the small ones.
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v;
  while (v.size() + 2 < n) {
    const double big = std::ldexp(normal(rng), static_cast<int>(rng() % 200));
    v.push_back(big);
    v.push_back(-big);
    v.push_back(rng() % 5 == 0 ? std::ldexp(normal(rng), -1060) : normal(rng));
  }
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

TEST(CpuExactSum, EqualsTheRoundedExactSumHoweverTheBytesArrive) {
  TALLY_SEEDED_RNG(rng);
  const auto backend = MakeCpuBackend({.threads = 2});
  for (const std::size_t n : {std::size_t{3}, std::size_t{1000}, std::size_t{200003}}) {
    std::vector<double> v = IllConditioned(rng, n);
    if (n > 3) {
      v[rng() % v.size()] = std::numeric_limits<double>::quiet_NaN();  // nansum skips it, sum is NaN
    }
    const Array a = MakeArray<double>(rules::DType::kFloat64, v);
    const double want = ExactOf(v, false), want_nan = ExactOf(v, true);
    for (const std::vector<std::uint64_t>& pieces :
         {std::vector<std::uint64_t>{}, {1}, {7, 4096, 3}, {65537}}) {
      if (n > 10000 && pieces == std::vector<std::uint64_t>{1}) continue;
      auto got = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kSum), Op(OpKind::kNanSum)}), a.bytes, pieces);
      ASSERT_TRUE(got.ok()) << got.status();
      const double sum = OneDouble(got->values[0]), nansum = OneDouble(got->values[1]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(sum)) << n;
      } else {
        EXPECT_EQ(Bits(want), Bits(sum)) << n << " elements: " << sum << " want " << want;
      }
      EXPECT_EQ(Bits(want_nan), Bits(nansum)) << n << " elements: " << nansum << " want " << want_nan;
    }
  }
}

TEST(CpuExactSum, Float32RowsAreTheirExactSumsOnEveryThreadCount) {
  TALLY_SEEDED_RNG(rng);
  std::lognormal_distribution<double> wide(0.0, 6.0);
  const std::uint64_t rows = 37, row = 5003;
  std::vector<float> v(rows * row);
  for (float& x : v) x = static_cast<float>(wide(rng) * ((rng() & 1) != 0 ? 1 : -1));
  const Array a = MakeArray<float>(rules::DType::kFloat32, v);
  std::vector<double> want(rows);
  for (std::uint64_t r = 0; r < rows; ++r) {
    ExactSum s;
    for (std::uint64_t i = 0; i < row; ++i) s.Add(v[r * row + i]);
    want[r] = s.ToDouble();
  }
  for (const int threads : {1, 2, 5}) {
    const auto backend = MakeCpuBackend({.threads = threads});
    auto got = RunPieces(*backend, Plan(a, row, {Op(OpKind::kSum)}), a.bytes, {1000, 77});
    ASSERT_TRUE(got.ok()) << got.status();
    // Each row's exact sum rounded once to float64 (a float sum's result
    // type): math.fsum(row).
    const auto& sums = std::get<std::vector<double>>(got->values[0]);
    for (std::uint64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(Bits(want[r]), Bits(sums[r])) << "row " << r << ", " << threads << " threads";
    }
  }
}

// `v` cut at `cuts` more random places, each part's partial state of `op`
// (a partial op) on its own; `keeps` tells whether a non-empty part's
// state keeps the exact bytes it must.
template <typename Keeps>
std::vector<rules::PartialState> PartStates(Backend& backend, std::mt19937_64& rng, const std::vector<double>& v,
                                            int cuts, const OpSpec& op, Keeps keeps) {
  std::vector<std::size_t> at = {0, v.size()};
  for (int k = 0; k < cuts; ++k) at.push_back(rng() % v.size());
  std::sort(at.begin(), at.end());
  std::vector<rules::PartialState> states;
  for (std::size_t k = 0; k + 1 < at.size(); ++k) {
    const std::vector<double> part(v.begin() + static_cast<std::ptrdiff_t>(at[k]),
                                   v.begin() + static_cast<std::ptrdiff_t>(at[k + 1]));
    const Array p = MakeArray<double>(rules::DType::kFloat64, part);
    auto got = RunPieces(backend, Plan(p, 0, {op}), p.bytes);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return {};
    states.push_back(std::get<std::vector<rules::PartialState>>(got->values[0]).at(0));
    if (!part.empty()) {
      EXPECT_TRUE(keeps(states.back())) << "a part's state keeps its exact sums";
    }
  }
  return states;
}

TEST(CpuExactSum, PartialStatesMergeInAnyOrderIntoTheOneRequestBits) {
  TALLY_SEEDED_RNG(rng);
  const auto backend = MakeCpuBackend({.threads = 2});
  const std::vector<double> v = IllConditioned(rng, 30000);
  const Array a = MakeArray<double>(rules::DType::kFloat64, v);
  auto whole = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kSum)}), a.bytes);
  ASSERT_TRUE(whole.ok()) << whole.status();
  const double want = OneDouble(whole->values[0]);
  // The array in random parts, each part's partial state on its own.
  OpSpec op = Op(OpKind::kSum);
  op.partial = true;
  std::vector<rules::PartialState> states =
      PartStates(*backend, rng, v, 6, op, [](const rules::PartialState& s) { return !s.exact_sum.empty(); });
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(states.begin(), states.end(), rng);
    rules::PartialState merged;
    for (const rules::PartialState& s : states) merged = rules::Merge(op, rules::DType::kFloat64, merged, s);
    EXPECT_EQ(Bits(want), Bits(rules::FinishDouble(op, rules::DType::kFloat64, merged)))
        << "merged " << merged.float_sum << ", one request " << want;
  }
}

TEST(CpuExactSum, MeansAreTheExactSumOverTheCountAndMergeSo) {
  TALLY_SEEDED_RNG(rng);
  const auto backend = MakeCpuBackend({.threads = 2});
  std::vector<double> v = IllConditioned(rng, 20000);
  v[17] = std::numeric_limits<double>::quiet_NaN();
  const Array a = MakeArray<double>(rules::DType::kFloat64, v);
  auto whole = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kNanMean)}), a.bytes, {333, 4097});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const double want = ExactOf(v, true) / static_cast<double>(v.size() - 1);
  EXPECT_EQ(Bits(want), Bits(OneDouble(whole->values[0])));
  // Two halves' partial states, merged either way round.
  OpSpec op = Op(OpKind::kNanMean);
  op.partial = true;
  std::vector<rules::PartialState> halves;
  for (const auto& [from, to] : {std::pair<std::size_t, std::size_t>{0, 12345}, {12345, v.size()}}) {
    const std::vector<double> part(v.begin() + static_cast<std::ptrdiff_t>(from),
                                   v.begin() + static_cast<std::ptrdiff_t>(to));
    const Array p = MakeArray<double>(rules::DType::kFloat64, part);
    auto got = RunPieces(*backend, Plan(p, 0, {op}), p.bytes);
    ASSERT_TRUE(got.ok()) << got.status();
    halves.push_back(std::get<std::vector<rules::PartialState>>(got->values[0]).at(0));
  }
  for (const bool swap : {false, true}) {
    const rules::PartialState m = rules::Merge(op, rules::DType::kFloat64, halves[swap ? 1 : 0], halves[swap ? 0 : 1]);
    EXPECT_EQ(Bits(want), Bits(rules::FinishDouble(op, rules::DType::kFloat64, m))) << "swapped " << swap;
  }
}

TEST(CpuExactSum, ZerosAndInfinitiesFollowIeee) {
  const auto backend = MakeCpuBackend({.threads = 1});
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::vector<double> v;
    double want;
  };
  for (const Case& c : std::vector<Case>{{{-0.0, -0.0}, -0.0},
                                         {{-0.0, 0.0}, 0.0},
                                         {{1.0, -1.0}, 0.0},
                                         {{1e308, 1e308, -1e308}, 1e308},  // no intermediate overflow
                                         {{inf, 1.0}, inf},
                                         {{-inf, 1e308, 1e308}, -inf}}) {
    const Array a = MakeArray<double>(rules::DType::kFloat64, c.v);
    auto got = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kSum)}), a.bytes);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(Bits(c.want), Bits(OneDouble(got->values[0]))) << c.v.size() << " elements, want " << c.want;
  }
}

// Exact S and Q of values (NaNs skipped when asked), as the rules hold
// them: a float64 square as x * x plus its FMA error.
struct Sums {
  ExactSum s, q;
  std::uint64_t n = 0;
};
Sums SumsOf(const std::vector<double>& values, bool skip_nan) {
  Sums out;
  for (double x : values) {
    if (skip_nan && std::isnan(x)) continue;
    out.s.Add(x);
    const double high = x * x;
    out.q.Add(high);
    if (std::isfinite(high)) out.q.AddValue(std::fma(x, x, -high));
    ++out.n;
  }
  return out;
}

// Values whose variance a float64 pass loses: a large offset, spread
// values, some of them tiny.
std::vector<double> Offset(std::mt19937_64& rng, std::size_t n, double offset) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = offset + (rng() % 7 == 0 ? std::ldexp(normal(rng), -30) : normal(rng));
  return v;
}

TEST(CpuExactMoments, VarianceStdAndSumSquaresComeFromTheExactSumsHoweverTheBytesArrive) {
  TALLY_SEEDED_RNG(rng);
  for (const std::size_t n : {std::size_t{2}, std::size_t{999}, std::size_t{150001}}) {
    std::vector<double> v = Offset(rng, n, 1e9);
    if (n > 2) v[rng() % n] = std::numeric_limits<double>::quiet_NaN();  // nanvar skips it, var is NaN
    const Array a = MakeArray<double>(rules::DType::kFloat64, v);
    const Sums all = SumsOf(v, false), valid = SumsOf(v, true);
    const double m2 = rules::ExactSecondMoment(valid.s, valid.q, valid.n);
    const double want_nanvar = m2 / (static_cast<double>(valid.n) - 1.0);
    const std::vector<OpSpec> ops = {Op(OpKind::kVariance), Op(OpKind::kNanVariance, 1.0),
                                     Op(OpKind::kNanStddev, 1.0), Op(OpKind::kSumSquares)};
    for (const int threads : {1, 2, 3}) {
      const auto backend = MakeCpuBackend({.threads = threads});
      for (const std::vector<std::uint64_t>& pieces : {std::vector<std::uint64_t>{}, {7, 4096, 3}, {65537}}) {
        auto got = RunPieces(*backend, Plan(a, 0, ops), a.bytes, pieces);
        ASSERT_TRUE(got.ok()) << got.status();
        if (n > 2) {
          EXPECT_TRUE(std::isnan(OneDouble(got->values[0]))) << n;
        } else {
          const double var = rules::ExactSecondMoment(all.s, all.q, all.n) / static_cast<double>(all.n);
          EXPECT_EQ(Bits(var), Bits(OneDouble(got->values[0]))) << n;
        }
        EXPECT_EQ(Bits(want_nanvar), Bits(OneDouble(got->values[1]))) << n << " elements, " << threads << " threads";
        EXPECT_EQ(Bits(std::sqrt(want_nanvar)), Bits(OneDouble(got->values[2]))) << n;
        EXPECT_EQ(Bits(all.q.ToDouble()), Bits(OneDouble(got->values[3]))) << n;
      }
    }
  }
}

// Float64 data at the edges of the squares' fast paths: blocks within
// 2^16 of their largest (uniform, and at that limit), offsets whose
// variance cancels, subnormals, squares whose FMA errors underflow, sums of
// squares past 2^1024 with no square overflowing, squares that overflow,
// blocks whose binade jumps from one to the next (the range pass's guess
// wrong both ways), wide and ill-conditioned values, zeros, -0.0,
// infinities and NaNs. Every op, alone and together (so the range pass
// splits the elements, the squares or both, with and without min and max),
// on one and two threads, in pieces: the exact sums' answers (SumsOf).
TEST(CpuExactMoments, Float64EdgeDataAreTheExactSumsOnEveryPath) {
  TALLY_SEEDED_RNG(rng);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::lognormal_distribution<double> wide(0.0, 12.0);
  const std::size_t n = 6 * 2048 + 777;
  auto make = [&](int kind) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double z = normal(rng);
      double& x = v[i];
      switch (kind) {
        case 0: x = uniform(rng); break;
        case 1: x = i % 97 == 0 ? std::ldexp(1.0, -16 - static_cast<int>(i % 2)) : std::ldexp(1.0, -16) + uniform(rng); break;
        case 2: x = 1e8 + 1e-3 * z; break;
        case 3: x = rng() % 10 == 0 ? std::ldexp(z, -1060) : z; break;
        case 4: x = std::ldexp(z, -470 - static_cast<int>(rng() % 30)); break;
        case 5: x = std::ldexp(1.0 + uniform(rng), 500 + static_cast<int>(rng() % 10)); break;
        case 6: x = std::ldexp(z, rng() % 1000 == 0 ? 515 : 500); break;
        case 7: x = std::ldexp(z, 20 * (static_cast<int>((i / 2048) % 3) - 1)); break;
        case 8: x = wide(rng) * ((rng() & 1) != 0 ? 1 : -1); break;
        case 9: x = (i / 2048) % 2 == 1 ? -0.0 : (i % 3 == 0 ? 0.0 : z); break;
        case 10: x = i == 5000 ? std::numeric_limits<double>::infinity() : (i == 9000 ? -1e300 : z); break;
        case 11: x = i % 1001 == 0 ? std::numeric_limits<double>::quiet_NaN() : 3.0 + z; break;
      }
    }
    if (kind == 12) v = IllConditioned(rng, n);
    return v;
  };
  auto same = [](double want, double got) { return std::isnan(want) ? std::isnan(got) : Bits(want) == Bits(got); };
  const std::vector<OpSpec> all_ops = {Op(OpKind::kSum),        Op(OpKind::kMean),          Op(OpKind::kSumSquares),
                                       Op(OpKind::kVariance),   Op(OpKind::kNanVariance, 1.0), Op(OpKind::kStddev),
                                       Op(OpKind::kNanStddev, 1.0)};
  const std::vector<std::vector<OpSpec>> plans = {
      all_ops, {Op(OpKind::kSumSquares)}, {Op(OpKind::kNanVariance, 1.0)},
      {Op(OpKind::kVariance), Op(OpKind::kMin), Op(OpKind::kMax)}};
  for (int kind = 0; kind <= 12; ++kind) {
    const std::vector<double> v = make(kind);
    const Array a = MakeArray<double>(rules::DType::kFloat64, v);
    const Sums all = SumsOf(v, false), valid = SumsOf(v, true);
    const double var = rules::ExactSecondMoment(all.s, all.q, all.n) / static_cast<double>(all.n);
    const double nanvar = rules::ExactSecondMoment(valid.s, valid.q, valid.n) / (static_cast<double>(valid.n) - 1.0);
    auto want_of = [&](const OpSpec& op) {
      switch (op.kind) {
        case OpKind::kSum: return all.s.ToDouble();
        case OpKind::kMean: return all.s.ToDouble() / static_cast<double>(all.n);
        case OpKind::kSumSquares: return all.q.ToDouble();
        case OpKind::kVariance: return var;
        case OpKind::kNanVariance: return nanvar;
        case OpKind::kStddev: return std::sqrt(var);
        case OpKind::kNanStddev: return std::sqrt(nanvar);
        default: return std::numeric_limits<double>::quiet_NaN();  // min and max: not checked here
      }
    };
    for (const int threads : {1, 2}) {
      const auto backend = MakeCpuBackend({.threads = threads});
      for (const std::vector<std::uint64_t>& pieces : {std::vector<std::uint64_t>{}, {7, 4096, 3}, {65537}}) {
        for (const std::vector<OpSpec>& ops : plans) {
          auto got = RunPieces(*backend, Plan(a, 0, ops), a.bytes, pieces);
          ASSERT_TRUE(got.ok()) << got.status();
          for (std::size_t k = 0; k < ops.size(); ++k) {
            if (ops[k].kind == OpKind::kMin || ops[k].kind == OpKind::kMax) continue;
            const double want = want_of(ops[k]), value = OneDouble(got->values[k]);
            EXPECT_TRUE(same(want, value)) << "data " << kind << ", " << rules::Name(ops[k].kind) << " of "
                                            << ops.size() << " ops, " << threads << " threads: " << value
                                            << ", want " << want;
          }
        }
      }
    }
  }
}

TEST(CpuExactMoments, Float32RowsVariancesAreExactOnEveryThreadCount) {
  TALLY_SEEDED_RNG(rng);
  const std::uint64_t rows = 23, row = 4099;
  std::vector<float> v(rows * row);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : v) x = 3e4f + normal(rng);
  const Array a = MakeArray<float>(rules::DType::kFloat32, v);
  std::vector<double> want(rows);
  for (std::uint64_t r = 0; r < rows; ++r) {
    const Sums sums = SumsOf(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(r * row),
                                                 v.begin() + static_cast<std::ptrdiff_t>((r + 1) * row)),
                             false);
    want[r] = rules::ExactSecondMoment(sums.s, sums.q, sums.n) / static_cast<double>(row);
  }
  for (const int threads : {1, 2, 5}) {
    const auto backend = MakeCpuBackend({.threads = threads});
    auto got = RunPieces(*backend, Plan(a, row, {Op(OpKind::kVariance)}), a.bytes, {1000, 77});
    ASSERT_TRUE(got.ok()) << got.status();
    const auto& vars = std::get<std::vector<double>>(got->values[0]);
    for (std::uint64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(Bits(want[r]), Bits(vars[r])) << "row " << r << ", " << threads << " threads";
    }
  }
}

TEST(CpuExactMoments, PartialStatesMergeInAnyOrderIntoTheOneRequestBits) {
  TALLY_SEEDED_RNG(rng);
  const auto backend = MakeCpuBackend({.threads = 2});
  const std::vector<double> v = Offset(rng, 40000, -3e7);
  const Array a = MakeArray<double>(rules::DType::kFloat64, v);
  for (const OpKind kind : {OpKind::kVariance, OpKind::kStddev, OpKind::kSumSquares}) {
    const OpSpec plain = Op(kind, 1.0);
    auto whole = RunPieces(*backend, Plan(a, 0, {plain}), a.bytes);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const double want = OneDouble(whole->values[0]);
    OpSpec op = plain;
    op.partial = true;
    std::vector<rules::PartialState> states = PartStates(
        *backend, rng, v, 5, op, [](const rules::PartialState& s) { return !s.exact_sum_squares.empty(); });
    for (int trial = 0; trial < 4; ++trial) {
      std::shuffle(states.begin(), states.end(), rng);
      rules::PartialState merged;
      for (const rules::PartialState& s : states) merged = rules::Merge(op, rules::DType::kFloat64, merged, s);
      EXPECT_EQ(Bits(want), Bits(rules::FinishDouble(op, rules::DType::kFloat64, merged)))
          << rules::Name(kind) << ": merged " << rules::FinishDouble(op, rules::DType::kFloat64, merged)
          << ", one request " << want;
    }
  }
}

// An integer's exact sums, taken in doubles here (the backend's are
// integer ones): x = high 2^32 + low, each part exact, and x^2 from the
// three products of the parts, each a double plus its FMA error.
template <typename V>
void AddInteger(V x, Sums& into) {
  const auto w = static_cast<__int128>(x);
  const double high = static_cast<double>(static_cast<std::int64_t>(w >> 32)) * 4294967296.0;
  const double low = static_cast<double>(static_cast<std::uint32_t>(w & 0xffffffffu));
  into.s.Add(high);
  into.s.AddValue(low);
  const double hh = high / 4294967296.0;
  for (const auto& [a, b, scale] : {std::tuple{hh, hh, 18446744073709551616.0}, std::tuple{hh, low, 2 * 4294967296.0},
                                   std::tuple{low, low, 1.0}}) {
    const double p = a * b;
    into.q.AddValue(p * scale);
    into.q.AddValue(std::fma(a, b, -p) * scale);
  }
  ++into.n;
}

template <typename V>
void ExpectExactIntegerMoments(std::mt19937_64& rng, rules::DType dtype, std::size_t n) {
  std::vector<V> v(n);
  std::uniform_int_distribution<std::uint64_t> any;
  for (V& x : v) {
    const std::uint64_t r = any(rng);
    // A fifth at each end of the range: sums past 2^53, squares past 2^127.
    x = r % 5 == 0 ? std::numeric_limits<V>::max() : r % 5 == 1 ? std::numeric_limits<V>::min() : static_cast<V>(r);
  }
  Sums sums;
  for (const V x : v) AddInteger(x, sums);
  sums.s.ForgetElements();
  sums.s.NoteElements(n, true);
  const double mean = sums.s.ToDouble() / static_cast<double>(n);
  const double m2 = rules::ExactSecondMoment(sums.s, sums.q, n);
  const Array a = MakeArray<V>(dtype, v);
  const std::vector<OpSpec> ops = {Op(OpKind::kMean), Op(OpKind::kVariance), Op(OpKind::kStddev, 1.0),
                                   Op(OpKind::kSumSquares)};
  for (const int threads : {1, 3}) {
    const auto backend = MakeCpuBackend({.threads = threads});
    for (const std::vector<std::uint64_t>& pieces : {std::vector<std::uint64_t>{}, {7, 4096, 3}}) {
      auto got = RunPieces(*backend, Plan(a, 0, ops), a.bytes, pieces);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::string at = std::string(rules::Name(dtype)) + ", " + std::to_string(n) + " elements";
      EXPECT_EQ(Bits(mean), Bits(OneDouble(got->values[0]))) << at;
      EXPECT_EQ(Bits(m2 / static_cast<double>(n)), Bits(OneDouble(got->values[1]))) << at;
      EXPECT_EQ(Bits(std::sqrt(m2 / static_cast<double>(n - 1))), Bits(OneDouble(got->values[2]))) << at;
      EXPECT_EQ(Bits(sums.q.ToDouble()), Bits(OneDouble(got->values[3]))) << at;
    }
  }
}

TEST(CpuExactMoments, IntegerMeansVariancesAndSumSquaresComeFromExactSums) {
  TALLY_SEEDED_RNG(rng);
  for (const std::size_t n : {std::size_t{2}, std::size_t{70001}}) {
    ExpectExactIntegerMoments<std::int64_t>(rng, rules::DType::kInt64, n);
    ExpectExactIntegerMoments<std::uint64_t>(rng, rules::DType::kUInt64, n);
    ExpectExactIntegerMoments<std::int32_t>(rng, rules::DType::kInt32, n);
    ExpectExactIntegerMoments<std::uint32_t>(rng, rules::DType::kUInt32, n);
    ExpectExactIntegerMoments<std::int8_t>(rng, rules::DType::kInt8, n);
    ExpectExactIntegerMoments<std::uint16_t>(rng, rules::DType::kUInt16, n);
  }
}

}  // namespace
}  // namespace tally::testing
