// The listening port: a second server on a port in use refuses to start
// (with gRPC's default SO_REUSEPORT both would listen and the kernel would
// split the clients between them).
#include <string>

#include "tests/integration/hostile_fixture.h"

namespace tally::testing {
namespace {

TEST_F(HostileClientTest, ASecondServerOnAPortInUseRefusesToStart) {
  Start(ServerConfig{});
  const std::string port = std::to_string(server_->port());
  for (const std::string& address : {"127.0.0.1:" + port, "0.0.0.0:" + port}) {
    SCOPED_TRACE(address);
    ServerConfig second;
    second.backend.kind = "cpu";
    second.threads = 1;
    second.listen = address;
    absl::StatusOr<std::unique_ptr<TallyServer>> started = TallyServer::Start(second);
    ASSERT_FALSE(started.ok()) << "a second server listens on port " << port;
    EXPECT_EQ(started.status().code(), absl::StatusCode::kUnavailable) << started.status();
    EXPECT_NE(started.status().message().find("port " + port + " is in use"), std::string::npos)
        << started.status();
  }
  // The first server serves on.
  EXPECT_EQ(hostile::WellBehavedClient(channel_, 4).failures, 0);
}

}  // namespace
}  // namespace tally::testing
