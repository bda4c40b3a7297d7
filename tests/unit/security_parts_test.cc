// The security parts of the front end on their own: per-identity quotas,
// admission charged to an identity, and the bearer-token file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "server/frontend/admission.h"
#include "server/frontend/identity_quota.h"
#include "server/frontend/token_file.h"

namespace tally {
namespace {

using namespace std::chrono_literals;

TEST(IdentityQuota, ChargesEachIdentitySeparatelyAndNamesTheFlagWhenOver) {
  IdentityQuota quota("--quota_streams", "streams", 2, nullptr);
  auto a1 = quota.TryCharge("alice", 1);
  auto a2 = quota.TryCharge("alice", 1);
  ASSERT_TRUE(a1.ok() && a2.ok());
  const auto a3 = quota.TryCharge("alice", 1);
  ASSERT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a3.status().message().find("--quota_streams"), absl::string_view::npos) << a3.status();
  EXPECT_NE(a3.status().message().find("'alice'"), absl::string_view::npos) << a3.status();
  EXPECT_TRUE(quota.TryCharge("bob", 2).ok());  // bob's own quota
  EXPECT_EQ(quota.used("alice"), 2u);
  a1->Release();
  EXPECT_EQ(quota.used("alice"), 1u);
  EXPECT_TRUE(quota.TryCharge("alice", 1).ok());  // released again at once: a temporary
  *a2 = IdentityQuota::Charge();                  // moved-over charges release too
  EXPECT_EQ(quota.used("alice"), 0u);
}

TEST(IdentityQuota, OversizedChargeOnlyAloneAndOnlyWhenAllowed) {
  IdentityQuota quota("--quota_inflight_bytes", "bytes in flight", 100, nullptr);
  EXPECT_FALSE(quota.TryCharge("alice", 150).ok());
  auto alone = quota.TryCharge("alice", 150, /*alone_may_exceed=*/true);
  ASSERT_TRUE(alone.ok());
  EXPECT_FALSE(quota.TryCharge("alice", 1, true).ok());
  IdentityQuota unlimited("--quota_streams", "streams", 0, nullptr);
  auto many = unlimited.TryCharge("x", 1u << 30);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(unlimited.used("x"), 1u << 30);  // counted, never refused
}

TEST(IdentityQuota, ChargeByWaitsForTheIdentitysOwnRelease) {
  IdentityQuota quota("--quota_inflight_bytes", "bytes in flight", 100, nullptr);
  auto held = quota.TryCharge("alice", 100);
  ASSERT_TRUE(held.ok());
  auto waiter = std::async(std::launch::async, [&] {
    return quota.ChargeBy("alice", 50, std::chrono::steady_clock::now() + 2s).ok();
  });
  std::this_thread::sleep_for(50ms);
  held->Release();
  EXPECT_TRUE(waiter.get());
  const auto start = std::chrono::steady_clock::now();
  auto again = quota.TryCharge("alice", 50);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(quota.ChargeBy("alice", 60, std::chrono::steady_clock::now() + 200ms).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 190ms);
}

TEST(AdmissionController, ChargesTheCallersQuotaAndRefusesNamingIt) {
  IdentityQuota per_identity("--quota_inflight_bytes", "bytes in flight", 100, nullptr);
  AdmissionController admission(1000, 50ms, &per_identity, nullptr);
  auto a = admission.TryAdmit(80, "alice");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(per_identity.used("alice"), 80u);
  const auto refused = admission.Admit(40, "alice");  // the server has room; alice does not
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--quota_inflight_bytes"), absl::string_view::npos);
  EXPECT_TRUE(admission.TryAdmit(100, "bob").ok());
  *a = AdmissionController::Ticket();
  EXPECT_EQ(per_identity.used("alice"), 0u);
  EXPECT_EQ(admission.in_flight(), 0u);
}

TEST(TokenFile, HashesWithSha256) {
  // printf %s abc | sha256sum
  EXPECT_EQ(TokenFile::Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokenFile, ParsesLinesAndRefusesMalformedOnes) {
  const std::string h = TokenFile::Sha256Hex("t");
  auto table = TokenFile::Parse("# comment\n\n" + h + "  alice   # trailing\n");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->size(), 1u);
  EXPECT_EQ(table->at(h), "alice");
  EXPECT_FALSE(TokenFile::Parse("deadbeef alice\n").ok());           // not 64 digits
  EXPECT_FALSE(TokenFile::Parse(h + "\n").ok());                     // no identity
  EXPECT_FALSE(TokenFile::Parse(h + " a b\n").ok());                 // too many fields
  EXPECT_FALSE(TokenFile::Parse(h + " a\n" + h + " b\n").ok());      // twice
  EXPECT_FALSE(TokenFile::Parse(h + " anonymous\n").ok());           // reserved
  const auto bad = TokenFile::Parse("\n" + h + " a\nzz b\n");
  EXPECT_NE(bad.status().message().find("line 3"), absl::string_view::npos) << bad.status();
}

class TokenFileOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tally-tokens-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Writes a new file and renames it over `path`, as a Secret update does.
  void Write(const std::string& text) {
    const auto tmp = dir_ / "tokens.tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path());
  }
  std::string path() const { return (dir_ / "tokens").string(); }
  std::filesystem::path dir_;
};

TEST_F(TokenFileOnDisk, ReReadsAChangedFileAndKeepsTheOldTableOnABadOne) {
  Write(TokenFile::Sha256Hex("one") + " alice\n");
  auto file = TokenFile::Open(path(), 0ms);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->Lookup("one"), "alice");
  EXPECT_EQ((*file)->Lookup("two"), std::nullopt);
  Write(TokenFile::Sha256Hex("two") + " bob\n");
  // A change is taken once it has stopped changing: at the second look.
  EXPECT_EQ((*file)->Lookup("two"), std::nullopt);
  EXPECT_EQ((*file)->Lookup("two"), "bob");
  EXPECT_EQ((*file)->Lookup("one"), std::nullopt);  // revoked
  Write("not a token line\n");
  EXPECT_EQ((*file)->Lookup("two"), "bob");
  EXPECT_EQ((*file)->Lookup("two"), "bob");  // the last good table stays
  Write("# every token revoked by mistake\n");
  EXPECT_EQ((*file)->Lookup("two"), "bob");
  EXPECT_EQ((*file)->Lookup("two"), "bob");  // an empty table is not taken either
}

TEST_F(TokenFileOnDisk, RefusesToOpenAnEmptyOrMissingFile) {
  Write("# nobody\n");
  EXPECT_FALSE(TokenFile::Open(path(), 0ms).ok());
  EXPECT_FALSE(TokenFile::Open((dir_ / "absent").string(), 0ms).ok());
}

}  // namespace
}  // namespace tally
