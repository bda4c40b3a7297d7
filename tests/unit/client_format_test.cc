// Result formatting: JSON that stays valid with NaN and infinities and keeps
// 64-bit integers exact; text that summarises rows and histograms.
#include "tally/client/format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tally/client/aggregations.h"
#include "tally/client/number_text.h"

namespace tally::client {
namespace {

v1::AggregationResult* AddResult(v1::AggregateResponse& r, const char* op) {
  v1::AggregationResult* result = r.add_results();
  *result->mutable_aggregation() = ParseAggregations(op)->at(0);
  return result;
}

v1::AggregateResponse SampleResponse() {
  v1::AggregateResponse r;
  auto* sum = AddResult(r, "sum")->mutable_doubles();
  sum->add_values(std::nan(""));
  sum->add_values(std::numeric_limits<double>::infinity());
  sum->add_values(-std::numeric_limits<double>::infinity());
  sum->add_values(0.1);
  AddResult(r, "max")->mutable_uint64s()->add_values(18446744073709551615u);
  AddResult(r, "argmin")->mutable_int64s()->add_values(-9223372036854775807 - 1);
  AddResult(r, "var:1")->mutable_doubles()->add_values(2.5);
  v1::Histogram* h = AddResult(r, "hist:3:-1:1")->mutable_histograms()->add_histograms();
  for (std::uint64_t c : {5u, 0u, 7u}) h->add_counts(c);
  h->set_below(1);
  h->set_above(2);
  h->set_nan(3);
  v1::Execution* e = r.mutable_execution();
  e->set_elements(18);
  e->set_bytes(72);
  e->set_rows(1);
  e->set_backend("cpu");
  e->set_device("Test \"CPU\"\n");
  e->set_server_seconds(0.25);
  return r;
}

TEST(DoubleText, ShortestRoundTrip) {
  EXPECT_EQ(DoubleText(0.1), "0.1");
  EXPECT_EQ(DoubleText(-2.0), "-2");
  EXPECT_EQ(DoubleText(1e300), "1e+300");
  EXPECT_EQ(DoubleText(std::nan("")), "nan");
  EXPECT_EQ(DoubleText(-std::numeric_limits<double>::infinity()), "-inf");
  const double third = 1.0 / 3.0;
  EXPECT_EQ(std::stod(DoubleText(third)), third);
}

TEST(FormatJson, ExactDocument) {
  FormatOptions o;
  o.client_seconds = 0.5;
  o.transport = "unary";
  EXPECT_EQ(FormatJson(SampleResponse(), o),
            "{\"results\":[\n"
            "  {\"op\":\"sum\",\"type\":\"float64\",\"values\":[\"nan\",\"inf\",\"-inf\",0.1]},\n"
            "  {\"op\":\"max\",\"type\":\"uint64\",\"values\":[18446744073709551615]},\n"
            "  {\"op\":\"argmin\",\"type\":\"int64\",\"values\":[-9223372036854775808]},\n"
            "  {\"op\":\"variance\",\"ddof\":1,\"type\":\"float64\",\"values\":[2.5]},\n"
            "  {\"op\":\"histogram\",\"bins\":3,\"lo\":-1,\"hi\":1,\"histograms\":"
            "[{\"counts\":[5,0,7],\"below\":1,\"above\":2,\"nan\":3}]}],\n"
            "\"execution\":{\"elements\":18,\"bytes\":72,\"rows\":1,\"backend\":\"cpu\","
            "\"device\":\"Test \\\"CPU\\\"\\n\",\"server_seconds\":0.25,"
            "\"client_seconds\":0.5,\"transport\":\"unary\"}}\n");
}

TEST(FormatJson, NoBareNanOrInfinityTokens) {
  const std::string json = FormatJson(SampleResponse());
  // Outside strings, JSON has no NaN/Infinity literals; every one must be quoted.
  for (const char* bare : {":nan", ",nan", "[nan", ":inf", ",inf", "[inf", "-inf,", "NaN",
                           "Infinity"}) {
    EXPECT_EQ(json.find(bare), std::string::npos) << bare;
  }
  EXPECT_EQ(json.find("client_seconds"), std::string::npos);  // only when known
}

TEST(FormatJson, EmptyResponseIsValid) {
  EXPECT_EQ(FormatJson(v1::AggregateResponse()),
            "{\"results\":[],\n\"execution\":{\"elements\":0,\"bytes\":0,\"rows\":0,"
            "\"backend\":\"\",\"device\":\"\",\"server_seconds\":0}}\n");
}

// Whether `text` has a line "LABEL<spaces> = VALUE" (labels are padded to
// align the values).
bool HasLine(const std::string& text, const std::string& label, const std::string& value) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    const std::string line = text.substr(begin, end - begin);
    if (line.rfind(label, 0) == 0) {
      const size_t eq = line.find_first_not_of(' ', label.size());
      if (eq != std::string::npos && line.substr(eq) == "= " + value) return true;
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return false;
}

TEST(FormatText, OneLinePerAggregation) {
  const std::string text = FormatText(SampleResponse());
  EXPECT_TRUE(HasLine(text, "sum [4 rows]", "[nan, inf, -inf, 0.1]")) << text;
  EXPECT_TRUE(HasLine(text, "max", "18446744073709551615")) << text;
  EXPECT_TRUE(HasLine(text, "argmin", "-9223372036854775808")) << text;
  EXPECT_TRUE(HasLine(text, "variance(ddof=1)", "2.5")) << text;
  EXPECT_TRUE(HasLine(text, "histogram(bins=3, lo=-1, hi=1)",
                      "12 in range, 1 below, 2 above, 3 nan; counts [5, 0, 7]"))
      << text;
  EXPECT_NE(text.find("\nexecution: 18 elements (72 B), 1 row, backend cpu on Test"),
            std::string::npos)
      << text;
}

TEST(FormatText, ManyRowsAreSummarised) {
  v1::AggregateResponse r;
  auto* values = AddResult(r, "count")->mutable_uint64s();
  for (int i = 0; i < 100; ++i) values->add_values(i);
  FormatOptions o;
  o.max_rows = 3;
  EXPECT_TRUE(HasLine(FormatText(r, o), "count [100 rows]", "[0, 1, 2, ... (97 more)]"))
      << FormatText(r, o);
  o.full = true;
  EXPECT_NE(FormatText(r, o).find(", 98, 99]"), std::string::npos);
}

TEST(FormatText, WideHistogramsShowCountsOnlyWhenFull) {
  v1::AggregateResponse r;
  v1::Histogram* h = AddResult(r, "hist:256:0:1")->mutable_histograms()->add_histograms();
  for (int i = 0; i < 256; ++i) h->add_counts(i);
  EXPECT_EQ(FormatText(r).find("counts"), std::string::npos);
  FormatOptions o;
  o.full = true;
  EXPECT_NE(FormatText(r, o).find("254, 255]"), std::string::npos);
  EXPECT_NE(FormatText(r).find("32640 in range"), std::string::npos);
}

TEST(FormatText, SegmentedHistogramsOneLinePerRow) {
  v1::AggregateResponse r;
  v1::AggregationResult* result = AddResult(r, "hist:2:0:1");
  for (int row = 0; row < 10; ++row) {
    v1::Histogram* h = result->mutable_histograms()->add_histograms();
    h->add_counts(row);
    h->add_counts(1);
  }
  FormatOptions o;
  o.max_rows = 2;
  const std::string text = FormatText(r, o);
  EXPECT_NE(text.find("histogram(bins=2, lo=0, hi=1) [10 rows]:\n  row 0: 1 in range"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  row 1: 2 in range, 0 below, 0 above, 0 nan; counts [1, 1]"),
            std::string::npos);
  EXPECT_NE(text.find("\n  ... (8 more rows)\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tally::client
