// Helpers for the CPU backend's tests: random arrays of every dtype (seeded
// by TALLY_SEEDED_RNG, test_seed.h), a driver that feeds the Backend
// interface in chosen pieces, and plain references computed in higher
// precision (long double, __int128, searchsorted over the edges).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/host_runs.h"
#include "tally/rules/dtype.h"
#include "tests/unit/test_seed.h"

namespace tally::rules {
// Test names and messages show "float32", not a byte.
inline void PrintTo(DType t, std::ostream* os) { *os << Name(t); }
}  // namespace tally::rules

namespace tally::testing {

using rules::DType;

struct Array {
  DType dtype = DType::kFloat32;
  std::uint64_t length = 0;
  std::vector<std::byte> bytes;

  template <typename V>
  std::span<const V> As() const {
    return {reinterpret_cast<const V*>(bytes.data()), length};
  }
};

template <typename V>
Array MakeArray(DType dtype, const std::vector<V>& values) {
  Array a{dtype, values.size(), std::vector<std::byte>(values.size() * sizeof(V))};
  if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

// kWide: floats uniform in [-1000, 1000], integers over their whole range
// (so sums overflow and wrap). kNarrow: small integers, as the dtype, so
// extremes repeat (ties).
enum class Fill { kWide, kNarrow };

template <typename V>
std::vector<V> RandomValues(std::uint64_t n, std::mt19937_64& rng, Fill fill) {
  std::vector<V> v(n);
  if (fill == Fill::kNarrow) {
    std::uniform_int_distribution<int> d(std::is_signed_v<V> ? -5 : 0, 9);
    for (V& x : v) x = static_cast<V>(d(rng));
  } else if constexpr (rules::kIsFloatValue<V>) {
    std::uniform_real_distribution<double> d(-1000.0, 1000.0);
    for (V& x : v) x = static_cast<V>(d(rng));
  } else {
    using Wide = std::conditional_t<std::is_signed_v<V>, std::int64_t, std::uint64_t>;
    std::uniform_int_distribution<Wide> d(std::numeric_limits<V>::lowest(), std::numeric_limits<V>::max());
    for (V& x : v) x = static_cast<V>(d(rng));
  }
  return v;
}

inline Array RandomArray(DType dtype, std::uint64_t n, std::mt19937_64& rng, Fill fill) {
  if (dtype == DType::kBool) {  // numpy's bool_: bytes of 0 and 1
    std::vector<std::uint8_t> v(n);
    for (std::uint8_t& x : v) x = static_cast<std::uint8_t>(rng() & 1);
    return MakeArray(dtype, v);
  }
  return rules::VisitDType(dtype, [&](auto dt) {
    using V = typename rules::Traits<decltype(dt)::value>::value;
    return MakeArray(dtype, RandomValues<V>(n, rng, fill));
  });
}

// Runs `plan` over `a`, handing Consume() pieces of the given element counts
// in turn (repeating the list) or the whole array when `pieces` is empty.
inline absl::StatusOr<AggregationResult> RunPieces(Backend& backend, const AggregationPlan& plan,
                                                   std::span<const std::byte> bytes,
                                                   const std::vector<std::uint64_t>& pieces = {}) {
  auto reduction = backend.Start(plan);
  if (!reduction.ok()) return reduction.status();
  const std::size_t size = rules::SizeOf(plan.array.dtype);
  std::size_t off = 0, k = 0;
  while (off < bytes.size()) {
    std::size_t len = bytes.size() - off;
    if (!pieces.empty()) len = std::min<std::size_t>(len, pieces[k++ % pieces.size()] * size);
    if (absl::Status s = (*reduction)->Consume(bytes.subspan(off, len)); !s.ok()) return s;
    off += len;
  }
  return (*reduction)->Finish();
}

inline AggregationPlan Plan(const Array& a, std::uint64_t row_length, std::vector<OpSpec> ops) {
  return {ArraySpec{a.dtype, a.length, row_length}, std::move(ops)};
}

inline OpSpec Op(OpKind k, double ddof = 0.0) { return {.kind = k, .ddof = ddof}; }
inline OpSpec Hist(std::uint32_t bins, double lo, double hi) {
  return {.kind = OpKind::kHistogram, .histogram = {bins, lo, hi}};
}

// Bitwise equality of two results (NaN equal to the same NaN).
inline bool SameBits(const OpValues& a, const OpValues& b) {
  if (a.index() != b.index()) return false;
  if (const auto* da = std::get_if<std::vector<double>>(&a)) {
    const auto& db = std::get<std::vector<double>>(b);
    if (da->size() != db.size()) return false;
    for (std::size_t i = 0; i < da->size(); ++i) {
      if (std::bit_cast<std::uint64_t>((*da)[i]) != std::bit_cast<std::uint64_t>(db[i])) return false;
    }
    return true;
  }
  return a == b;
}

// Row `row` of `v`, as a one-row result of the same kind.
inline OpValues RowOf(const OpValues& v, std::uint64_t row) {
  return std::visit([&](const auto& all) -> OpValues {
    using Vec = std::decay_t<decltype(all)>;
    return Vec{all.at(row)};
  }, v);
}

// Runs `plan` over `bytes` cut every `run` bytes (elements cut too), handed
// to ConsumeRuns() at once, as a unary message's receive slices are.
inline absl::StatusOr<AggregationResult> RunAsRuns(Backend& backend, const AggregationPlan& plan,
                                                   std::span<const std::byte> bytes, std::size_t run) {
  auto reduction = backend.Start(plan);
  if (!reduction.ok()) return reduction.status();
  std::vector<Extent> runs;
  for (std::size_t off = 0; off < bytes.size(); off += run) {
    runs.push_back(Extent::PageableHost(bytes.subspan(off, std::min(run, bytes.size() - off))));
  }
  if (absl::Status s = (*reduction)->ConsumeRuns(HostRuns(runs)); !s.ok()) return s;
  return (*reduction)->Finish();
}

// ---- References, one row at a time -------------------------------------

template <typename V>
bool AnyNan(std::span<const V> x) {
  return std::any_of(x.begin(), x.end(), [](V v) { return v != v; });
}

template <typename V>
long double SumLD(std::span<const V> x) {
  long double s = 0;
  for (V v : x) s += static_cast<long double>(v);
  return s;
}
template <typename V>
long double SumAbsLD(std::span<const V> x) {
  long double s = 0;
  for (V v : x) s += std::fabs(static_cast<long double>(v));
  return s;
}
template <typename V>
long double SumSquaresLD(std::span<const V> x) {
  long double s = 0;
  for (V v : x) s += static_cast<long double>(v) * static_cast<long double>(v);
  return s;
}
// The exact integer sum, reduced modulo 2^64 the way numpy wraps.
template <typename V>
std::uint64_t SumWrapped(std::span<const V> x) {
  __int128 s = 0;
  for (V v : x) s += v;
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(s));
}
// Two passes in long double: numpy.var's definition, more precisely.
template <typename V>
long double VarianceLD(std::span<const V> x, double ddof) {
  const long double n = static_cast<long double>(x.size());
  const long double mean = SumLD(x) / n;
  long double m2 = 0;
  for (V v : x) m2 += (static_cast<long double>(v) - mean) * (static_cast<long double>(v) - mean);
  return m2 / std::max<long double>(n - static_cast<long double>(ddof), 0);
}
// numpy.min / max: the extreme, or NaN if there is one.
template <bool kMax, typename V>
V Extreme(std::span<const V> x) {
  if (AnyNan(x)) return std::numeric_limits<V>::quiet_NaN();
  return kMax ? *std::max_element(x.begin(), x.end()) : *std::min_element(x.begin(), x.end());
}
// numpy.argmin / argmax: the first NaN, else the first extreme.
template <bool kMax, typename V>
std::int64_t ArgExtreme(std::span<const V> x) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] != x[i]) return static_cast<std::int64_t>(i);
  }
  std::size_t best = 0;
  for (std::size_t i = 1; i < x.size(); ++i) {
    if (kMax ? x[i] > x[best] : x[i] < x[best]) best = i;
  }
  return static_cast<std::int64_t>(best);
}
// numpy.histogram as documented: edges = linspace(lo, hi, bins + 1) in
// float64, cast to the edge type (the binning type, or the 16-bit float
// input's own); a value's bin found by binary search.
template <typename BinT, typename V, typename EdgeT = BinT>
HistogramResult HistogramRef(std::span<const V> x, const HistogramSpec& spec) {
  std::vector<BinT> edges(spec.bins + 1);
  const double step = (spec.hi - spec.lo) / static_cast<double>(spec.bins);
  for (std::uint32_t i = 0; i < spec.bins; ++i) {
    edges[i] = static_cast<BinT>(rules::RoundTo<EdgeT>(static_cast<double>(i) * step + spec.lo));
  }
  edges[spec.bins] = static_cast<BinT>(rules::RoundTo<EdgeT>(spec.hi));
  HistogramResult r;
  r.counts.assign(spec.bins, 0);
  for (V v : x) {
    const BinT b = static_cast<BinT>(v);
    if (b != b) {
      ++r.nan;
    } else if (b < edges.front()) {
      ++r.below;
    } else if (b > edges.back()) {
      ++r.above;
    } else {
      std::size_t i = static_cast<std::size_t>(std::upper_bound(edges.begin(), edges.end(), b) -
                                                edges.begin()) - 1;
      ++r.counts[std::min<std::size_t>(i, spec.bins - 1)];
    }
  }
  return r;
}

// ---- Whole-result checks -------------------------------------------------

// A histogram range inside the values RandomValues draws, so that some fall
// below and above it.
inline HistogramSpec RangeFor(DType dtype, Fill fill, std::uint32_t bins) {
  if (fill == Fill::kNarrow) return {bins, -3.0, 7.5};
  if (rules::IsFloat(dtype)) return {bins, -800.0, 750.0};
  return rules::VisitDType(dtype, [&](auto dt) {
    using V = typename rules::Traits<decltype(dt)::value>::value;
    const double lo = static_cast<double>(std::numeric_limits<V>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<V>::max());
    return HistogramSpec{bins, lo + 0.1 * (hi - lo), hi - 0.05 * (hi - lo)};
  });
}

// Every op, several with two parameter choices.
inline std::vector<OpSpec> AllOps(DType dtype, Fill fill, bool with_extremes = true) {
  std::vector<OpSpec> ops = {Op(OpKind::kSum),        Op(OpKind::kMean),
                             Op(OpKind::kCount),      Op(OpKind::kSumSquares),
                             Op(OpKind::kVariance),   Op(OpKind::kVariance, 1.0),
                             Op(OpKind::kStddev),     Op(OpKind::kStddev, 1.5)};
  HistogramSpec h = RangeFor(dtype, fill, 37);
  ops.push_back({.kind = OpKind::kHistogram, .histogram = h});
  h.bins = 1;
  ops.push_back({.kind = OpKind::kHistogram, .histogram = h});
  if (with_extremes) {
    for (OpKind k : {OpKind::kMin, OpKind::kMax, OpKind::kArgmin, OpKind::kArgmax}) {
      ops.push_back(Op(k));
    }
  }
  return ops;
}

template <typename T>
const T& ValueAt(const OpValues& v, std::uint64_t row) {
  return std::get<std::vector<T>>(v)[row];
}

// One row's value of one op against the references.
template <DType kD>
void CheckRow(const OpSpec& op, std::span<const typename rules::Traits<kD>::value> x,
              const OpValues& values, std::uint64_t row) {
  using V = typename rules::Traits<kD>::value;
  using BinT = typename rules::Traits<kD>::bin;
  const bool nan = AnyNan(x);
  const long double n = static_cast<long double>(x.size());
  auto put_extreme = [&](V want) {
    if constexpr (rules::kIsFloatValue<V>) {
      const double got = ValueAt<double>(values, row);
      if (nan) {
        EXPECT_TRUE(std::isnan(got)) << got;
      } else {
        EXPECT_EQ(got, static_cast<double>(want));
      }
    } else if constexpr (std::is_signed_v<V>) {
      EXPECT_EQ(ValueAt<std::int64_t>(values, row), static_cast<std::int64_t>(want));
    } else {
      EXPECT_EQ(ValueAt<std::uint64_t>(values, row), static_cast<std::uint64_t>(want));
    }
  };
  switch (op.kind) {
    case OpKind::kSum:
      if constexpr (rules::kIsFloatValue<V>) {
        const double got = ValueAt<double>(values, row);
        if (nan) {
          EXPECT_TRUE(std::isnan(got));
        } else {
          EXPECT_NEAR(got, static_cast<double>(SumLD(x)), static_cast<double>(1e-12L * SumAbsLD(x)));
        }
      } else if constexpr (std::is_signed_v<V>) {
        EXPECT_EQ(ValueAt<std::int64_t>(values, row), static_cast<std::int64_t>(SumWrapped(x)));
      } else {
        EXPECT_EQ(ValueAt<std::uint64_t>(values, row), SumWrapped(x));
      }
      break;
    case OpKind::kMin: put_extreme(Extreme<false>(x)); break;
    case OpKind::kMax: put_extreme(Extreme<true>(x)); break;
    case OpKind::kMean: {
      const double got = ValueAt<double>(values, row);
      if (x.empty() || nan) {
        EXPECT_TRUE(std::isnan(got)) << got;
      } else {
        EXPECT_NEAR(got, static_cast<double>(SumLD(x) / n), static_cast<double>(1e-12L * SumAbsLD(x) / n));
      }
      break;
    }
    case OpKind::kCount: EXPECT_EQ(ValueAt<std::uint64_t>(values, row), x.size()); break;
    case OpKind::kSumSquares: {
      const double got = ValueAt<double>(values, row);
      if (nan) {
        EXPECT_TRUE(std::isnan(got));
      } else {
        const long double want = SumSquaresLD(x);
        EXPECT_NEAR(got, static_cast<double>(want), static_cast<double>(1e-12L * want));
      }
      break;
    }
    case OpKind::kVariance:
    case OpKind::kStddev: {
      const double got = ValueAt<double>(values, row);
      const bool sd = op.kind == OpKind::kStddev;
      if (x.empty() || nan) {
        EXPECT_TRUE(std::isnan(got)) << got;
        break;
      }
      if (n - static_cast<long double>(op.ddof) <= 0) {  // numpy: M2 / 0
        if (VarianceLD(x, 0.0) == 0) {
          EXPECT_TRUE(std::isnan(got)) << got;
        } else {
          EXPECT_EQ(got, std::numeric_limits<double>::infinity());
        }
        break;
      }
      long double want = VarianceLD(x, op.ddof);
      if (sd) want = std::sqrt(want);
      EXPECT_NEAR(got, static_cast<double>(want), static_cast<double>(1e-9L * want));
      break;
    }
    case OpKind::kArgmin: EXPECT_EQ(ValueAt<std::int64_t>(values, row), ArgExtreme<false>(x)); break;
    case OpKind::kArgmax: EXPECT_EQ(ValueAt<std::int64_t>(values, row), ArgExtreme<true>(x)); break;
    case OpKind::kHistogram:
      EXPECT_EQ(ValueAt<HistogramResult>(values, row), (HistogramRef<BinT, V, typename rules::Traits<kD>::edge>(x, op.histogram)));
      break;
    default: ADD_FAILURE() << "no reference here for " << rules::Name(op.kind) << " (cpu_backend_nan_test.cc)";
  }
}

// Checks every op's result, row by row, against the references; stops at the
// first row that fails.
inline void ExpectMatchesReference(const Array& a, std::uint64_t row_length,
                                   const std::vector<OpSpec>& ops, const AggregationResult& result) {
  ASSERT_EQ(result.values.size(), ops.size());
  rules::VisitDType(a.dtype, [&](auto dt) {
    constexpr DType kD = decltype(dt)::value;
    using V = typename rules::Traits<kD>::value;
    const std::span<const V> all = a.As<V>();
    const std::uint64_t len = row_length ? row_length : a.length;
    const std::uint64_t rows = row_length ? a.length / row_length : 1;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "op " << k << ": " << rules::Name(ops[k].kind)
                                        << " ddof " << ops[k].ddof);
      const OpValues& v = result.values[k];
      ASSERT_EQ(static_cast<int>(v.index()), static_cast<int>(ResultKindOf(ops[k].kind, kD)));
      ASSERT_EQ(std::visit([](const auto& vec) { return vec.size(); }, v), rows);
      for (std::uint64_t r = 0; r < rows; ++r) {
        CheckRow<kD>(ops[k], all.subspan(r * len, len), v, r);
        if (::testing::Test::HasFailure()) {
          ADD_FAILURE() << "first failure in row " << r << " of " << rows;
          return;
        }
      }
    }
  });
}

}  // namespace tally::testing
