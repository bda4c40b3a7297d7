// Sizes with suffixes, as --size, --random and --chunk take them.
#include "tally/client/sizes.h"

#include <gtest/gtest.h>

namespace tally::client {
namespace {

TEST(ParseSize, PlainNumbers) {
  EXPECT_EQ(*ParseSize("0"), 0u);
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize(" 17 "), 17u);
  EXPECT_EQ(*ParseSize("18446744073709551615"), 18446744073709551615u);
}

TEST(ParseSize, BinarySuffixes) {
  EXPECT_EQ(*ParseSize("4K"), 4096u);
  EXPECT_EQ(*ParseSize("4k"), 4096u);
  EXPECT_EQ(*ParseSize("4KB"), 4096u);
  EXPECT_EQ(*ParseSize("4KiB"), 4096u);
  EXPECT_EQ(*ParseSize("64M"), 64u << 20);
  EXPECT_EQ(*ParseSize("1G"), 1u << 30);
  EXPECT_EQ(*ParseSize("16G"), std::uint64_t{16} << 30);  // past 2^32: 64-bit throughout
  EXPECT_EQ(*ParseSize("2T"), std::uint64_t{2} << 40);
  EXPECT_EQ(*ParseSize("512B"), 512u);
}

TEST(ParseSize, FractionsNeedASuffixAndRoundDown) {
  EXPECT_EQ(*ParseSize("1.5K"), 1536u);
  EXPECT_EQ(*ParseSize("0.5G"), 1u << 29);
  EXPECT_EQ(*ParseSize("1.0001K"), 1024u);
  EXPECT_FALSE(ParseSize("1.5").ok());
}

TEST(ParseSize, Rejects) {
  for (const char* bad : {"", "K", "-1", "4X", "4KX", "4Ki", "12abc", "1..5K", "4 K B",
                          "18446744073709551616", "16777216T", "1e3"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
  const absl::Status s = ParseSize("4X").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("4X"), absl::string_view::npos) << s;
}

TEST(FormatBytes, ThreeDigits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(4096), "4.00 KiB");
  EXPECT_EQ(FormatBytes(64 << 20), "64.0 MiB");
  EXPECT_EQ(FormatBytes(256 << 20), "256 MiB");
  EXPECT_EQ(FormatBytes(std::uint64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace tally::client
