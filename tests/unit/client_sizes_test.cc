// Sizes and counts with suffixes, as every flag of the tool takes them
// (--random, --range, --rows, --size, --chunk, ...): one parser, one rule.
#include "tally/client/sizes.h"

#include <gtest/gtest.h>

namespace tally::client {
namespace {

TEST(ParseSize, PlainNumbers) {
  EXPECT_EQ(*ParseSize("0"), 0u);
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize(" 17 "), 17u);
  EXPECT_EQ(*ParseSize("512B"), 512u);
  EXPECT_EQ(*ParseSize("18446744073709551615"), 18446744073709551615u);
}

TEST(ParseSize, DecimalSuffixesArePowersOf1000) {
  EXPECT_EQ(*ParseSize("1K"), 1000u);
  EXPECT_EQ(*ParseSize("1k"), 1000u);
  EXPECT_EQ(*ParseSize("4KB"), 4000u);
  EXPECT_EQ(*ParseSize("64M"), 64'000'000u);
  EXPECT_EQ(*ParseSize("1G"), 1'000'000'000u);
  EXPECT_EQ(*ParseSize("16G"), 16'000'000'000u);  // past 2^32: 64-bit throughout
  EXPECT_EQ(*ParseSize("2T"), 2'000'000'000'000u);
}

TEST(ParseSize, BinarySuffixesArePowersOf1024) {
  EXPECT_EQ(*ParseSize("1Ki"), 1024u);
  EXPECT_EQ(*ParseSize("1ki"), 1024u);
  EXPECT_EQ(*ParseSize("4KiB"), 4096u);
  EXPECT_EQ(*ParseSize("4KIB"), 4096u);
  EXPECT_EQ(*ParseSize("64Mi"), 64u << 20);
  EXPECT_EQ(*ParseSize("1Gi"), 1u << 30);
  EXPECT_EQ(*ParseSize("16Gi"), std::uint64_t{16} << 30);
  EXPECT_EQ(*ParseSize("2Ti"), std::uint64_t{2} << 40);
}

TEST(ParseSize, FractionsNeedASuffixAndAWholeResult) {
  EXPECT_EQ(*ParseSize("1.5K"), 1500u);
  EXPECT_EQ(*ParseSize("4.1K"), 4100u);  // exact: no binary floating point in between
  EXPECT_EQ(*ParseSize("1.5Ki"), 1536u);
  EXPECT_EQ(*ParseSize("0.5Gi"), 1u << 29);
  EXPECT_EQ(*ParseSize(".25M"), 250'000u);
  EXPECT_EQ(*ParseSize("1.000000001G"), 1'000'000'001u);
  const absl::Status partial = ParseSize("1.0001K").status();  // 1000.1 of anything
  EXPECT_EQ(partial.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(partial.message().find("whole"), absl::string_view::npos) << partial;
  const absl::Status plain = ParseSize("1.5").status();
  EXPECT_NE(plain.message().find("fraction needs a suffix"), absl::string_view::npos) << plain;
}

TEST(ParseSize, RejectsWithTheTextAndTheRule) {
  for (const char* bad : {"", "K", "Ki", "-1", "4X", "4KX", "4Kib2", "4iB", "12abc", "1..5K", "4 K B", ".",
                          "18446744073709551616", "18446745T", "16Ei", "1e3", "0x10"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
  const absl::Status s = ParseSize("4X").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"4X\""), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("powers of 1000"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("powers of 1024"), absl::string_view::npos) << s;
}

TEST(SizeText, IsReadBackAsTheSameNumber) {
  EXPECT_EQ(SizeText(0), "0");
  EXPECT_EQ(SizeText(999), "999");
  EXPECT_EQ(SizeText(4000), "4K");
  EXPECT_EQ(SizeText(4096), "4Ki");
  EXPECT_EQ(SizeText(64u << 20), "64Mi");
  EXPECT_EQ(SizeText(128'000'000), "128M");
  EXPECT_EQ(SizeText(std::uint64_t{4} << 30), "4Gi");
  EXPECT_EQ(SizeText(4'096'000), "4096K");  // also 4000Ki: decimal first, as typed
  EXPECT_EQ(SizeText(256'000), "256K");
  EXPECT_EQ(SizeText(1'000'001), "1000001");
  for (std::uint64_t n : {std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{1024}, std::uint64_t{3} << 40,
                          std::uint64_t{5'000'000'000'000}, std::uint64_t{12345678}, ~std::uint64_t{0}}) {
    EXPECT_EQ(*ParseSize(SizeText(n)), n) << n;
  }
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
