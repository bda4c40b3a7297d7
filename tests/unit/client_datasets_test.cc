// --range's parsing and the dataset formats (tally datasets, put, rm).
#include <gtest/gtest.h>

#include "tally/client/element_range.h"
#include "tally/client/format.h"

namespace tally::client {
namespace {

TEST(ParseElementRange, BothEnds) {
  const RangeText r = *ParseElementRange("10:20");
  EXPECT_EQ(r.begin, 10u);
  ASSERT_TRUE(r.end.has_value());
  EXPECT_EQ(*r.end, 20u);
  const ElementRange e = r.Resolve(1000);
  EXPECT_EQ(e.begin, 10u);
  EXPECT_EQ(e.end, 20u);
  EXPECT_EQ(e.length(), 10u);
}

TEST(ParseElementRange, OpenEnds) {
  const RangeText to_end = *ParseElementRange("4096:");
  EXPECT_EQ(to_end.begin, 4096u);
  EXPECT_FALSE(to_end.end.has_value());
  EXPECT_EQ(to_end.Resolve(10000).end, 10000u);
  const RangeText from_start = *ParseElementRange(":7");
  EXPECT_EQ(from_start.begin, 0u);
  EXPECT_EQ(*from_start.end, 7u);
}

TEST(ParseElementRange, SuffixesSpacesEmptyAndLarge) {
  // The suffixes are ParseSize's: M a million, Mi 2^20.
  const RangeText r = *ParseElementRange(" 1M : 2M ");
  EXPECT_EQ(r.begin, 1'000'000u);
  EXPECT_EQ(*r.end, 2'000'000u);
  const RangeText binary = *ParseElementRange("1Mi:2Mi");
  EXPECT_EQ(binary.begin, 1u << 20);
  EXPECT_EQ(*binary.end, 2u << 20);
  const RangeText empty = *ParseElementRange("5:5");  // an empty range is the server's to judge
  EXPECT_EQ(empty.Resolve(10).length(), 0u);
  const RangeText big = *ParseElementRange("4Gi:8Gi");  // past 2^32 elements
  EXPECT_EQ(*big.end, std::uint64_t{8} << 30);
}

TEST(ParseElementRange, DoesNotCheckAgainstTheDataset) {
  // The server knows the length and says what is wrong in its own words.
  const ElementRange e = ParseElementRange("50:100")->Resolve(60);
  EXPECT_EQ(e.begin, 50u);
  EXPECT_EQ(e.end, 100u);
}

TEST(ParseElementRange, Rejects) {
  for (const char* bad : {"", ":", "10", "10-20", "20:10", "-5:", ":-1", "1:2:3", "a:b", "1.5:2",
                          "1:99999999999999999999"}) {
    const absl::StatusOr<RangeText> r = ParseElementRange(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  const absl::Status after = ParseElementRange("20:10").status();
  EXPECT_NE(after.message().find("20:10"), absl::string_view::npos) << after;
  EXPECT_NE(after.message().find("after"), absl::string_view::npos) << after;
  const absl::Status negative = ParseElementRange("-5:").status();
  EXPECT_NE(negative.message().find("negative"), absl::string_view::npos) << negative;
}

v1::DatasetInfo Info(const char* name, std::uint64_t length, double expires) {
  v1::DatasetInfo d;
  d.set_name(name);
  d.set_dtype(v1::DTYPE_FLOAT64);
  d.set_length(length);
  d.set_bytes(length * 8);
  d.set_place("cuda:1");
  d.set_version(42);
  d.set_created_unix_seconds(1.7e9);
  d.set_expires_unix_seconds(expires);
  d.set_queries(3);
  return d;
}

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

TEST(FormatDataset, OneLine) {
  EXPECT_EQ(FormatDatasetText(Info("temps", 1 << 20, 0), kNow),
            "temps: float64, 1048576 elements (8.00 MiB) on cuda:1, version 42, no TTL, 3 queries");
  EXPECT_EQ(FormatDatasetText(Info("t", 1, 1'700'000'000 + 599.5), kNow),
            "t: float64, 1 elements (8 B) on cuda:1, version 42, expires in 10m00s, 3 queries");
  EXPECT_NE(FormatDatasetText(Info("t", 1, 1'700'000'000 - 1), kNow).find("expires expired"),
            std::string::npos);
  v1::DatasetInfo sharded = Info("big", 1 << 20, 0);
  sharded.set_place("cuda:0,cuda:1");
  sharded.set_shards(2);
  EXPECT_EQ(FormatDatasetText(sharded, kNow),
            "big: float64, 1048576 elements (8.00 MiB) on cuda:0,cuda:1 in 2 shards, version 42, no TTL, 3 queries");
  v1::DatasetInfo rows = Info("m", 1000, 0);
  rows.set_row_length(25);
  EXPECT_EQ(FormatDatasetText(rows, kNow),
            "m: float64, 1000 elements (7.81 KiB) in rows of 25 on cuda:1, version 42, no TTL, 3 queries");
}

TEST(FormatDataset, TableOfDatasetsAndPlaces) {
  v1::ListDatasetsResponse list;
  *list.add_datasets() = Info("a-long-name", 1000, 0);
  list.mutable_datasets(0)->set_row_length(25);
  *list.add_datasets() = Info("b", 5, 1'700'000'000 + 2 * 3600 + 5 * 60);
  v1::PlaceUsage* p = list.add_places();
  p->set_place("cuda:1");
  p->set_bytes(8040);
  p->set_datasets(2);
  p->set_limit_bytes(16080);
  v1::PlaceUsage* q = list.add_places();
  q->set_place("cuda:0");
  const std::string text = FormatDatasetsText(list, kNow);
  EXPECT_EQ(text,
            "NAME         DTYPE    SHAPE     BYTES  PLACE   VERSION  EXPIRES   QUERIES\n"
            "a-long-name  float64  40x25  7.81 KiB  cuda:1       42  -               3\n"
            "b            float64      5      40 B  cuda:1       42  in 2h05m        3\n"
            "\n"
            "PLACE   DATASETS     BYTES     LIMIT   USED\n"
            "cuda:1         2  7.85 KiB  15.7 KiB  50.0%\n"
            "cuda:0         0       0 B      none      -\n");
  v1::ListDatasetsResponse empty;
  EXPECT_EQ(FormatDatasetsText(empty, kNow), "no datasets\n");
}

TEST(FormatDataset, Json) {
  v1::DatasetInfo d = Info("q\"uote", 2, 0);
  EXPECT_EQ(DatasetJson(d),
            "{\"name\":\"q\\\"uote\",\"dtype\":\"float64\",\"length\":2,\"bytes\":16,"
            "\"place\":\"cuda:1\",\"version\":42,\"created_unix_seconds\":1.7e+09,"
            "\"expires_unix_seconds\":0,\"queries\":3,\"shards\":1,\"row_length\":0}");
  v1::ListDatasetsResponse list;
  *list.add_datasets() = d;
  v1::PlaceUsage* p = list.add_places();
  p->set_place("host");
  p->set_bytes(16);
  p->set_datasets(1);
  EXPECT_EQ(FormatDatasetsJson(list),
            "{\"datasets\":[\n  " + DatasetJson(d) +
                "],\n\"places\":[\n  {\"place\":\"host\",\"datasets\":1,\"bytes\":16,\"limit_bytes\":0}]}\n");
}

}  // namespace
}  // namespace tally::client
