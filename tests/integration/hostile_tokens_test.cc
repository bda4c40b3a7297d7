// A careless operator's token file: rewritten in place (truncated, then
// written) under load, or left empty. Neither locks a listed identity out:
// a changed file is taken once it has stopped changing, and an empty or
// malformed one leaves the last good tokens in force, logged once.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "server/frontend/token_file.h"
#include "tests/integration/hostile_fixture.h"

namespace tally::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class HostileTokenFileTest : public HostileClientTest {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tally-tokens-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    path_ = dir_ / "tokens";
  }
  void TearDown() override {
    HostileClientTest::TearDown();
    fs::remove_all(dir_);
  }

  static std::string Line(const std::string& token, const std::string& identity) {
    return TokenFile::Sha256Hex(token) + " " + identity + "\n";
  }

  grpc::Status Sum(const std::string& token) {
    v1::AggregateRequest req;
    req.mutable_spec()->set_dtype(v1::DTYPE_INT32);
    req.set_data(std::string(16, '\1'));
    *req.add_aggregations() = Op(v1::OP_SUM);
    v1::AggregateResponse resp;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    return stub_->Aggregate(&ctx, req, &resp);
  }

  fs::path dir_, path_;
};

TEST_F(HostileTokenFileTest, RewritesInPlaceAndEmptyFilesKeepTheLastGoodTokens) {
  LogCapture& log = CaptureLog();
  const std::string both = Line("alice-secret", "alice") + Line("bob-secret", "bob");
  std::ofstream(path_) << both;
  ServerConfig config;
  config.auth.token_file = path_.string();
  // Far longer than the writer's pauses below, as any real writer's are.
  config.auth.token_file_recheck = 100ms;
  Start(config);
  ASSERT_TRUE(Sum("alice-secret").ok());
  ASSERT_TRUE(Sum("bob-secret").ok());

  // The file rewritten in place, again and again: truncated (empty for a
  // moment), then alice's line, then bob's a few milliseconds later.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop) {
      std::ofstream out(path_, std::ios::trunc);
      out.flush();
      std::this_thread::sleep_for(3ms);
      out << Line("alice-secret", "alice") << std::flush;
      std::this_thread::sleep_for(3ms);
      out << Line("bob-secret", "bob");
      out.close();
      std::this_thread::sleep_for(30ms);
    }
  });
  int calls = 0, failed = 0;
  for (const auto end = std::chrono::steady_clock::now() + 2s; std::chrono::steady_clock::now() < end; ++calls) {
    failed += !Sum(calls % 2 ? "alice-secret" : "bob-secret").ok();
  }
  stop = true;
  writer.join();
  EXPECT_EQ(failed, 0) << failed << " of " << calls << " calls of listed identities failed while the file was "
                       << "rewritten in place";

  // Emptied: the tokens read before stay, and the log says why, once. (A
  // writer paused by a loaded machine may have left an empty file for a
  // while above too, refused just the same.)
  const std::size_t said = log.Lines("holds no token", spdlog::level::warn).size();
  std::ofstream(path_, std::ios::trunc).close();
  failed = 0;
  for (const auto end = std::chrono::steady_clock::now() + 500ms; std::chrono::steady_clock::now() < end;) {
    failed += !Sum("alice-secret").ok() + !Sum("bob-secret").ok();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(log.Lines("holds no token", spdlog::level::warn).size(), said + 1);

  // Written whole and renamed into place, as the README says: taken.
  std::ofstream(dir_ / "tokens.tmp") << Line("carol-secret", "carol");
  fs::rename(dir_ / "tokens.tmp", path_);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!Sum("carol-secret").ok() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(Sum("carol-secret").ok());
  EXPECT_EQ(Sum("alice-secret").error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace tally::testing
