// The sketch states (tally/rules/agg/hll_state.h, ddsketch_state.h,
// distinct_state.h) and mode's (rules/src/agg/sketch_states.cc) against
// exact references and their error bounds, and
// their merge: any split of a row, merged in any order, through bytes or
// not, gives the bytes of the whole row.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tally/rules/agg/hll_state.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/state.h"
#include "test_seed.h"

namespace tally::rules::agg {
namespace {

using Rng = std::mt19937_64;
using Mask = std::vector<std::uint32_t>;  // validity bits, one per element; empty: all valid

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kHeaderBytes = 4 + 2 + 2 + 1 + 8;  // state.h's PutHeader

template <typename T>
Elements Block(const std::vector<T>& v, const Mask& mask, std::uint64_t begin, std::uint64_t end) {
  return Elements{.data = reinterpret_cast<const std::byte*>(v.data() + begin), .count = end - begin, .first = begin,
                  .valid = mask.empty() ? nullptr : mask.data(), .valid_bit = begin};
}

bool IsValid(const Mask& mask, std::size_t i) { return mask.empty() || ((mask[i >> 5] >> (i & 31)) & 1u) != 0; }

Mask RandomMask(std::size_t n, Rng& rng) {
  Mask mask((n + 31) / 32);
  for (auto& w : mask) w = static_cast<std::uint32_t>(rng());
  return mask;
}

std::uint64_t Uniform(Rng& rng, std::uint64_t lo, std::uint64_t hi) {
  return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
}

std::unique_ptr<State> Init(const OpSpec& op, DType dtype) { return Of(op.kind).state->Init(op, dtype); }

std::string Bytes(State& s) {
  std::string out;
  s.Serialize(out);
  return out;
}

template <typename T>
std::unique_ptr<State> Whole(const OpSpec& op, DType dtype, const std::vector<T>& v, const Mask& mask = {}) {
  std::unique_ptr<State> s = Init(op, dtype);
  s->Update(Block(v, mask, 0, v.size()));
  return s;
}

RowAnswer Answer(State& s) {
  RowAnswer out;
  EXPECT_EQ(s.Finalize(out), std::nullopt);
  return out;
}

// The row cut at random places into 2 to 8 parts, each part updated in two
// blocks and about half of them read back from their bytes, then merged two
// at a time in a random order.
template <typename T>
std::string MergedBytes(const OpSpec& op, DType dtype, const std::vector<T>& v, const Mask& mask, Rng& rng) {
  const std::uint64_t parts = Uniform(rng, 2, 8);
  std::vector<std::uint64_t> cuts{0, v.size()};
  for (std::uint64_t i = 1; i < parts; ++i) cuts.push_back(Uniform(rng, 0, v.size()));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::unique_ptr<State>> states;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    std::unique_ptr<State> s = Init(op, dtype);
    const std::uint64_t mid = Uniform(rng, cuts[i], cuts[i + 1]);
    s->Update(Block(v, mask, cuts[i], mid));
    s->Update(Block(v, mask, mid, cuts[i + 1]));
    if (rng() & 1) {
      std::unique_ptr<State> read = Init(op, dtype);
      EXPECT_EQ(read->Deserialize(Bytes(*s)), std::nullopt);
      s = std::move(read);
    }
    states.push_back(std::move(s));
  }
  while (states.size() > 1) {
    const std::size_t i = Uniform(rng, 0, states.size() - 1);
    std::size_t j = Uniform(rng, 0, states.size() - 2);
    if (j >= i) ++j;
    states[i]->Combine(*states[j]);
    states.erase(states.begin() + static_cast<std::ptrdiff_t>(j));
  }
  return Bytes(*states[0]);
}

OpSpec Hll(std::uint32_t precision) {
  OpSpec op;
  op.kind = OpKind::kHll;
  op.precision = precision;
  return op;
}

OpSpec DdSketch(double alpha, std::vector<double> q = {}) {
  OpSpec op;
  op.kind = OpKind::kDdSketch;
  op.relative_accuracy = alpha;
  op.q = std::move(q);
  return op;
}

OpSpec CountDistinct() {
  OpSpec op;
  op.kind = OpKind::kCountDistinct;
  return op;
}

OpSpec Mode() {
  OpSpec op;
  op.kind = OpKind::kMode;
  return op;
}

// `distinct` different int64 values, each once, then as many repeats of
// them, shuffled.
std::vector<std::int64_t> WithRepeats(std::uint64_t distinct, Rng& rng) {
  std::vector<std::int64_t> v;
  const std::uint64_t offset = rng();
  for (std::uint64_t i = 0; i < distinct; ++i) v.push_back(static_cast<std::int64_t>(offset + i * 7919));
  for (std::uint64_t i = 0; i < distinct; ++i) v.push_back(v[Uniform(rng, 0, distinct - 1)]);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

TEST(HllState, ExactWhileSparseAndDensePastAQuarterOfTheRegisters) {
  TALLY_SEEDED_RNG(rng);
  for (const std::uint32_t p : {4u, 9u, 14u}) {
    const std::uint64_t limit = (std::uint64_t{1} << p) / 4;
    for (const std::uint64_t n : {std::uint64_t{1}, limit / 2 + 1, limit - 1, limit, limit + 1}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " distinct=" << n);
      std::unique_ptr<State> s = Whole(Hll(p), DType::kInt64, WithRepeats(n, rng));
      const std::string bytes = Bytes(*s);
      ASSERT_GT(bytes.size(), kHeaderBytes);
      const bool dense = n > limit;
      EXPECT_EQ(bytes[kHeaderBytes], dense ? hll_detail::kDense : hll_detail::kSparse);
      EXPECT_EQ(bytes.size(), kHeaderBytes + 1 + (dense ? (std::size_t{1} << p) : 8 + 8 * n));
      if (!dense) {
        EXPECT_EQ(Answer(*s).uint64s, std::vector<std::uint64_t>{n});
      }
    }
  }
  // NaN once, -0.0 as 0.0, masked-out elements not at all.
  const std::vector<double> v{1.0, kNan, -0.0, 0.0, -kNan, 1.0, 7.0, 8.0};
  Mask mask{0b01111111};  // 8.0 masked out
  EXPECT_EQ(Answer(*Whole(Hll(10), DType::kFloat64, v, mask)).uint64s, std::vector<std::uint64_t>{4});
  // So too in float32's 32-bit identities, NaN of other payloads included.
  const std::vector<float> f{1.0f, std::nanf(""), -0.0f, 0.0f, -std::nanf("7"), 1.0f, 7.0f, 8.0f};
  EXPECT_EQ(Answer(*Whole(Hll(10), DType::kFloat32, f, mask)).uint64s, std::vector<std::uint64_t>{4});
  EXPECT_EQ(Answer(*Init(Hll(10), DType::kFloat64)).uint64s, std::vector<std::uint64_t>{0});
}

TEST(HllState, MergedStatesAreBitwiseTheWholeRows) {
  TALLY_SEEDED_RNG(rng);
  for (const std::uint32_t p : {4u, 8u, 12u}) {
    const std::uint64_t limit = (std::uint64_t{1} << p) / 4;
    // Around the sparse limit (parts sparse, the union dense), and far past it.
    for (const std::uint64_t n : {limit - 1, limit, limit + 1, limit + 2, 3 * limit, 40 * limit}) {
      SCOPED_TRACE(::testing::Message() << "p=" << p << " distinct=" << n);
      const std::vector<std::int64_t> v = WithRepeats(n, rng);
      const std::string whole = Bytes(*Whole(Hll(p), DType::kInt64, v));
      for (int trial = 0; trial < 6; ++trial) ASSERT_EQ(MergedBytes(Hll(p), DType::kInt64, v, {}, rng), whole);
    }
  }
  std::vector<float> v(30000);
  for (float& x : v) x = static_cast<float>(std::normal_distribution<double>()(rng));
  for (int i = 0; i < 50; ++i) v[Uniform(rng, 0, v.size() - 1)] = (i & 1) ? std::nanf("") : -0.0f;
  const Mask mask = RandomMask(v.size(), rng);
  const std::string whole = Bytes(*Whole(Hll(11), DType::kFloat32, v, mask));
  for (int trial = 0; trial < 6; ++trial) ASSERT_EQ(MergedBytes(Hll(11), DType::kFloat32, v, mask, rng), whole);
}

// p = 12: standard error sigma = 1.04 / sqrt(4096) = 1.6% (measured: about
// 1.55%). With fresh seeds each run, a bound of 3 sigma on each of 120
// estimates would fail about one run in five; so each estimate is held to
// 5 sigma, at most two of a cardinality's 20 beyond 3 sigma, and their mean
// and root mean square to 1 and 1.75 sigma (by chance, a run fails less
// than once in 10^4).
TEST(HllState, DenseErrorIsWithinTheStandardErrorAtPrecision12) {
  TALLY_SEEDED_RNG(rng);
  constexpr std::uint32_t p = 12;
  const double sigma = 1.04 / std::sqrt(4096.0);
  constexpr int kSeeds = 20;
  for (const bool zipf : {false, true}) {
    for (const std::uint64_t distinct : {10000ull, 100000ull, 1000000ull}) {
      SCOPED_TRACE(::testing::Message() << (zipf ? "zipf-like" : "uniform") << " distinct=" << distinct);
      double sum = 0, sum2 = 0, worst = 0;
      int beyond3 = 0;
      for (int seed = 0; seed < kSeeds; ++seed) {
        std::unique_ptr<State> s;
        std::uint64_t exact = distinct;
        if (!zipf) {
          // Distinct ids: an arithmetic progression with an odd step, from a
          // random start.
          std::vector<std::int64_t> v(distinct);
          const std::uint64_t start = rng(), step = rng() | 1;
          for (std::uint64_t i = 0; i < distinct; ++i) v[i] = static_cast<std::int64_t>(start + i * step);
          s = Whole(Hll(p), DType::kInt64, v);
        } else {
          // Value i of a random pool repeated about distinct / (10 (i + 1))
          // times: a few values make most of the row.
          std::vector<double> pool(distinct), v;
          std::lognormal_distribution<double> lognormal(0, 4);
          for (double& x : pool) x = lognormal(rng);
          for (std::uint64_t i = 0; i < distinct; ++i) v.insert(v.end(), 1 + distinct / (10 * (i + 1)), pool[i]);
          std::shuffle(v.begin(), v.end(), rng);
          std::sort(pool.begin(), pool.end());
          exact = static_cast<std::uint64_t>(std::unique(pool.begin(), pool.end()) - pool.begin());
          s = Whole(Hll(p), DType::kFloat64, v);
        }
        const double err = (static_cast<double>(Answer(*s).uint64s.at(0)) - static_cast<double>(exact)) /
                           static_cast<double>(exact);
        EXPECT_LE(std::fabs(err), 5 * sigma);
        beyond3 += std::fabs(err) > 3 * sigma;
        sum += err;
        sum2 += err * err;
        worst = std::max(worst, std::fabs(err));
      }
      const double mean = sum / kSeeds, rms = std::sqrt(sum2 / kSeeds);
      EXPECT_LE(beyond3, 2);
      EXPECT_LT(std::fabs(mean), sigma);
      EXPECT_LT(rms, 1.75 * sigma);
      std::cout << "hll p=12 " << (zipf ? "zipf-like" : "uniform  ") << " n=" << distinct << ": mean error "
                << 100 * mean << "%, rms " << 100 * rms << "%, worst " << 100 * worst << "% (sigma "
                << 100 * sigma << "%)\n";
    }
  }
}

// The element at sorted position floor(q (n - 1)) of the non-NaN valid
// elements, as quantile(method="lower") takes it.
double Lower(std::vector<double> v, double q) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  const auto rank = static_cast<std::size_t>(std::floor(static_cast<double>(v.size() - 1) * q));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank), v.end());
  return v[rank];
}

TEST(DdSketchState, EveryQuantileIsWithinTheRelativeAccuracy) {
  TALLY_SEEDED_RNG(rng);
  const std::vector<double> qs{0, 0.01, 0.25, 0.5, 0.9, 0.99, 1};
  for (const double alpha : {0.01, 0.05}) {
    double worst = 0;
    for (const char* kind : {"uniform", "lognormal", "mixed-sign", "int64", "float32"}) {
      for (const std::uint64_t n : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{7}, 20000 + Uniform(rng, 0, 1000)}) {
        SCOPED_TRACE(::testing::Message() << kind << " n=" << n << " alpha=" << alpha);
        std::vector<double> v(n);
        const std::string k = kind;
        for (double& x : v) {
          if (k == "uniform") x = std::uniform_real_distribution<double>(0, 1000)(rng);
          if (k == "lognormal" || k == "float32") x = std::lognormal_distribution<double>(0, 3)(rng);
          if (k == "mixed-sign") {
            x = ((rng() & 1) ? 1 : -1) * std::pow(10.0, std::uniform_real_distribution<double>(-12, 12)(rng));
            if (Uniform(rng, 0, 20) == 0) x = (rng() & 1) ? 0.0 : -1e-305;  // the zero bucket
          }
          if (k == "int64") x = static_cast<double>(Uniform(rng, 0, 2000000)) - 1e6;
          if (k == "float32") x = static_cast<double>(static_cast<float>(x));
        }
        std::unique_ptr<State> s;
        if (k == "int64") {
          std::vector<std::int64_t> w(v.begin(), v.end());
          s = Whole(DdSketch(alpha, qs), DType::kInt64, w);
        } else if (k == "float32") {
          std::vector<float> w(v.begin(), v.end());
          s = Whole(DdSketch(alpha, qs), DType::kFloat32, w);
        } else {
          s = Whole(DdSketch(alpha, qs), DType::kFloat64, v);
        }
        const RowAnswer a = Answer(*s);
        ASSERT_EQ(a.doubles.size(), qs.size());
        for (std::size_t j = 0; j < qs.size(); ++j) {
          const double x = Lower(v, qs[j]);
          if (std::fabs(x) < 0x1p-1000) {
            EXPECT_EQ(a.doubles[j], 0.0) << "q=" << qs[j] << " x=" << x;
            continue;
          }
          EXPECT_LE(std::fabs(a.doubles[j] - x), alpha * std::fabs(x)) << "q=" << qs[j] << " x=" << x;
          worst = std::max(worst, std::fabs(a.doubles[j] - x) / std::fabs(x));
        }
      }
    }
    std::cout << "ddsketch alpha=" << alpha << ": worst relative error " << worst << "\n";
  }
}

TEST(DdSketchState, NanIsSkippedInfinityIsExactAndAnEmptyRowIsNan) {
  const std::vector<double> v{3, kNan, -kInf, 1, kInf, 2, -0.0, kNan};
  const RowAnswer a = Answer(*Whole(DdSketch(0.01, {0, 0.2, 0.5, 1}), DType::kFloat64, v));
  // Sorted non-NaN: -inf, -0, 1, 2, 3, inf; lower positions 0, 1, 2, 5.
  ASSERT_EQ(a.doubles.size(), 4u);
  EXPECT_EQ(a.doubles[0], -kInf);
  EXPECT_EQ(a.doubles[1], 0.0);
  EXPECT_NEAR(a.doubles[2], 1.0, 0.01);
  EXPECT_EQ(a.doubles[3], kInf);
  // No q: the median, q = 0.5.
  EXPECT_EQ(Answer(*Whole(DdSketch(0.01), DType::kFloat64, v)).doubles.size(), 1u);
  for (const std::vector<double>& none : {std::vector<double>{}, std::vector<double>{kNan, kNan}}) {
    const RowAnswer e = Answer(*Whole(DdSketch(0.05, {0.1, 0.9}), DType::kFloat64, none));
    ASSERT_EQ(e.doubles.size(), 2u);
    EXPECT_TRUE(std::isnan(e.doubles[0]) && std::isnan(e.doubles[1]));
  }
  // The largest finite values map into the top bucket, not to infinity.
  const double big = std::numeric_limits<double>::max();
  const RowAnswer b = Answer(*Whole(DdSketch(0.001, {1}), DType::kFloat64, std::vector<double>{-big, big}));
  EXPECT_LE(std::fabs(b.doubles[0] - big), 0.001 * big);
}

TEST(DdSketchState, MergedStatesAreBitwiseTheWholeRows) {
  TALLY_SEEDED_RNG(rng);
  std::vector<double> v(40000);
  for (double& x : v) x = std::normal_distribution<double>()(rng) * std::exp(std::normal_distribution<double>(0, 5)(rng));
  for (int i = 0; i < 60; ++i) v[Uniform(rng, 0, v.size() - 1)] = std::array{kNan, kInf, -kInf, 0.0, -0.0}[i % 5];
  const Mask mask = RandomMask(v.size(), rng);
  const OpSpec op = DdSketch(0.01, {0.5, 0.99});
  const std::string whole = Bytes(*Whole(op, DType::kFloat64, v, mask));
  for (int trial = 0; trial < 10; ++trial) ASSERT_EQ(MergedBytes(op, DType::kFloat64, v, mask, rng), whole);
  std::vector<std::int32_t> w(5000);
  for (auto& x : w) x = static_cast<std::int32_t>(Uniform(rng, 0, 200000)) - 100000;
  const std::string whole_w = Bytes(*Whole(DdSketch(0.05), DType::kInt32, w));
  for (int trial = 0; trial < 10; ++trial) ASSERT_EQ(MergedBytes(DdSketch(0.05), DType::kInt32, w, {}, rng), whole_w);
}

TEST(CountDistinctState, EqualsASetOfTheValidValues) {
  TALLY_SEEDED_RNG(rng);
  // A small pool, so values repeat: NaN of several payloads, both zeros.
  const std::vector<double> pool{kNan, -kNan, std::nan("7"), -0.0, 0.0, 1.0, -1.0, kInf, -kInf, 1e-310, 0.1, 2.5};
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> v(Uniform(rng, 0, 3000));
    for (double& x : v) x = (rng() % 3 == 0) ? pool[Uniform(rng, 0, pool.size() - 1)] : static_cast<double>(Uniform(rng, 0, 500));
    const Mask mask = RandomMask(v.size(), rng);
    std::set<double> reference;  // -0.0 and 0.0 are one key of it
    bool nan = false;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!IsValid(mask, i)) continue;
      if (std::isnan(v[i])) {
        nan = true;
      } else {
        reference.insert(v[i]);
      }
    }
    EXPECT_EQ(Answer(*Whole(CountDistinct(), DType::kFloat64, v, mask)).uint64s,
              std::vector<std::uint64_t>{reference.size() + nan});
    EXPECT_EQ(MergedBytes(CountDistinct(), DType::kFloat64, v, mask, rng),
              Bytes(*Whole(CountDistinct(), DType::kFloat64, v, mask)));
  }
  std::vector<std::int8_t> small(10000);
  for (auto& x : small) x = static_cast<std::int8_t>(rng());
  const std::set<std::int8_t> seen(small.begin(), small.end());
  EXPECT_EQ(Answer(*Whole(CountDistinct(), DType::kInt8, small)).uint64s, std::vector<std::uint64_t>{seen.size()});
  std::vector<std::uint64_t> wide(50000);
  for (auto& x : wide) x = rng() % 20000 * 0x9e3779b97f4a7c15ull;
  const std::set<std::uint64_t> wide_seen(wide.begin(), wide.end());
  std::unique_ptr<State> w = Whole(CountDistinct(), DType::kUInt64, wide);
  EXPECT_EQ(Answer(*w).uint64s, std::vector<std::uint64_t>{wide_seen.size()});
  EXPECT_EQ(MergedBytes(CountDistinct(), DType::kUInt64, wide, {}, rng), Bytes(*w));
  // Tails long enough for the radix sort (2^16 and more), values differing
  // in every 16-bit digit, repeats within the tail and across merges.
  std::vector<std::uint64_t> long_tail(700000);
  for (auto& x : long_tail) x = (rng() % 300000) * 0x9e3779b97f4a7c15ull;
  const std::set<std::uint64_t> long_seen(long_tail.begin(), long_tail.end());
  std::unique_ptr<State> l = Whole(CountDistinct(), DType::kUInt64, long_tail);
  EXPECT_EQ(Answer(*l).uint64s, std::vector<std::uint64_t>{long_seen.size()});
  EXPECT_EQ(MergedBytes(CountDistinct(), DType::kUInt64, long_tail, {}, rng), Bytes(*l));
  std::string sorted;  // the serialized set is the reference set, in order
  for (const std::uint64_t x : long_seen) sorted.append(reinterpret_cast<const char*>(&x), sizeof(x));
  EXPECT_NE(Bytes(*l).find(sorted), std::string::npos);
}

// pandas' Series.mode()[0]: the smallest of the most frequent valid values,
// NaN left out, -0.0 counted as 0.0; NaN when no valid value is a number.
template <typename T, typename Key = T>
Key ModeOf(const std::vector<T>& v, const Mask& mask) {
  std::map<Key, std::uint64_t> counts;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!IsValid(mask, i)) continue;
    const Key x = static_cast<Key>(v[i]);
    if (x != x) continue;
    ++counts[x == 0 ? Key{0} : x];
  }
  if (counts.empty()) return std::numeric_limits<Key>::quiet_NaN();
  auto best = counts.begin();
  for (auto it = counts.begin(); it != counts.end(); ++it) {
    if (it->second > best->second) best = it;
  }
  return best->first;
}

TEST(ModeState, IsTheSmallestMostFrequentValidValue) {
  TALLY_SEEDED_RNG(rng);
  // A small pool, so values tie often: NaN of several payloads, both zeros,
  // negatives (whose bits sort the other way), infinities, subnormals.
  const std::vector<double> pool{kNan, -kNan, std::nan("7"), -0.0, 0.0, 1.0, -1.0, -2.0, kInf, -kInf, 1e-310, -1e-310};
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<double> v(Uniform(rng, 1, 4000));
    for (double& x : v) x = (rng() % 2 == 0) ? pool[Uniform(rng, 0, pool.size() - 1)] : -static_cast<double>(Uniform(rng, 0, 30));
    const Mask mask = trial % 2 == 0 ? Mask{} : RandomMask(v.size(), rng);
    std::unique_ptr<State> whole = Whole(Mode(), DType::kFloat64, v, mask);
    RowAnswer got;
    if (const std::optional<std::string> none = whole->Finalize(got)) {
      for (std::size_t i = 0; i < v.size(); ++i) EXPECT_FALSE(IsValid(mask, i)) << "a valid element, yet: " << *none;
      continue;
    }
    ASSERT_EQ(got.doubles.size(), 1u);
    const double want = ModeOf(v, mask);
    EXPECT_TRUE(std::bit_cast<std::uint64_t>(got.doubles[0]) == std::bit_cast<std::uint64_t>(want) ||
                (std::isnan(want) && std::isnan(got.doubles[0])))
        << got.doubles[0] << " against " << want;
    EXPECT_EQ(MergedBytes(Mode(), DType::kFloat64, v, mask, rng), Bytes(*Whole(Mode(), DType::kFloat64, v, mask)));
  }
  // Rows whose valid elements are all NaN (the draws above make them only
  // now and then): NaN, as pandas' mode of no number has none.
  for (const std::vector<double>& only_nan : {std::vector<double>{kNan}, std::vector<double>{kNan, -kNan, 1.0}}) {
    const Mask first_two = {0b011};
    const RowAnswer a = Answer(*Whole(Mode(), DType::kFloat64, only_nan, only_nan.size() == 1 ? Mask{} : first_two));
    ASSERT_EQ(a.doubles.size(), 1u);
    EXPECT_TRUE(std::isnan(a.doubles[0]));
  }
  // Integers: signed (negative keys), unsigned across the top bit, and one
  // pass over more values than a block (the counts folded several times).
  std::vector<std::int8_t> small(100000);
  for (auto& x : small) x = static_cast<std::int8_t>(static_cast<int>(Uniform(rng, 0, 255)) - 128);
  EXPECT_EQ(Answer(*Whole(Mode(), DType::kInt8, small)).int64s, (std::vector<std::int64_t>{ModeOf<std::int8_t, std::int64_t>(small, {})}));
  std::vector<std::uint64_t> wide(60000);
  for (auto& x : wide) x = rng() % 3000 * 0x9e3779b97f4a7c15ull;
  std::unique_ptr<State> w = Whole(Mode(), DType::kUInt64, wide);
  EXPECT_EQ(Answer(*w).uint64s, std::vector<std::uint64_t>{ModeOf(wide, {})});
  EXPECT_EQ(MergedBytes(Mode(), DType::kUInt64, wide, {}, rng), Bytes(*w));
  // Ties go to the smallest value: -3 before 5 and 7, each twice.
  const std::vector<std::int32_t> tied{7, 5, -3, 7, 5, -3};
  EXPECT_EQ(Answer(*Whole(Mode(), DType::kInt32, tied)).int64s, std::vector<std::int64_t>{-3});
  // Only NaN: NaN. No element: no answer, a sentence naming the function.
  const RowAnswer nan = Answer(*Whole(Mode(), DType::kFloat32, std::vector<float>{NAN, NAN}));
  ASSERT_EQ(nan.doubles.size(), 1u);
  EXPECT_TRUE(std::isnan(nan.doubles[0]));
  RowAnswer none;
  const std::optional<std::string> why = Init(Mode(), DType::kFloat64)->Finalize(none);
  ASSERT_NE(why, std::nullopt);
  EXPECT_NE(why->find("mode"), std::string::npos) << *why;
}

// Every refusal is a sentence about the field function_state.
void ExpectRefused(State& s, std::string_view bytes) {
  const std::optional<std::string> why = s.Deserialize(bytes);
  ASSERT_NE(why, std::nullopt);
  EXPECT_NE(why->find("function_state"), std::string::npos) << *why;
}

TEST(SketchStates, DeserializeRefusesOtherParamsDtypesFunctionsAndTruncatedBytes) {
  TALLY_SEEDED_RNG(rng);
  std::vector<double> v(5000);
  for (double& x : v) x = std::normal_distribution<double>()(rng);
  const OpSpec ops[] = {Hll(6), Hll(16), DdSketch(0.01), CountDistinct(), Mode()};  // Hll(6) dense, Hll(16) sparse
  const OpSpec others[] = {Hll(7), Hll(17), DdSketch(0.02), CountDistinct(), Mode()};
  for (std::size_t i = 0; i < std::size(ops); ++i) {
    const OpSpec& op = ops[i];
    SCOPED_TRACE(Of(op.kind).name);
    const std::string bytes = Bytes(*Whole(op, DType::kFloat64, v));
    EXPECT_EQ(Init(op, DType::kFloat64)->Deserialize(bytes), std::nullopt);
    if (op.kind != OpKind::kCountDistinct && op.kind != OpKind::kMode) {
      ExpectRefused(*Init(others[i], DType::kFloat64), bytes);
    }
    ExpectRefused(*Init(op, DType::kFloat32), bytes);
    for (const OpSpec& other : ops) {
      if (other.kind != op.kind) ExpectRefused(*Init(other, DType::kFloat64), bytes);
    }
    for (const std::size_t keep : {std::size_t{0}, kHeaderBytes - 1, kHeaderBytes + 3, bytes.size() / 2, bytes.size() - 1}) {
      ExpectRefused(*Init(op, DType::kFloat64), std::string_view(bytes).substr(0, keep));
    }
    ExpectRefused(*Init(op, DType::kFloat64), bytes + "x");
  }
  // hll states of the earlier hash (forms 0 and 1), refused as such.
  for (const OpSpec& op : {Hll(6), Hll(16)}) {
    std::string earlier = Bytes(*Whole(op, DType::kFloat64, v));
    for (const std::uint8_t form : {0, 1}) {
      earlier[kHeaderBytes] = static_cast<char>(form);
      const std::optional<std::string> why = Init(op, DType::kFloat64)->Deserialize(earlier);
      ASSERT_NE(why, std::nullopt);
      EXPECT_NE(why->find("earlier tally build"), std::string::npos) << *why;
    }
  }
  // Contents Serialize never writes: a rank past 64 - p + 1, unsorted sets.
  std::string dense = Bytes(*Whole(Hll(6), DType::kFloat64, v));
  dense[kHeaderBytes + 1 + 5] = 60;
  ExpectRefused(*Init(Hll(6), DType::kFloat64), dense);
  std::string set = Bytes(*Whole(CountDistinct(), DType::kFloat64, v));
  std::swap_ranges(set.begin() + kHeaderBytes + 8, set.begin() + kHeaderBytes + 16, set.begin() + kHeaderBytes + 16);
  ExpectRefused(*Init(CountDistinct(), DType::kFloat64), set);
  std::string counts = Bytes(*Whole(Mode(), DType::kFloat64, v));
  std::swap_ranges(counts.begin() + kHeaderBytes + 16, counts.begin() + kHeaderBytes + 32,
                   counts.begin() + kHeaderBytes + 32);
  ExpectRefused(*Init(Mode(), DType::kFloat64), counts);
}

// 4-byte dtypes keep 32-bit identities and write CanonicalBits: the
// serialized set is the sorted CanonicalBits of the distinct values, as the
// 8-byte dtypes write theirs; a set holding bits no float32 has is refused.
TEST(CountDistinctState, NarrowDtypesWriteTheWideIdentities) {
  TALLY_SEEDED_RNG(rng);
  std::vector<float> f(200000);
  const float pool[] = {-0.0f, 0.0f, std::nanf(""), -std::nanf("3"), 1e-40f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  for (float& x : f) x = rng() % 4 == 0 ? pool[rng() % 7] : static_cast<float>(static_cast<int>(rng() % 150000) - 75000) / 8;
  std::vector<std::int32_t> i(200000);
  for (auto& x : i) x = static_cast<std::int32_t>(rng() % 300000) - 150000;
  const auto check = [&](auto& v, DType dtype, const char* what) {
    std::set<std::uint64_t> ids;
    for (const auto x : v) ids.insert(CanonicalBits(x));
    std::unique_ptr<State> whole = Whole(CountDistinct(), dtype, v);
    EXPECT_EQ(Answer(*whole).uint64s, std::vector<std::uint64_t>{ids.size()}) << what;
    const std::string bytes = Bytes(*whole);
    std::string sorted;
    for (const std::uint64_t b : ids) sorted.append(reinterpret_cast<const char*>(&b), sizeof(b));
    ASSERT_GE(bytes.size(), sorted.size()) << what;
    EXPECT_EQ(bytes.substr(bytes.size() - sorted.size()), sorted) << what;
    EXPECT_EQ(MergedBytes(CountDistinct(), dtype, v, {}, rng), bytes) << what;
    std::unique_ptr<State> read = Init(CountDistinct(), dtype);
    ASSERT_EQ(read->Deserialize(bytes), std::nullopt) << what;
    EXPECT_EQ(Bytes(*read), bytes) << what;
  };
  check(f, DType::kFloat32, "float32");
  check(i, DType::kInt32, "int32");
  // The largest identity replaced by a larger float64 that is no float32.
  std::string bad = Bytes(*Whole(CountDistinct(), DType::kFloat32, std::vector<float>{1.0f, 2.0f}));
  const std::uint64_t wide = std::bit_cast<std::uint64_t>(2.1);
  std::memcpy(bad.data() + bad.size() - sizeof(wide), &wide, sizeof(wide));
  ExpectRefused(*Init(CountDistinct(), DType::kFloat32), bad);
}

}  // namespace
}  // namespace tally::rules::agg
