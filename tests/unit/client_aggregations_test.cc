// The --ops language: every op and alias, arguments, and errors that name
// the bad token.
#include "tally/client/aggregations.h"

#include <gtest/gtest.h>

namespace tally::client {
namespace {

TEST(ParseAggregations, EveryOpAndAlias) {
  absl::StatusOr<std::vector<v1::Aggregation>> got = ParseAggregations(
      "sum,min,max,mean,count,sumsq,sum_squares,var,variance,std,stddev,argmin,argmax,"
      "hist:256:-1:1,histogram:4:0:10");
  ASSERT_TRUE(got.ok()) << got.status();
  const v1::Op expected[] = {v1::OP_SUM,         v1::OP_MIN,         v1::OP_MAX,
                             v1::OP_MEAN,        v1::OP_COUNT,       v1::OP_SUM_SQUARES,
                             v1::OP_SUM_SQUARES, v1::OP_VARIANCE,    v1::OP_VARIANCE,
                             v1::OP_STDDEV,      v1::OP_STDDEV,      v1::OP_ARGMIN,
                             v1::OP_ARGMAX,      v1::OP_HISTOGRAM,   v1::OP_HISTOGRAM};
  ASSERT_EQ(got->size(), std::size(expected));
  for (size_t i = 0; i < got->size(); ++i) EXPECT_EQ((*got)[i].op(), expected[i]) << i;
  EXPECT_EQ((*got)[13].histogram().bins(), 256u);
  EXPECT_EQ((*got)[13].histogram().lo(), -1.0);
  EXPECT_EQ((*got)[13].histogram().hi(), 1.0);
  EXPECT_EQ((*got)[14].histogram().bins(), 4u);
  EXPECT_EQ((*got)[14].histogram().hi(), 10.0);
}

TEST(ParseAggregations, DdofAndSpacesAndCase) {
  absl::StatusOr<std::vector<v1::Aggregation>> got =
      ParseAggregations(" var:1 , STD:0.5,variance , Hist:3:-2.5:1e3");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0].op(), v1::OP_VARIANCE);
  EXPECT_EQ((*got)[0].ddof(), 1.0);
  EXPECT_EQ((*got)[1].op(), v1::OP_STDDEV);
  EXPECT_EQ((*got)[1].ddof(), 0.5);
  EXPECT_EQ((*got)[2].ddof(), 0.0);
  EXPECT_EQ((*got)[3].histogram().lo(), -2.5);
  EXPECT_EQ((*got)[3].histogram().hi(), 1000.0);
}

TEST(ParseAggregations, ErrorsNameTheToken) {
  struct Case {
    const char* text;
    const char* token;  // must appear in the message
  };
  const Case cases[] = {
      {"sum,modus", "modus"},          {"sum,,max", "sum,,max"},     {"", "\"\""},
      {"sum:1", "sum:1"},            {"var:-1", "var:-1"},         {"var:x", "var:x"},
      {"var:nan", "var:nan"},        {"std:1:2", "std:1:2"},       {"hist", "hist"},
      {"hist:10:0", "hist:10:0"},    {"hist:0:0:1", "hist:0:0:1"}, {"hist:65537:0:1", "65537"},
      {"hist:10:1:0", "hist:10:1:0"}, {"hist:10:1:1", "hist:10:1:1"}, {"hist:10:0:inf", "inf"},
      {"hist:2.5:0:1", "hist:2.5"},  {"hist:-3:0:1", "hist:-3"},
      {"quantile", "quantile"},      {"quantile:1.5", "q[0] must be in [0, 1]"},
      {"quantile:0.5:cubic", "METHOD must be one of linear"}, {"topk:0", "k must be 1 to 65536"},
      {"bottomk", "bottomk"},        {"hll:3", "precision must be 4 to 18"},
      {"ddsketch:0", "relative_accuracy must be"}, {"median:0.5", "median takes no arguments"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<std::vector<v1::Aggregation>> got = ParseAggregations(c.text);
    ASSERT_FALSE(got.ok()) << c.text;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(c.token), absl::string_view::npos)
        << c.text << " -> " << got.status();
  }
}

TEST(ParseAggregations, ListsKeepTheirCommasAndMethodsTheirNames) {
  absl::StatusOr<std::vector<v1::Aggregation>> got = ParseAggregations(
      "quantile:0.5,0.99:hazen,max,q:0.25,nanquantile:0,1,topk:7,ddsketch:0.01:0.5,0.9,hll:14,count_distinct");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 8u);
  EXPECT_EQ((*got)[0].op(), v1::OP_QUANTILE);
  EXPECT_EQ((*got)[0].q_size(), 2);
  EXPECT_EQ((*got)[0].q(1), 0.99);
  EXPECT_EQ((*got)[0].method(), v1::QUANTILE_METHOD_HAZEN);
  EXPECT_EQ((*got)[1].op(), v1::OP_MAX);
  EXPECT_EQ((*got)[2].q_size(), 1);
  EXPECT_EQ((*got)[2].method(), v1::QUANTILE_METHOD_LINEAR);
  EXPECT_EQ((*got)[3].op(), v1::OP_NANQUANTILE);
  EXPECT_EQ((*got)[3].q_size(), 2);
  EXPECT_EQ((*got)[4].k(), 7u);
  EXPECT_EQ((*got)[5].relative_accuracy(), 0.01);
  EXPECT_EQ((*got)[5].q_size(), 2);
  EXPECT_EQ((*got)[6].precision(), 14u);
  EXPECT_EQ((*got)[7].op(), v1::OP_COUNT_DISTINCT);
  EXPECT_EQ(AggregationLabel((*got)[0]), "quantile(q=[0.5, 0.99], method=hazen)");
}

TEST(ParseAggregations, HistogramBinLimitsInclusive) {
  EXPECT_TRUE(ParseAggregations("hist:1:0:1").ok());
  EXPECT_TRUE(ParseAggregations("hist:65536:0:1").ok());
}

TEST(ParseAggregations, NanOpsTakeDdofWhereNumpyDoes) {
  const auto got = ParseAggregations("nansum,NaNMean,nanmin,nanmax,nanargmin,nanargmax,nanvar:1,nanstd:0.5,nancount");
  ASSERT_TRUE(got.ok()) << got.status();
  const v1::Op want[] = {v1::OP_NANSUM,    v1::OP_NANMEAN,   v1::OP_NANMIN, v1::OP_NANMAX,  v1::OP_NANARGMIN,
                         v1::OP_NANARGMAX, v1::OP_NANVAR,    v1::OP_NANSTD, v1::OP_NANCOUNT};
  ASSERT_EQ(got->size(), std::size(want));
  for (size_t i = 0; i < got->size(); ++i) EXPECT_EQ((*got)[i].op(), want[i]) << i;
  EXPECT_EQ((*got)[6].ddof(), 1.0);
  EXPECT_EQ((*got)[7].ddof(), 0.5);
  EXPECT_EQ(AggregationLabel((*got)[6]), "nanvar(ddof=1)");
  EXPECT_EQ(OpName(v1::OP_NANCOUNT), "nancount");
  EXPECT_FALSE(ParseAggregations("nansum:1").ok());
  EXPECT_FALSE(ParseAggregations("nanvar:-1").ok());
}

TEST(ParseAggregations, ProdCountNonzeroAnyAllPtp) {
  const auto got = ParseAggregations("prod,Product,count_nonzero,nnz,any,all,ptp");
  ASSERT_TRUE(got.ok()) << got.status();
  const v1::Op want[] = {v1::OP_PROD, v1::OP_PROD, v1::OP_COUNT_NONZERO, v1::OP_COUNT_NONZERO,
                         v1::OP_ANY,  v1::OP_ALL,  v1::OP_PTP};
  ASSERT_EQ(got->size(), std::size(want));
  for (size_t i = 0; i < got->size(); ++i) EXPECT_EQ((*got)[i].op(), want[i]) << i;
  EXPECT_EQ(OpName(v1::OP_PROD), "prod");
  EXPECT_EQ(OpName(v1::OP_COUNT_NONZERO), "count_nonzero");
  EXPECT_EQ(AggregationLabel((*got)[6]), "ptp");
  EXPECT_FALSE(ParseAggregations("prod:1").ok());
  EXPECT_FALSE(ParseAggregations("ptp:0").ok());
}

TEST(AggregationLabel, ShowsParameters) {
  const std::vector<v1::Aggregation> a = *ParseAggregations("sumsq,var:1,hist:8:-1:0.5");
  EXPECT_EQ(AggregationLabel(a[0]), "sum_squares");
  EXPECT_EQ(AggregationLabel(a[1]), "variance(ddof=1)");
  EXPECT_EQ(AggregationLabel(a[2]), "histogram(bins=8, lo=-1, hi=0.5)");
  EXPECT_EQ(OpName(static_cast<v1::Op>(99)), "unknown(99)");
}

// The same question: the op and the parameters its function takes, so
// nanvar's and nanstd's ddof count as var's and std's do.
TEST(SameAggregation, ComparesTheFunctionsParameters) {
  const std::vector<v1::Aggregation> a = *ParseAggregations("nanvar:1,nanvar:0,nanstd:1,nanstd:1,sum,hist:8:0:1,hist:8:0:2");
  EXPECT_FALSE(SameAggregation(a[0], a[1]));
  EXPECT_TRUE(SameAggregation(a[2], a[3]));
  EXPECT_FALSE(SameAggregation(a[0], a[2]));
  EXPECT_FALSE(SameAggregation(a[5], a[6]));
  v1::Aggregation sum_with_ddof = a[4];
  sum_with_ddof.set_ddof(3);  // not sum's parameter
  EXPECT_TRUE(SameAggregation(a[4], sum_with_ddof));
  v1::Aggregation partial = a[0];
  partial.mutable_partial()->set_base_index(10);
  EXPECT_TRUE(SameAggregation(a[0], partial));
}

// --help lists every op the parser takes, with its parameters' syntax.
TEST(OpsHelp, ListsEveryOpAndItsSyntax) {
  const std::string help = OpsHelp(4, 60);
  for (const char* word : {"sum ", "variance|var[:DDOF]", "histogram|hist:BINS:LO:HI", "nanstd[:DDOF]",
                           "count_nonzero|nnz", "ptp", "minmax", "nancount", "quantile|q:Q[,Q...][:METHOD]", "topk:K",
                           "ddsketch:ACCURACY[:Q[,Q...]]", "count_distinct|nunique"}) {
    EXPECT_NE(help.find(word), std::string::npos) << word << " in\n" << help;
  }
  std::size_t start = 0;
  while (start < help.size()) {
    const std::size_t end = help.find('\n', start);
    EXPECT_EQ(help.compare(start, 4, "    "), 0) << help;
    EXPECT_LE(end - start, 60u) << help.substr(start, end - start);
    start = end + 1;
  }
}

// Parameter errors say the field and its limit, as the server's do.
TEST(ParseAggregations, ErrorsStateTheLimit) {
  EXPECT_NE(ParseAggregations("hist:0:0:1").status().message().find("histogram.bins must be 1 to 65536, got 0"),
            absl::string_view::npos);
  EXPECT_NE(ParseAggregations("nanvar:-2").status().message().find("ddof must be finite and >= 0, got -2"),
            absl::string_view::npos);
  EXPECT_NE(ParseAggregations("hist:4:1:0").status().message().find("histogram.lo must be less than histogram.hi"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace tally::client
