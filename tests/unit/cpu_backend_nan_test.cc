// The NaN-skipping ops on the CPU backend: numpy's nan-function rules row by
// row (all-NaN rows, NaNs at the ends), bitwise the same however the input
// is pieced and threaded, and the plain ops on integer dtypes.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "tests/unit/cpu_test_util.h"
#include "tests/unit/test_seed.h"

namespace tally::testing {
namespace {

using rules::OpKind;

void ExpectSameBits(const AggregationResult& want, const AggregationResult& got, const ::testing::Message& what) {
  ASSERT_EQ(want.values.size(), got.values.size());
  for (std::size_t k = 0; k < want.values.size(); ++k) {
    EXPECT_TRUE(SameBits(want.values[k], got.values[k])) << what << ", op " << k;
  }
}

std::vector<OpSpec> NanOps(bool with_args) {
  std::vector<OpSpec> ops = {Op(OpKind::kNanSum),         Op(OpKind::kNanMean),       Op(OpKind::kNanMin),
                             Op(OpKind::kNanMax),         Op(OpKind::kNanVariance),   Op(OpKind::kNanVariance, 1.0),
                             Op(OpKind::kNanStddev, 1.5), Op(OpKind::kNanCount)};
  if (with_args) {
    ops.push_back(Op(OpKind::kNanArgmin));
    ops.push_back(Op(OpKind::kNanArgmax));
  }
  return ops;
}

// Float values with NaNs at both ends of every row, scattered ones, and
// (when all_nan_row) one row of NaNs only.
template <typename V>
Array NanArray(DType dtype, std::uint64_t n, std::uint64_t row, std::mt19937_64& rng, bool all_nan_row) {
  std::vector<V> v = RandomValues<V>(n, rng, Fill::kWide);
  const V nan = std::numeric_limits<V>::quiet_NaN();
  for (std::uint64_t i = 0; i < n; i += row) v[i] = v[i + row - 1] = nan;
  for (std::uint64_t i = 0; i < n; i += 97) v[i] = nan;
  if (all_nan_row) {
    const std::uint64_t r = (n / row) / 2;
    for (std::uint64_t i = r * row; i < (r + 1) * row; ++i) v[i] = nan;
  }
  return MakeArray(dtype, v);
}

// One row's expected values, in long double over its non-NaN elements.
template <typename V>
void CheckNanRow(std::span<const V> x, const std::vector<OpSpec>& ops, const AggregationResult& got,
                 std::uint64_t r) {
  std::vector<long double> ok;
  std::int64_t argmin = -1, argmax = -1;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) continue;
    if (argmin < 0 || x[i] < x[argmin]) argmin = static_cast<std::int64_t>(i);
    if (argmax < 0 || x[i] > x[argmax]) argmax = static_cast<std::int64_t>(i);
    ok.push_back(x[i]);
  }
  long double sum = 0, abs_sum = 0;
  for (long double v : ok) sum += v, abs_sum += std::fabs(v);
  const long double n = ok.size(), mean = ok.empty() ? 0 : sum / n;
  long double m2 = 0;
  for (long double v : ok) m2 += (v - mean) * (v - mean);
  const double tol = 1e-12 * static_cast<double>(abs_sum) + 1e-300;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpSpec& op = ops[k];
    const auto at = [&](auto t) { return std::get<std::vector<decltype(t)>>(got.values[k])[r]; };
    const auto var = [&](double ddof) {
      return n - ddof <= 0 ? std::nan("") : static_cast<double>(m2 / (n - ddof));
    };
    SCOPED_TRACE(::testing::Message() << rules::Name(op.kind) << " row " << r);
    switch (op.kind) {
      case OpKind::kNanSum: EXPECT_NEAR(at(0.0), static_cast<double>(sum), tol); break;
      case OpKind::kNanCount: EXPECT_EQ(at(std::uint64_t{}), ok.size()); break;
      case OpKind::kNanMean:
        if (ok.empty()) EXPECT_TRUE(std::isnan(at(0.0)));
        else EXPECT_NEAR(at(0.0), static_cast<double>(mean), tol / static_cast<double>(n));
        break;
      case OpKind::kNanMin:
      case OpKind::kNanMax:
        if (ok.empty()) {
          EXPECT_TRUE(std::isnan(at(0.0)));
        } else {
          EXPECT_EQ(at(0.0), static_cast<double>(x[op.kind == OpKind::kNanMin ? argmin : argmax]));
        }
        break;
      case OpKind::kNanArgmin: EXPECT_EQ(at(std::int64_t{}), argmin); break;
      case OpKind::kNanArgmax: EXPECT_EQ(at(std::int64_t{}), argmax); break;
      case OpKind::kNanVariance:
      case OpKind::kNanStddev: {
        double want = var(op.ddof);
        if (op.kind == OpKind::kNanStddev) want = std::sqrt(want);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(at(0.0)));
        } else {
          EXPECT_NEAR(at(0.0), want, 1e-9 * want + 1e-300);
        }
        break;
      }
      default: FAIL();
    }
  }
}

TEST(CpuNanOps, FollowNumpyRowByRowWithAllNanRows) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 3});
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (std::uint64_t row : {1ull, 2ull, 33ull, 5000ull, 300007ull}) {
      const std::uint64_t rows = row > 1000 ? 3 : 200;
      rules::VisitDType(dtype, [&](auto dt) {
        using V = typename rules::Traits<decltype(dt)::value>::value;
        if constexpr (rules::kIsFloatValue<V>) {
          const Array a = NanArray<V>(dtype, rows * row, row, rng, true);
          const auto ops = NanOps(false);
          auto got = RunPieces(*backend, Plan(a, row, ops), a.bytes);
          ASSERT_TRUE(got.ok()) << got.status();
          for (std::uint64_t r = 0; r < rows; ++r) CheckNanRow<V>(a.As<V>().subspan(r * row, row), ops, *got, r);
          // nanargmin has no value on the all-NaN row: the request fails.
          auto refused = RunPieces(*backend, Plan(a, row, NanOps(true)), a.bytes);
          EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
          EXPECT_NE(refused.status().message().find("all NaN"), std::string::npos) << refused.status();
          if (row > 2) {
            const Array b = NanArray<V>(dtype, rows * row, row, rng, false);
            auto all = RunPieces(*backend, Plan(b, row, NanOps(true)), b.bytes);
            ASSERT_TRUE(all.ok()) << all.status();
            for (std::uint64_t r = 0; r < rows; ++r) CheckNanRow<V>(b.As<V>().subspan(r * row, row), NanOps(true), *all, r);
          }
        }
      });
    }
  }
}

TEST(CpuNanOps, PiecesAndThreadCountsDoNotChangeABit) {
  TALLY_SEEDED_RNG(rng);
  std::vector<std::unique_ptr<Backend>> backends;
  for (int t : {1, 2, 8}) backends.push_back(MakeCpuBackend({.threads = t}));
  const std::vector<std::vector<std::uint64_t>> piecings = {{}, {2039, 65521, 7}, {1000002, 1}, {3, 1, 4, 1, 5}};
  for (std::uint64_t row : {0ull, 1000ull, 250001ull}) {
    const std::uint64_t n = row == 0 ? 1000003 : 4 * row;
    const Array a = NanArray<float>(DType::kFloat32, n, row == 0 ? n : row, rng, false);
    const auto ops = NanOps(true);
    auto want = RunPieces(*backends[0], Plan(a, row, ops), a.bytes);
    ASSERT_TRUE(want.ok()) << want.status();
    for (std::size_t b = 0; b < backends.size(); ++b) {
      for (std::size_t p = 0; p < piecings.size(); ++p) {
        auto got = RunPieces(*backends[b], Plan(a, row, ops), a.bytes, piecings[p]);
        ASSERT_TRUE(got.ok()) << got.status();
        ExpectSameBits(*want, *got, ::testing::Message() << "rows of " << row << " backend " << b << " piecing " << p);
      }
    }
  }
}

TEST(CpuNanOps, AreThePlainOpsOnIntegers) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  const OpKind nan_kinds[] = {OpKind::kNanSum,     OpKind::kNanMean,    OpKind::kNanMin,
                              OpKind::kNanMax,     OpKind::kNanArgmin,  OpKind::kNanArgmax,
                              OpKind::kNanVariance, OpKind::kNanStddev, OpKind::kNanCount};
  for (DType dtype : {DType::kInt32, DType::kInt64, DType::kUInt32, DType::kUInt8}) {
    for (std::uint64_t row : {0ull, 1ull, 77ull}) {
      const Array a = RandomArray(dtype, 7777 - 7777 % (row ? row : 1), rng, Fill::kNarrow);
      std::vector<OpSpec> nan_ops, plain_ops;
      for (OpKind k : nan_kinds) {
        for (double ddof : {0.0, 1.0}) {
          if (ddof != 0 && !rules::TakesDdof(k)) continue;
          nan_ops.push_back(Op(k, ddof));
          plain_ops.push_back(Op(rules::PlainOf(k), ddof));
        }
      }
      auto nan = RunPieces(*backend, Plan(a, row, nan_ops), a.bytes);
      auto plain = RunPieces(*backend, Plan(a, row, plain_ops), a.bytes);
      ASSERT_TRUE(nan.ok() && plain.ok());
      // Rows of one element: var(ddof=1) is inf or NaN as numpy.var gives, not nanvar's NaN.
      ExpectSameBits(*plain, *nan, ::testing::Message() << rules::Name(dtype) << " rows of " << row);
    }
  }
}

TEST(CpuNanOps, EmptyAndAllNanArrays) {
  auto backend = MakeCpuBackend({.threads = 2});
  const Array empty = MakeArray<double>(DType::kFloat64, {});
  auto got = RunPieces(*backend, Plan(empty, 0, NanOps(false)), empty.bytes);
  EXPECT_FALSE(got.ok());  // nanmin of an empty array: numpy raises
  auto sums = RunPieces(*backend, Plan(empty, 0, {Op(OpKind::kNanSum), Op(OpKind::kNanMean), Op(OpKind::kNanCount)}),
                        empty.bytes);
  ASSERT_TRUE(sums.ok()) << sums.status();
  EXPECT_EQ(std::get<std::vector<double>>(sums->values[0])[0], 0.0);
  EXPECT_TRUE(std::isnan(std::get<std::vector<double>>(sums->values[1])[0]));
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(sums->values[2])[0], 0u);

  const Array nans = MakeArray<float>(DType::kFloat32, std::vector<float>(100000, std::nanf("")));
  auto all = RunPieces(*backend, Plan(nans, 0, NanOps(false)), nans.bytes, {999});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(std::get<std::vector<double>>(all->values[0])[0], 0.0);
  for (int k : {1, 2, 3, 4, 5, 6}) EXPECT_TRUE(std::isnan(std::get<std::vector<double>>(all->values[k])[0])) << k;
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(all->values[7])[0], 0u);
  auto arg = RunPieces(*backend, Plan(nans, 0, {Op(OpKind::kNanArgmax)}), nans.bytes);
  EXPECT_EQ(arg.status().code(), absl::StatusCode::kInvalidArgument);
}

// A NaN-skipping op's partial state: the plain op's over the non-NaN
// elements, every element counted besides; an all-NaN row's is the empty
// state, not a refusal (nanargmin's too: the parts merge first).
TEST(CpuNanOps, PartialStatesCoverTheNonNanElementsAndCountEveryOne) {
  auto backend = MakeCpuBackend({.threads = 1});
  const float nan = std::nanf("");
  const Array a = MakeArray<float>(DType::kFloat32, {1.0f, nan, 4.0f, nan, nan, nan});
  std::vector<OpSpec> ops = {Op(OpKind::kNanSum), Op(OpKind::kNanArgmin), Op(OpKind::kNanMax)};
  for (OpSpec& op : ops) {
    op.partial = true;
    op.base_index = 100;
  }
  auto got = RunPieces(*backend, Plan(a, 3, ops), a.bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto& states = std::get<std::vector<rules::PartialState>>(got->values[k]);
    ASSERT_EQ(states.size(), 2u);
    EXPECT_EQ(states[0].count, 2u) << k;
    EXPECT_EQ(states[0].elements, 3u) << k;
    EXPECT_EQ(states[1].count, 0u) << k;
    EXPECT_EQ(states[1].elements, 3u) << k;
  }
  EXPECT_EQ(std::get<std::vector<rules::PartialState>>(got->values[0])[0].float_sum, 5.0);
  EXPECT_EQ(std::get<std::vector<rules::PartialState>>(got->values[1])[0].index, 100);
  EXPECT_EQ(std::get<std::vector<rules::PartialState>>(got->values[2])[0].float_extreme, 4.0);
  // Without `partial`, nanargmin of the all-NaN row is refused, naming it.
  auto refused = RunPieces(*backend, Plan(a, 3, {Op(OpKind::kNanArgmin)}), a.bytes);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("row 1 is all NaN"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace tally::testing
