// Partial states through the real server and the C++ client: an array cut
// into parts, each part's states asked for with Aggregate, AggregateStream
// or AggregateDataset, merged (in two different trees) and finished, must
// give the one-shot answer over the whole array: exactly for integers,
// counts, extremes, indices and histograms, and to rounding for float sums
// and moments. One part alone, finished, is bitwise the server's answer.
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tally/client/client.h"
#include "tally/client/partial.h"
#include "tally/client/wire.h"
#include "tests/integration/server_fixture.h"

namespace tally::testing {
namespace {

using client::ArrayRef;

// Every op with a partial state: the plain ones, then the NaN-skipping ones
// (on integers those are the plain ops; on floats with NaNs a part of one
// element may be all NaN).
std::vector<v1::Aggregation> AllOps() {
  v1::Aggregation var = Op(v1::OP_VARIANCE), std1 = Op(v1::OP_STDDEV), nanstd1 = Op(v1::OP_NANSTD);
  std1.set_ddof(1.0);
  nanstd1.set_ddof(1.0);
  return {Op(v1::OP_SUM),    Op(v1::OP_MIN),         Op(v1::OP_MAX), Op(v1::OP_MEAN),   Op(v1::OP_COUNT),
          Op(v1::OP_SUM_SQUARES), var, std1,        Op(v1::OP_ARGMIN), Op(v1::OP_ARGMAX), Hist(33, -4.5, 7.25),
          Op(v1::OP_NANSUM), Op(v1::OP_NANMEAN), Op(v1::OP_NANMIN), Op(v1::OP_NANMAX), Op(v1::OP_NANARGMIN),
          Op(v1::OP_NANARGMAX), Op(v1::OP_NANVAR), nanstd1, Op(v1::OP_NANCOUNT)};
}

// Values with ties across parts (small integers) or floats with a spread
// and, when asked, NaNs.
std::vector<std::byte> RandomBytes(rules::DType dtype, std::uint64_t n, std::mt19937_64& rng, bool nans) {
  std::vector<std::byte> out(n * rules::SizeOf(dtype));
  rules::VisitDType(dtype, [&](auto dt) {
    using V = typename rules::Traits<decltype(dt)::value>::value;
    V* v = reinterpret_cast<V*>(out.data());
    for (std::uint64_t i = 0; i < n; ++i) {
      if constexpr (rules::kIsFloatValue<V>) {
        v[i] = static_cast<V>(std::uniform_real_distribution<double>(-6.0, 9.0)(rng) * 100.0 + 1e3);
        if (nans && rng() % 50000 == 0) v[i] = std::numeric_limits<V>::quiet_NaN();
      } else {
        v[i] = static_cast<V>(std::uniform_int_distribution<int>(std::is_signed_v<V> ? -5 : 0, 9)(rng));
      }
    }
  });
  return out;
}

// Sum of |x| over each row, the scale float sums are compared at.
std::vector<double> AbsSums(rules::DType dtype, const std::vector<std::byte>& bytes, std::uint64_t rows,
                            std::uint64_t row_length) {
  std::vector<double> out(rows, 0.0);
  rules::VisitDType(dtype, [&](auto dt) {
    using V = typename rules::Traits<decltype(dt)::value>::value;
    const V* v = reinterpret_cast<const V*>(bytes.data());
    for (std::uint64_t r = 0; r < rows; ++r)
      for (std::uint64_t c = 0; c < row_length; ++c) {
        const double x = static_cast<double>(v[r * row_length + c]);
        if (!std::isnan(x)) out[r] += std::fabs(x);  // the NaN-skipping sums' scale
      }
  });
  return out;
}

// Columns [c0, c1) of every row.
std::vector<std::byte> Columns(const std::vector<std::byte>& bytes, std::size_t size, std::uint64_t rows,
                               std::uint64_t row_length, std::uint64_t c0, std::uint64_t c1) {
  std::vector<std::byte> out;
  out.reserve(rows * (c1 - c0) * size);
  for (std::uint64_t r = 0; r < rows; ++r) {
    const std::byte* p = bytes.data() + (r * row_length + c0) * size;
    out.insert(out.end(), p, p + (c1 - c0) * size);
  }
  return out;
}

class PartialTest : public ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    client_ = std::make_unique<client::Client>(channel_);
  }

  v1::AggregateResponse Whole(const ArrayRef& a, const std::vector<v1::Aggregation>& ops) {
    absl::StatusOr<v1::AggregateResponse> r = client_->Aggregate(a, ops);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::AggregateResponse{};
  }

  // The part's states: part 0 unary, part 1 streamed in small chunks, part
  // 2 through a dataset holding it.
  v1::AggregateResponse Part(int how, const ArrayRef& a, std::uint64_t base) {
    const std::vector<v1::Aggregation> ops = client::AsPartial(AllOps(), base);
    absl::StatusOr<v1::AggregateResponse> r;
    if (how < 2) {
      client::CallOptions options;
      options.stream = how == 0 ? client::StreamMode::kNever : client::StreamMode::kAlways;
      options.chunk_bytes = 65537;
      r = client_->Aggregate(a, ops, options);
    } else {
      const std::string name = "part" + std::to_string(++datasets_);
      absl::StatusOr<v1::PutDatasetResponse> put = client_->PutDataset(name, a);
      EXPECT_TRUE(put.ok()) << put.status();
      r = client_->AggregateDataset(name, std::nullopt, a.row_length, ops);
    }
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::AggregateResponse{};
  }

  std::unique_ptr<client::Client> client_;
  int datasets_ = 0;
};

// Compares a finished response with the one-shot answer, op by op.
void ExpectSameAnswers(const v1::AggregateResponse& got, const v1::AggregateResponse& want,
                       const std::vector<double>& abs_sums, std::uint64_t row_length, const std::string& what) {
  ASSERT_EQ(got.results_size(), want.results_size()) << what;
  for (int i = 0; i < want.results_size(); ++i) {
    const v1::AggregationResult &g = got.results(i), &w = want.results(i);
    const v1::Op op = w.aggregation().op();
    const std::string label = what + " op " + v1::Op_Name(op);
    if (!w.has_doubles() || op == v1::OP_MIN || op == v1::OP_MAX || op == v1::OP_NANMIN || op == v1::OP_NANMAX) {
      // Integers, counts, extremes, indices, histograms: exact (bitwise:
      // both sides send one canonical NaN).
      EXPECT_EQ(g.SerializeAsString(), w.SerializeAsString())
          << label << "\n got: " << g.ShortDebugString() << "\nwant: " << w.ShortDebugString();
      continue;
    }
    ASSERT_TRUE(g.has_doubles()) << label;
    ASSERT_EQ(g.doubles().values_size(), w.doubles().values_size()) << label;
    for (int r = 0; r < w.doubles().values_size(); ++r) {
      const double a = g.doubles().values(r), b = w.doubles().values(r);
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a)) << label << " row " << r;
        continue;
      }
      // tally.proto: float sums and moments agree to rounding. Sums at
      // 1e-12 of sum|x| (means of its 1/n), positive moments relatively.
      double tolerance = 1e-12 * std::fabs(b);
      if (op == v1::OP_SUM || op == v1::OP_NANSUM) tolerance = 1e-12 * abs_sums[r];
      if (op == v1::OP_MEAN || op == v1::OP_NANMEAN) tolerance = 1e-12 * abs_sums[r] / static_cast<double>(row_length);
      EXPECT_NEAR(a, b, tolerance) << label << " row " << r;
    }
  }
}

struct Case {
  rules::DType dtype;
  bool rows;
  bool nans;
};

class PartialCaseTest : public PartialTest, public ::testing::WithParamInterface<Case> {};

TEST_P(PartialCaseTest, MergedPartsFinishToTheWholeArraysAnswer) {
  const Case c = GetParam();
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::uint64_t rows = c.rows ? 23 : 1, row_length = c.rows ? 20011 : 300007;
  const std::size_t size = rules::SizeOf(c.dtype);
  const std::vector<std::byte> bytes = RandomBytes(c.dtype, rows * row_length, rng, c.nans);
  const ArrayRef whole{c.dtype, bytes.data(), rows * row_length, c.rows ? row_length : 0};
  const v1::AggregateResponse want = Whole(whole, AllOps());

  // Cuts inside blocks and chunks, and a part of one element.
  const std::uint64_t cuts[] = {0, 1, row_length / 3 + 7, row_length};
  std::vector<std::vector<std::byte>> parts;
  std::vector<v1::AggregateResponse> states;
  for (int k = 0; k < 3; ++k) {
    parts.push_back(Columns(bytes, size, rows, row_length, cuts[k], cuts[k + 1]));
    const std::uint64_t n = cuts[k + 1] - cuts[k];
    const ArrayRef part{c.dtype, parts.back().data(), rows * n, c.rows ? n : 0};
    states.push_back(Part(k, part, cuts[k]));
  }
  const std::vector<double> abs_sums = AbsSums(c.dtype, bytes, rows, row_length);

  auto left = client::MergeResponses(states[0], states[1]);
  ASSERT_TRUE(left.ok()) << left.status();
  left = client::MergeResponses(*left, states[2]);
  ASSERT_TRUE(left.ok()) << left.status();
  auto right = client::MergeResponses(states[1], states[2]);
  ASSERT_TRUE(right.ok()) << right.status();
  right = client::MergeResponses(states[0], *right);
  ASSERT_TRUE(right.ok()) << right.status();

  for (const auto* merged : {&*left, &*right}) {
    absl::StatusOr<v1::AggregateResponse> finished = client::FinishResponse(*merged);
    ASSERT_TRUE(finished.ok()) << finished.status();
    ExpectSameAnswers(*finished, want, abs_sums, row_length, merged == &*left ? "(a+b)+c" : "a+(b+c)");
  }
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(rules::Name(info.param.dtype)) + (info.param.rows ? "_rows" : "_whole") +
         (info.param.nans ? "_nans" : "");
}

INSTANTIATE_TEST_SUITE_P(
    EveryDtype, PartialCaseTest,
    ::testing::Values(Case{rules::DType::kFloat32, false, false}, Case{rules::DType::kFloat32, true, false},
                      Case{rules::DType::kFloat64, false, false}, Case{rules::DType::kFloat64, true, true},
                      Case{rules::DType::kFloat32, false, true}, Case{rules::DType::kInt32, false, false},
                      Case{rules::DType::kInt32, true, false}, Case{rules::DType::kInt64, false, false},
                      Case{rules::DType::kInt64, true, false}, Case{rules::DType::kUInt32, false, false},
                      Case{rules::DType::kUInt32, true, false}, Case{rules::DType::kUInt8, false, false},
                      Case{rules::DType::kUInt8, true, false}),
    CaseName);

TEST_F(PartialTest, OnePartFinishedIsBitwiseTheServersAnswer) {
  std::mt19937_64 rng(std::random_device{}());
  for (rules::DType dtype : rules::kAllDTypes) {
    for (const std::uint64_t row_length : {std::uint64_t{0}, std::uint64_t{4099}}) {
      const std::vector<std::byte> bytes = RandomBytes(dtype, 4099 * 9, rng, dtype == rules::DType::kFloat64);
      const ArrayRef a{dtype, bytes.data(), 4099 * 9, row_length};
      const v1::AggregateResponse want = Whole(a, AllOps());
      absl::StatusOr<v1::AggregateResponse> part = client_->Aggregate(a, client::AsPartial(AllOps(), 0));
      ASSERT_TRUE(part.ok()) << part.status();
      absl::StatusOr<v1::AggregateResponse> finished = client::FinishResponse(*part);
      ASSERT_TRUE(finished.ok()) << finished.status();
      for (int i = 0; i < want.results_size(); ++i) {
        EXPECT_EQ(finished->results(i).SerializeAsString(), want.results(i).SerializeAsString())
            << rules::Name(dtype) << " row_length " << row_length << " "
            << want.results(i).aggregation().ShortDebugString();
      }
    }
  }
}

TEST_F(PartialTest, AnEmptyPartIsTheIdentityAndEmptyExtremesHaveNoValue) {
  const std::vector<std::int32_t> v = {4, -2, 7, -2, 7};
  const ArrayRef a{rules::DType::kInt32, reinterpret_cast<const std::byte*>(v.data()), v.size(), 0};
  const ArrayRef empty{rules::DType::kInt32, nullptr, 0, 0};
  absl::StatusOr<v1::AggregateResponse> full = client_->Aggregate(a, client::AsPartial(AllOps(), 10));
  absl::StatusOr<v1::AggregateResponse> none = client_->Aggregate(empty, client::AsPartial(AllOps(), 0));
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE(none.ok()) << none.status();
  for (const auto& pair : {std::pair(*full, *none), std::pair(*none, *full)}) {
    absl::StatusOr<v1::AggregateResponse> merged = client::MergeResponses(pair.first, pair.second);
    ASSERT_TRUE(merged.ok()) << merged.status();
    absl::StatusOr<v1::AggregateResponse> f = client::FinishResponse(*merged);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->results(0).int64s().values(0), 14);   // sum
    EXPECT_EQ(f->results(1).int64s().values(0), -2);   // min
    EXPECT_EQ(f->results(8).int64s().values(0), 11);   // argmin: first -2, offset by the base 10
    EXPECT_EQ(f->results(9).int64s().values(0), 12);   // argmax: first 7
  }
  const absl::StatusOr<v1::AggregateResponse> alone = client::FinishResponse(*none);
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kInvalidArgument) << alone.status();
}

TEST_F(PartialTest, MismatchedOrUnknownStatesAreRefused) {
  const std::vector<double> v = {1.5, -2.0, 3.25};
  const ArrayRef a{rules::DType::kFloat64, reinterpret_cast<const std::byte*>(v.data()), v.size(), 0};
  auto hist = [&](double hi) {
    absl::StatusOr<v1::AggregateResponse> r = client_->Aggregate(a, client::AsPartial({Hist(4, -3, hi)}, 0));
    EXPECT_TRUE(r.ok()) << r.status();
    return r->results(0);
  };
  EXPECT_EQ(client::MergePartials(hist(4), hist(5)).status().code(), absl::StatusCode::kInvalidArgument);
  v1::AggregationResult future = hist(4);
  future.mutable_partials()->set_version(2);
  EXPECT_EQ(client::MergePartials(hist(4), future).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client::FinishPartials(future).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<v1::AggregateResponse> values = client_->Aggregate(a, {Hist(4, -3, 4)});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(client::MergePartials(values->results(0), hist(4)).status().code(), absl::StatusCode::kInvalidArgument);

  // The last index, base_index + length - 1, must fit in int64.
  const absl::StatusOr<v1::AggregateResponse> too_far =
      client_->Aggregate(a, client::AsPartial({Op(v1::OP_ARGMAX)}, std::numeric_limits<std::int64_t>::max() - 2));
  EXPECT_EQ(too_far.status().code(), absl::StatusCode::kInvalidArgument) << too_far.status();
  const absl::StatusOr<v1::AggregateResponse> fits =
      client_->Aggregate(a, client::AsPartial({Op(v1::OP_ARGMAX)}, std::numeric_limits<std::int64_t>::max() - 3));
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->results(0).partials().states(0).index(), std::numeric_limits<std::int64_t>::max() - 1);
}

}  // namespace
}  // namespace tally::testing
