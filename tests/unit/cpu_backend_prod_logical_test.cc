// prod, count_nonzero, any, all and ptp on the CPU backend: numpy's rules
// row by row against plain references (long double products, exact integer
// products modulo 2^64, extremes subtracted in the dtype), their edge cases
// (empty input, zeros, -0.0, NaN, wrap-around), and bitwise the same however
// the input is pieced and threaded.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <variant>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "tests/unit/cpu_test_util.h"
#include "tests/unit/test_seed.h"

namespace tally::testing {
namespace {

using rules::OpKind;

std::vector<OpSpec> NewOps(bool with_ptp) {
  std::vector<OpSpec> ops = {Op(OpKind::kProduct), Op(OpKind::kCountNonzero), Op(OpKind::kAny),
                             Op(OpKind::kAll)};
  if (with_ptp) ops.push_back(Op(OpKind::kPtp));
  return ops;
}

// Values whose long products stay in float64's range (floats in
// [-1.1, -0.9] and [0.9, 1.1]) or wrap (integers over their whole range),
// with zeros (some -0.0), NaNs, a row of zeros only and a row without any.
template <typename V>
std::vector<V> Values(std::uint64_t n, std::uint64_t row, std::mt19937_64& rng) {
  std::vector<V> v = RandomValues<V>(n, rng, Fill::kWide);
  if constexpr (rules::kIsFloatValue<V>) {
    std::uniform_real_distribution<double> d(0.9, 1.1);
    for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<V>(i % 3 == 1 ? -d(rng) : d(rng));
    for (std::uint64_t i = 0; i < n; i += 211) v[i] = std::numeric_limits<V>::quiet_NaN();
  }
  for (std::uint64_t i = 5; i < n; i += 89) v[i] = (i / 89) % 2 ? V{} : static_cast<V>(-0.0);
  const std::uint64_t rows = n / row;
  if (rows >= 3) {
    for (std::uint64_t i = 0; i < row; ++i) v[row + i] = V{};                     // row 1: all zero
    for (std::uint64_t i = 0; i < row; ++i) v[2 * row + i] = v[2 * row + i] == V{} || v[2 * row + i] != v[2 * row + i] ? V{1} : v[2 * row + i];  // row 2: none
  }
  return v;
}

template <typename V>
void CheckRow(std::span<const V> x, const std::vector<OpSpec>& ops, const AggregationResult& got, std::uint64_t r) {
  std::uint64_t nonzero = 0;
  bool nan = false;
  long double lprod = 1;
  std::uint64_t uprod = 1;
  V lo = x.empty() ? V{} : x[0], hi = lo;
  for (V v : x) {
    nonzero += v != V{} ? 1 : 0;
    nan = nan || v != v;
    lprod *= static_cast<long double>(v);
    if constexpr (std::is_signed_v<V>) {
      uprod *= static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
    } else {
      uprod *= static_cast<std::uint64_t>(v);
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const auto at = [&](auto t) { return std::get<std::vector<decltype(t)>>(got.values[k])[r]; };
    SCOPED_TRACE(::testing::Message() << rules::Name(ops[k].kind) << " row " << r << " of length " << x.size());
    switch (ops[k].kind) {
      case OpKind::kProduct:
        if constexpr (rules::kIsFloatValue<V>) {
          if (nan) {
            EXPECT_TRUE(std::isnan(at(0.0))) << at(0.0);
          } else {
            EXPECT_NEAR(at(0.0), static_cast<double>(lprod), 1e-9 * std::fabs(static_cast<double>(lprod)));
            EXPECT_EQ(std::signbit(at(0.0)), std::signbit(static_cast<double>(lprod)));
          }
        } else if constexpr (std::is_signed_v<V>) {
          EXPECT_EQ(at(std::int64_t{}), static_cast<std::int64_t>(uprod));
        } else {
          EXPECT_EQ(at(std::uint64_t{}), uprod);
        }
        break;
      case OpKind::kCountNonzero: EXPECT_EQ(at(std::uint64_t{}), nonzero); break;
      case OpKind::kAny: EXPECT_EQ(at(std::uint64_t{}), nonzero > 0 ? 1u : 0u); break;
      case OpKind::kAll: EXPECT_EQ(at(std::uint64_t{}), nonzero == x.size() ? 1u : 0u); break;
      case OpKind::kPtp:
        if constexpr (rules::kIsFloatValue<V>) {
          const V want = hi - lo;  // in V, as numpy subtracts
          if (nan) {
            EXPECT_TRUE(std::isnan(at(0.0))) << at(0.0);
          } else {
            EXPECT_EQ(at(0.0), static_cast<double>(want));
          }
        } else {
          using U = std::make_unsigned_t<V>;
          const V want = static_cast<V>(static_cast<U>(static_cast<U>(hi) - static_cast<U>(lo)));
          if constexpr (std::is_signed_v<V>) {
            EXPECT_EQ(at(std::int64_t{}), want);
          } else {
            EXPECT_EQ(at(std::uint64_t{}), want);
          }
        }
        break;
      default: FAIL();
    }
  }
}

TEST(CpuProdLogicalOps, FollowNumpyRowByRow) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 3});
  for (DType dtype : rules::kAllDTypes) {
    for (std::uint64_t row : {1ull, 2ull, 33ull, 5000ull, 300007ull}) {
      const std::uint64_t rows = row > 1000 ? 3 : 200;
      rules::VisitDType(dtype, [&](auto dt) {
        using V = typename rules::Traits<decltype(dt)::value>::value;
        std::vector<V> values = Values<V>(rows * row, row, rng);
        if constexpr (decltype(dt)::value == DType::kBool) {
          for (V& v : values) v = static_cast<V>(v & 1);  // numpy's bool_: 0 and 1
        }
        const Array a = MakeArray(dtype, values);
        const auto ops = NewOps(/*with_ptp=*/dtype != DType::kBool);  // refused for bool (below)
        for (std::uint64_t segment : {row, rows * row}) {  // per row, then the whole array as one
          auto got = RunPieces(*backend, Plan(a, segment == rows * row ? 0 : segment, ops), a.bytes);
          ASSERT_TRUE(got.ok()) << got.status();
          const std::uint64_t n = a.length / segment;
          for (std::uint64_t r = 0; r < n; ++r) {
            CheckRow<V>(a.As<V>().subspan(r * segment, segment), ops, *got, r);
            if (::testing::Test::HasFailure()) return;
          }
        }
      });
    }
  }
}

TEST(CpuProdLogicalOps, PiecesAndThreadCountsDoNotChangeABit) {
  TALLY_SEEDED_RNG(rng);
  std::vector<std::unique_ptr<Backend>> backends;
  for (int t : {1, 2, 8}) backends.push_back(MakeCpuBackend({.threads = t}));
  const std::vector<std::vector<std::uint64_t>> piecings = {{}, {2039, 65521, 7}, {1000002, 1}, {3, 1, 4, 1, 5}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    for (std::uint64_t row : {0ull, 1000ull, 250001ull}) {
      const std::uint64_t n = row == 0 ? 1000003 : 4 * row;
      const Array a = rules::VisitDType(dtype, [&](auto dt) {
        using V = typename rules::Traits<decltype(dt)::value>::value;
        return MakeArray(dtype, Values<V>(n, row == 0 ? n : row, rng));
      });
      const auto ops = NewOps(true);
      auto want = RunPieces(*backends[0], Plan(a, row, ops), a.bytes);
      ASSERT_TRUE(want.ok()) << want.status();
      for (std::size_t b = 0; b < backends.size(); ++b) {
        for (std::size_t p = 0; p < piecings.size(); ++p) {
          auto got = RunPieces(*backends[b], Plan(a, row, ops), a.bytes, piecings[p]);
          ASSERT_TRUE(got.ok()) << got.status();
          for (std::size_t k = 0; k < ops.size(); ++k) {
            EXPECT_TRUE(SameBits(want->values[k], got->values[k]))
                << rules::Name(dtype) << " rows of " << row << " backend " << b << " piecing " << p << " op " << k;
          }
        }
      }
    }
  }
}

TEST(CpuProdLogicalOps, EmptyArrays) {
  auto backend = MakeCpuBackend({.threads = 2});
  const Array f = MakeArray<float>(DType::kFloat32, {});
  auto got = RunPieces(*backend, Plan(f, 0, NewOps(false)), f.bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::get<std::vector<double>>(got->values[0])[0], 1.0);  // numpy.prod([]) is 1
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(got->values[1])[0], 0u);
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(got->values[2])[0], 0u);  // any: False
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(got->values[3])[0], 1u);  // all: True
  const Array i = MakeArray<std::int32_t>(DType::kInt32, {});
  auto ints = RunPieces(*backend, Plan(i, 0, {Op(OpKind::kProduct)}), i.bytes);
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(ints->values[0])[0], 1);
  const Array u = MakeArray<std::uint8_t>(DType::kUInt8, {});
  auto uints = RunPieces(*backend, Plan(u, 0, {Op(OpKind::kProduct)}), u.bytes);
  ASSERT_TRUE(uints.ok()) << uints.status();
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(uints->values[0])[0], 1u);
  // numpy.ptp of an empty array raises, as numpy.max does.
  auto ptp = RunPieces(*backend, Plan(f, 0, {Op(OpKind::kPtp)}), f.bytes);
  EXPECT_EQ(ptp.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuProdLogicalOps, PtpWrapsAndRoundsInTheDtype) {
  auto backend = MakeCpuBackend({.threads = 1});
  const auto one = [&](const Array& a) {
    auto got = RunPieces(*backend, Plan(a, 0, {Op(OpKind::kPtp)}), a.bytes);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->values[0] : OpValues{};
  };
  constexpr auto kI32 = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(one(MakeArray<std::int32_t>(DType::kInt32, {-kI32 - 1, kI32})))[0], -1);
  constexpr auto kI64 = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(one(MakeArray<std::int64_t>(DType::kInt64, {kI64, -kI64 - 1})))[0], -1);
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(one(MakeArray<std::uint8_t>(DType::kUInt8, {255, 0, 7})))[0], 255u);
  // float32: 1 - (-1e-8) rounds to 1 in float32 (float64 would keep 1.00000001).
  EXPECT_EQ(std::get<std::vector<double>>(one(MakeArray<float>(DType::kFloat32, {1.0f, -1e-8f})))[0], 1.0);
  EXPECT_EQ(std::get<std::vector<double>>(one(MakeArray<float>(DType::kFloat32, {3e38f, -3e38f})))[0],
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::get<std::vector<double>>(one(MakeArray<double>(DType::kFloat64, {3e38, -3e38})))[0], 6e38);
  // numpy refuses ptp of bool (no boolean subtraction): so does tally.
  const Array b = MakeArray<std::uint8_t>(DType::kBool, {1, 0});
  const auto refused = RunPieces(*backend, Plan(b, 0, {Op(OpKind::kPtp)}), b.bytes).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("ptp of a bool array"), std::string::npos) << refused;
}

TEST(CpuProdLogicalOps, ProductWrapsModulo2To64AndNanIsNonzero) {
  auto backend = MakeCpuBackend({.threads = 1});
  // 2^32 * 2^32 wraps to 0 in int64, as numpy's prod does.
  const Array big = MakeArray<std::int64_t>(DType::kInt64, {std::int64_t{1} << 32, std::int64_t{1} << 32, 3});
  auto got = RunPieces(*backend, Plan(big, 0, {Op(OpKind::kProduct)}), big.bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(got->values[0])[0], 0);
  // int32 input is multiplied in int64: 65536 * 65536 is 2^32, not 0.
  const Array i32 = MakeArray<std::int32_t>(DType::kInt32, {65536, 65536, -1});
  got = RunPieces(*backend, Plan(i32, 0, {Op(OpKind::kProduct)}), i32.bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(got->values[0])[0], -(std::int64_t{1} << 32));
  const Array f = MakeArray<double>(DType::kFloat64, {std::nan(""), -0.0, 0.0, 2.0, std::numeric_limits<double>::infinity()});
  got = RunPieces(*backend, Plan(f, 0, NewOps(false)), f.bytes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(std::isnan(std::get<std::vector<double>>(got->values[0])[0]));
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(got->values[1])[0], 3u);  // NaN, 2 and inf
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(got->values[2])[0], 1u);
  EXPECT_EQ(std::get<std::vector<std::uint64_t>>(got->values[3])[0], 0u);
}

// Partial states of three parts of an array (one of them empty), merged in
// order by the rules and finished, answer what one request answers: exactly
// for integers, counts and ptp; float products to float64's rounding (the
// factors are grouped differently).
TEST(CpuProdLogicalOps, PartialStatesMergeIntoTheOneRequestAnswer) {
  TALLY_SEEDED_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32, DType::kInt8, DType::kUInt64}) {
    rules::VisitDType(dtype, [&](auto dt) {
      using V = typename rules::Traits<decltype(dt)::value>::value;
      const std::uint64_t n = 10007;
      const Array a = MakeArray(dtype, Values<V>(n, n, rng));
      const auto ops = NewOps(true);
      auto whole = RunPieces(*backend, Plan(a, 0, ops), a.bytes);
      ASSERT_TRUE(whole.ok()) << whole.status();
      const std::uint64_t cuts[] = {0, 4099, 4099, n};  // the middle part is empty
      for (std::size_t k = 0; k < ops.size(); ++k) {
        SCOPED_TRACE(::testing::Message() << rules::Name(dtype) << " " << rules::Name(ops[k].kind));
        OpSpec op = ops[k];
        op.partial = true;
        rules::PartialState merged;
        for (int part = 0; part < 3; ++part) {
          const std::uint64_t lo = cuts[part], hi = cuts[part + 1];
          const Array piece = MakeArray(dtype, std::vector<V>(a.As<V>().begin() + lo, a.As<V>().begin() + hi));
          auto got = RunPieces(*backend, Plan(piece, 0, {op}), piece.bytes);
          ASSERT_TRUE(got.ok()) << got.status();
          const rules::PartialState s = std::get<std::vector<rules::PartialState>>(got->values[0])[0];
          EXPECT_EQ(s.count, hi - lo);
          merged = part == 0 ? s : rules::Merge(op, dtype, merged, s);
        }
        ASSERT_EQ(merged.count, n);
        std::visit(
            [&](const auto& want) {
              using E = typename std::decay_t<decltype(want)>::value_type;
              if constexpr (std::is_same_v<E, double>) {
                const double got = rules::FinishDouble(op, dtype, merged);
                if (std::isnan(want[0])) {
                  EXPECT_TRUE(std::isnan(got)) << got;
                } else if (op.kind == OpKind::kProduct) {
                  EXPECT_NEAR(got, want[0], 1e-12 * std::fabs(want[0]));
                } else {
                  EXPECT_EQ(got, want[0]);
                }
              } else if constexpr (std::is_same_v<E, std::int64_t>) {
                EXPECT_EQ(rules::FinishInt64(op, dtype, merged), want[0]);
              } else if constexpr (std::is_same_v<E, std::uint64_t>) {
                EXPECT_EQ(rules::FinishUInt64(op, dtype, merged), want[0]);
              } else {
                ADD_FAILURE() << "no histogram here";
              }
            },
            whole->values[k]);
      }
    });
  }
}

}  // namespace
}  // namespace tally::testing
