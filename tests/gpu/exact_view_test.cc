// The host half of the exact pass (tally/kernels/aggregate.h: LayoutOf's
// exact states, ResultView::ExactState and ExactSquaresState, Count,
// NanCount, Sum, Moments): state words filled as the kernels fill them
// (each finite value's three parts added into the digits, NaNs and
// infinities counted, a masked array's valid elements counted) read back
// as the rules' exact sums, byte for byte the ones rules::ExactSum builds
// from the same elements. Needs no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tally/kernels/aggregate.h"
#include "tally/rules/exact_moments.h"
#include "tally/rules/exact_sum.h"

namespace tally::kernels {
namespace {

using rules::Bit;
using rules::ExactSum;
using rules::OpKind;

constexpr int kWords = ResultLayout::kExactStateWords;

// A value's parts into int64 digits, as the kernels' atomics add them.
void AddParts(std::int64_t* digits, double x) {
  ExactSum::Placed p;
  if (!ExactSum::Place(x, p)) return;
  for (int k = 0; k < 3; ++k) {
    digits[p.first + k] = static_cast<std::int64_t>(static_cast<std::uint64_t>(digits[p.first + k]) +
                                                    static_cast<std::uint64_t>(p.part[k]));
  }
}

struct Filled {
  std::vector<std::int64_t> sum = std::vector<std::int64_t>(kWords, 0);
  std::vector<std::int64_t> squares = std::vector<std::int64_t>(kWords, 0);
};

// What the exact pass leaves for float64 elements `x` (valid where `valid`).
Filled Fill(const std::vector<double>& x, const std::vector<bool>& valid) {
  Filled f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!valid[i]) continue;
    ++f.sum[ResultLayout::kExactSeen];
    const double v = x[i];
    if (std::isnan(v)) {
      ++f.sum[ResultLayout::kExactNan];
      continue;
    }
    if (std::isinf(v)) {
      ++f.sum[v > 0 ? ResultLayout::kExactPositiveInf : ResultLayout::kExactNegativeInf];
      ++f.squares[ResultLayout::kExactPositiveInf];
      f.sum[ResultLayout::kExactOther] = 1;
      continue;
    }
    if (std::bit_cast<std::uint64_t>(v) != 0x8000000000000000u) f.sum[ResultLayout::kExactOther] = 1;
    AddParts(f.sum.data(), v);
    const double p = v * v;
    if (std::isinf(p)) {
      ++f.squares[ResultLayout::kExactPositiveInf];
      continue;
    }
    AddParts(f.squares.data(), p);
    AddParts(f.squares.data(), std::fma(v, v, -p));
  }
  return f;
}

TEST(ExactView, StatesReadBackAsTheRulesExactSumsWithAndWithoutAMask) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::uint32_t mask_word = 0;  // only whether a mask is there counts here
  for (const bool masked : {false, true}) {
    for (const int specials : {0, 1, 2}) {  // none; NaN and -0.0; +inf and an overflowing square
      const std::size_t n = 5003;
      std::vector<double> x(n);
      for (double& v : x) v = std::ldexp(normal(rng), static_cast<int>(rng() % 200) - 100);
      if (specials == 1) {
        x[17] = std::numeric_limits<double>::quiet_NaN();
        x[18] = -0.0;
      } else if (specials == 2) {
        x[19] = std::numeric_limits<double>::infinity();
        x[20] = 0x1p600;
      }
      std::vector<bool> valid(n, true);
      if (masked) {
        for (std::size_t i = 0; i < n; ++i) valid[i] = rng() % 4 != 0;
        valid[17] = valid[18] = valid[19] = valid[20] = true;
      }
      AggregatePlan plan;
      plan.dtype = rules::DType::kFloat64;
      plan.length = n;
      plan.exact_sums = true;
      plan.validity = masked ? &mask_word : nullptr;
      plan.ops = Bit(OpKind::kSum) | Bit(OpKind::kNanSum) | Bit(OpKind::kMean) | Bit(OpKind::kVariance) |
                 Bit(OpKind::kSumSquares) | Bit(OpKind::kNanStddev);
      const ResultLayout lay = LayoutOf(plan);
      ASSERT_NE(lay.exact_sum, ResultLayout::kAbsent);
      ASSERT_NE(lay.exact_squares, ResultLayout::kAbsent);
      EXPECT_EQ(lay.count, ResultLayout::kAbsent) << "no fused pass: the exact pass counts";
      EXPECT_EQ(ExactOps(plan), plan.ops);
      const Filled f = Fill(x, valid);
      std::vector<unsigned char> result(lay.bytes, 0xA5);  // poisoned: every read field is written below
      std::memcpy(result.data() + lay.exact_sum, f.sum.data(), kWords * 8);
      std::memcpy(result.data() + lay.exact_squares, f.squares.data(), kWords * 8);
      const ResultView v(plan, result.data());

      ExactSum sum, nansum, squares, nansquares;
      std::uint64_t count = 0, nans = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!valid[i]) continue;
        ++count;
        const double e = x[i];
        sum.Add(e);
        if (std::isnan(e)) {
          ++nans;
          squares.Add(e);
          continue;
        }
        nansum.Add(e);
        const double p = e * e;
        const double err = std::isfinite(p) ? std::fma(e, e, -p) : 0.0;
        for (ExactSum* q : {&squares, &nansquares}) {
          q->Add(p);  // one element per square; its FMA error adds value only
          if (err != 0.0) q->AddValue(err);
        }
      }
      const std::string what = std::string(masked ? "masked" : "whole") + " specials " + std::to_string(specials);
      EXPECT_EQ(v.Count(0), count) << what;
      EXPECT_EQ(v.NanCount(0), count - nans) << what;
      EXPECT_EQ(v.ExactState(false, 0).Bytes(), sum.Bytes()) << what;
      EXPECT_EQ(v.ExactState(true, 0).Bytes(), nansum.Bytes()) << what;
      const double s = sum.ToDouble(), ns = nansum.ToDouble();
      EXPECT_TRUE(std::isnan(s) ? std::isnan(v.Sum(0).f64) : std::bit_cast<std::uint64_t>(v.Sum(0).f64) ==
                                                                  std::bit_cast<std::uint64_t>(s))
          << what;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(v.NanSum(0)), std::bit_cast<std::uint64_t>(ns)) << what;
      EXPECT_EQ(v.ExactSquaresState(false, 0).Bytes(), squares.Bytes()) << what;
      if (specials == 0) {
        const rules::Moments m = v.Moments(0);
        EXPECT_EQ(m.count, static_cast<double>(count)) << what;
        EXPECT_EQ(std::bit_cast<std::uint64_t>(m.mean), std::bit_cast<std::uint64_t>(s / count)) << what;
        EXPECT_EQ(std::bit_cast<std::uint64_t>(m.m2),
                  std::bit_cast<std::uint64_t>(rules::ExactSecondMoment(sum, squares, count)))
            << what;
      }
      EXPECT_EQ(v.ExactSquaresState(true, 0).Bytes(), nansquares.Bytes()) << what;
    }
  }
}

}  // namespace
}  // namespace tally::kernels
