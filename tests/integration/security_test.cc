// TLS, mutual TLS, bearer tokens, identities and per-identity quotas on a
// live server (cpu backend, loopback), with certificates made for the run by
// make_test_pki.sh and clients built by the client library's OpenChannel.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "server/frontend/server.h"
#include "server/frontend/token_file.h"
#include "tally/client/shared_memory.h"
#include "server/metrics/metrics.h"
#include "tally/client/client.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using client::ChannelSecurity;

// Makes a new CA with a server and a client certificate in `dir`.
void MakePki(const fs::path& dir, const std::string& client_cn = "alice") {
  const std::string command = std::string("bash ") + TALLY_MAKE_TEST_PKI + " " + dir.string() + " " + client_cn;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

v1::AggregateRequest SumOf(const std::vector<float>& values) {
  v1::AggregateRequest request;
  request.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  request.set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  request.add_aggregations()->set_op(v1::OP_SUM);
  return request;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tally-security-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }

  void Start(ServerConfig config) {
    config.listen = "127.0.0.1:0";
    config.backend.kind = "cpu";
    config.threads = 2;
    config.tls.refresh = 1s;
    config.auth.token_file_recheck = 100ms;
    auto server = TallyServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::string Target() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  // A new channel (its own connection) with `security`.
  std::shared_ptr<grpc::Channel> Channel(const ChannelSecurity& security) {
    auto channel = client::OpenChannel(Target(), security, {.dedicated_connection = true});
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? *channel : nullptr;
  }
  ChannelSecurity Tls(const fs::path& pki, bool client_cert = false) const {
    ChannelSecurity s;
    s.tls = true;
    s.ca_file = (pki / "ca.crt").string();
    if (client_cert) {
      s.cert_file = (pki / "client.crt").string();
      s.key_file = (pki / "client.key").string();
    }
    return s;
  }

  static ChannelSecurity Token(const std::string& token) {
    ChannelSecurity s;
    s.token = token;
    return s;
  }
  static TlsOptions ServerTls(const fs::path& pki, bool client_ca = false, bool require = false) {
    TlsOptions o;
    o.cert_file = (pki / "server.crt").string();
    o.key_file = (pki / "server.key").string();
    if (client_ca) o.client_ca_file = (pki / "ca.crt").string();
    o.require_client_cert = require;
    return o;
  }

  // One small Aggregate over `channel`; its status.
  static grpc::Status Sum(const std::shared_ptr<grpc::Channel>& channel) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::AggregateResponse response;
    grpc::Status status = v1::Aggregator::NewStub(channel)->Aggregate(&context, SumOf({1, 2, 3.5}), &response);
    if (status.ok()) {
      EXPECT_EQ(response.results(0).doubles().values(0), 6.5);
    }
    return status;
  }
  // grpc.health.v1 Check of the whole server over `channel`.
  static absl::StatusOr<client::ServingStatus> Health(const std::shared_ptr<grpc::Channel>& channel) {
    return client::Client(channel).CheckHealth("", absl::Seconds(5));
  }

  // The tally_requests_total sample of `method`, `code` and `identity`, or -1.
  double Requests(const std::string& method, const std::string& code, const std::string& identity) const {
    const std::string text = server_->metrics()->Scrape();
    const std::string want = "code=\"" + code + "\",identity=\"" + identity + "\",method=\"" + method + "\"} ";
    for (std::size_t at = 0; (at = text.find("tally_requests_total{", at)) != std::string::npos; ++at) {
      const std::size_t end = text.find('\n', at);
      const std::string line = text.substr(at, end - at);
      const std::size_t found = line.find(want);
      if (found != std::string::npos) return std::stod(line.substr(found + want.size()));
    }
    return -1;
  }

  // Writes a token file of `lines` (token, identity) through a rename, as a
  // Secret update replaces it.
  std::string WriteTokens(const std::vector<std::pair<std::string, std::string>>& lines) {
    const fs::path tmp = dir_ / "tokens.tmp", path = dir_ / "tokens";
    {
      std::ofstream out(tmp);
      out << "# sha256(token) identity\n";
      for (const auto& [token, identity] : lines) out << TokenFile::Sha256Hex(token) << " " << identity << "\n";
    }
    fs::rename(tmp, path);
    return path.string();
  }

  static bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(50ms);
    }
    return true;
  }

  fs::path dir_;
  std::unique_ptr<TallyServer> server_;
};

TEST_F(SecurityTest, TlsServesTlsClientsAndRefusesPlaintextOnes) {
  MakePki(dir_ / "pki");
  ServerConfig config;
  config.tls = ServerTls(dir_ / "pki");
  Start(config);
  EXPECT_TRUE(Sum(Channel(Tls(dir_ / "pki"))).ok());
  const grpc::Status plaintext = Sum(Channel(ChannelSecurity()));
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE) << plaintext.error_message();
  // A client that trusts another CA does not accept the server.
  MakePki(dir_ / "other");
  EXPECT_EQ(Sum(Channel(Tls(dir_ / "other"))).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, StartRefusesAKeyThatIsNotTheCertificates) {
  MakePki(dir_ / "a");
  MakePki(dir_ / "b");
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.backend.kind = "cpu";
  config.tls = ServerTls(dir_ / "a");
  config.tls.key_file = (dir_ / "b/server.key").string();
  auto server = TallyServer::Start(config);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("--tls_key_file"), absl::string_view::npos) << server.status();
  config.tls = ServerTls(dir_ / "a", /*client_ca=*/false, /*require=*/true);
  server = TallyServer::Start(config);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("--tls_client_ca_file"), absl::string_view::npos) << server.status();
}

TEST_F(SecurityTest, MutualTlsRequiredRefusesClientsWithoutATrustedCertificate) {
  MakePki(dir_ / "pki");
  MakePki(dir_ / "rogue");  // a client certificate from a CA the server does not trust
  ServerConfig config;
  config.tls = ServerTls(dir_ / "pki", /*client_ca=*/true, /*require=*/true);
  Start(config);
  EXPECT_TRUE(Sum(Channel(Tls(dir_ / "pki", /*client_cert=*/true))).ok());
  EXPECT_EQ(Sum(Channel(Tls(dir_ / "pki"))).error_code(), grpc::StatusCode::UNAVAILABLE);
  ChannelSecurity rogue = Tls(dir_ / "pki");
  rogue.cert_file = (dir_ / "rogue/client.crt").string();
  rogue.key_file = (dir_ / "rogue/client.key").string();
  EXPECT_EQ(Sum(Channel(rogue)).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, ClientCertificateNamesTheIdentity) {
  MakePki(dir_ / "pki", "carol");
  ServerConfig config;
  config.tls = ServerTls(dir_ / "pki", /*client_ca=*/true);  // asked for, not required
  config.auth.identity_from_client_cert = true;
  Start(config);
  EXPECT_TRUE(Sum(Channel(Tls(dir_ / "pki", true))).ok());
  EXPECT_EQ(Requests("Aggregate", "OK", "carol"), 1.0);
  const grpc::Status without = Sum(Channel(Tls(dir_ / "pki")));
  EXPECT_EQ(without.error_code(), grpc::StatusCode::UNAUTHENTICATED) << without.error_message();
  EXPECT_EQ(Requests("Aggregate", "UNAUTHENTICATED", "anonymous"), 1.0);
}

// cert-manager's Secret volume: the files are symlinks through ..data, which
// is swapped to a new directory at once.
TEST_F(SecurityTest, RotatedCertificatesServeNewConnectionsWithoutARestart) {
  MakePki(dir_ / "v1");
  MakePki(dir_ / "v2");
  fs::create_directory_symlink("v1", dir_ / "..data");
  fs::create_symlink("..data/server.crt", dir_ / "tls.crt");
  fs::create_symlink("..data/server.key", dir_ / "tls.key");
  ServerConfig config;
  config.tls.cert_file = (dir_ / "tls.crt").string();
  config.tls.key_file = (dir_ / "tls.key").string();
  Start(config);
  auto before = Channel(Tls(dir_ / "v1"));
  ASSERT_TRUE(Sum(before).ok());
  EXPECT_EQ(Sum(Channel(Tls(dir_ / "v2"))).error_code(), grpc::StatusCode::UNAVAILABLE);

  fs::create_directory_symlink("v2", dir_ / "..data_tmp");
  fs::rename(dir_ / "..data_tmp", dir_ / "..data");
  EXPECT_TRUE(Eventually([&] { return Sum(Channel(Tls(dir_ / "v2"))).ok(); }))
      << "new connections never saw the new certificate";
  EXPECT_EQ(Sum(Channel(Tls(dir_ / "v1"))).error_code(), grpc::StatusCode::UNAVAILABLE);
  // The connection made before the rotation goes on with its session.
  EXPECT_TRUE(Sum(before).ok());
}

TEST_F(SecurityTest, BearerTokensGoodBadMissingAndReRead) {
  ServerConfig config;
  config.auth.token_file = WriteTokens({{"alice-secret", "alice"}, {"bob-secret", "bob"}});
  Start(config);
  const auto with_token = [&](const std::string& token) { return Channel(Token(token)); };
  EXPECT_TRUE(Sum(with_token("alice-secret")).ok());
  EXPECT_TRUE(Sum(with_token("bob-secret")).ok());
  const grpc::Status bad = Sum(with_token("mallory"));
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(bad.error_message().find("not one the server accepts"), std::string::npos) << bad.error_message();
  const grpc::Status missing = Sum(Channel(ChannelSecurity()));
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(missing.error_message().find("no bearer token"), std::string::npos) << missing.error_message();
  // Every RPC is behind the token, the dataset calls too.
  EXPECT_EQ(client::Client(Channel(ChannelSecurity())).ListDatasets(absl::Seconds(5)).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(client::Client(with_token("bob-secret")).ListDatasets(absl::Seconds(5)).ok());

  EXPECT_EQ(Requests("Aggregate", "OK", "alice"), 1.0);
  EXPECT_EQ(Requests("Aggregate", "OK", "bob"), 1.0);
  EXPECT_EQ(Requests("Aggregate", "UNAUTHENTICATED", "anonymous"), 2.0);

  // alice's token is revoked and carol's added, without a restart.
  WriteTokens({{"bob-secret", "bob"}, {"carol-secret", "carol"}});
  EXPECT_TRUE(Eventually([&] { return Sum(with_token("carol-secret")).ok(); }));
  EXPECT_EQ(Sum(with_token("alice-secret")).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Sum(with_token("bob-secret")).ok());
}

TEST_F(SecurityTest, HealthStaysOpenAndTheHealthPortServesOnlyHealth) {
  MakePki(dir_ / "pki");
  ServerConfig config;
  config.tls = ServerTls(dir_ / "pki");
  config.auth.token_file = WriteTokens({{"t", "alice"}});
  config.health_listen = "127.0.0.1:0";
  Start(config);
  ASSERT_NE(server_->health_port(), 0);
  // No token: health answers on the TLS port...
  absl::StatusOr<client::ServingStatus> tls_health = Health(Channel(Tls(dir_ / "pki")));
  ASSERT_TRUE(tls_health.ok()) << tls_health.status();
  EXPECT_EQ(*tls_health, client::ServingStatus::kServing);
  // ...and in plaintext on the health port, which serves nothing else.
  auto plain = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->health_port()),
                                   grpc::InsecureChannelCredentials());
  absl::StatusOr<client::ServingStatus> plain_health = Health(plain);
  ASSERT_TRUE(plain_health.ok()) << plain_health.status();
  EXPECT_EQ(*plain_health, client::ServingStatus::kServing);
  EXPECT_EQ(Sum(plain).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  // The Aggregator itself still asks for the token.
  EXPECT_EQ(Sum(Channel(Tls(dir_ / "pki"))).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ChannelSecurity with_token = Tls(dir_ / "pki");
  with_token.token = "t";
  EXPECT_TRUE(Sum(Channel(with_token)).ok());
  // Draining turns both health services to NOT_SERVING.
  server_->Drain(0ms);
  plain_health = Health(plain);
  EXPECT_TRUE(!plain_health.ok() || *plain_health == client::ServingStatus::kNotServing);
}

TEST_F(SecurityTest, StreamQuotaIsPerIdentityAndNamesItsFlag) {
  ServerConfig config;
  config.auth.token_file = WriteTokens({{"a", "alice"}, {"b", "bob"}});
  config.quotas.streams = 1;
  config.service.stream_idle_timeout = 0ms;
  config.service.stream_min_bytes_per_second = 0;
  Start(config);
  auto alice = v1::Aggregator::NewStub(Channel(Token("a")));
  auto bob = v1::Aggregator::NewStub(Channel(Token("b")));
  v1::AggregateStreamRequest header;
  header.mutable_header()->mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  header.mutable_header()->mutable_spec()->set_length(2);
  header.mutable_header()->add_aggregations()->set_op(v1::OP_SUM);
  v1::AggregateStreamRequest chunk;
  const std::vector<float> two = {1.5f, 2.0f};
  chunk.set_chunk(std::string(reinterpret_cast<const char*>(two.data()), sizeof(float) * 2));

  grpc::ClientContext held_context;
  v1::AggregateResponse held_response;
  auto held = alice->AggregateStream(&held_context, &held_response);
  ASSERT_TRUE(held->Write(header));
  ASSERT_TRUE(Eventually([&] { return server_->quotas().streams.used("alice") == 1; }));

  const auto stream = [&](v1::Aggregator::Stub& stub) {
    grpc::ClientContext context;
    v1::AggregateResponse response;
    auto writer = stub.AggregateStream(&context, &response);
    if (writer->Write(header)) writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  };
  const grpc::Status second = stream(*alice);
  EXPECT_EQ(second.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(second.error_message().find("--quota_streams"), std::string::npos) << second.error_message();
  EXPECT_TRUE(stream(*bob).ok());  // bob has a quota of his own

  ASSERT_TRUE(held->Write(chunk));
  held->WritesDone();
  ASSERT_TRUE(held->Finish().ok());
  EXPECT_EQ(held_response.results(0).doubles().values(0), 3.5);
  EXPECT_EQ(server_->quotas().streams.used("alice"), 0u);
  EXPECT_TRUE(stream(*alice).ok());
  EXPECT_GE(Requests("AggregateStream", "RESOURCE_EXHAUSTED", "alice"), 1.0);
  const std::string scrape = server_->metrics()->Scrape();
  EXPECT_NE(scrape.find("tally_quota_rejections_total{backend=\"cpu\",quota=\"quota_streams\"} 1"),
            std::string::npos);
}

TEST_F(SecurityTest, DatasetQuotaHoldsUntilTheMemoryIsFreed) {
  ServerConfig config;
  config.auth.token_file = WriteTokens({{"a", "alice"}, {"b", "bob"}});
  config.quotas.dataset_bytes = 4000 + DatasetStore::kOverheadBytes;  // one dataset of up to 4000 bytes
  Start(config);
  client::Client alice(Channel(Token("a")));
  client::Client bob(Channel(Token("b")));
  const std::vector<float> values(800, 0.25f);  // 3200 bytes
  client::ArrayRef array;
  array.data = reinterpret_cast<const std::byte*>(values.data());
  array.length = values.size();
  ASSERT_TRUE(alice.PutDataset("first", array).ok());
  EXPECT_EQ(server_->quotas().dataset_bytes.used("alice"), 3200u + DatasetStore::kOverheadBytes);
  const auto refused = alice.PutDataset("second", array);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--quota_dataset_bytes"), absl::string_view::npos) << refused.status();
  EXPECT_FALSE(alice.DescribeDataset("second").ok());  // nothing left behind
  ASSERT_TRUE(bob.PutDataset("second", array).ok());
  // Anyone may delete a dataset; the charge goes back to its uploader when
  // the memory is freed (on the store's own thread).
  ASSERT_TRUE(bob.DeleteDataset("first").ok());
  EXPECT_TRUE(Eventually([&] { return server_->quotas().dataset_bytes.used("alice") == 0; }));
  EXPECT_TRUE(alice.PutDataset("third", array).ok());
}

TEST_F(SecurityTest, RegionCallsAuthenticateAndRegionQuotaIsPerIdentity) {
  ServerConfig config;
  config.auth.token_file = WriteTokens({{"a", "alice"}, {"b", "bob"}});
  config.quotas.region_bytes = 6000;
  Start(config);
  auto object = client::SharedMemoryObject::Create(client::SharedMemoryObject::UniqueName("quota"), 8192);
  ASSERT_TRUE(object.ok()) << object.status();
  client::Client nobody(Channel(ChannelSecurity{}));
  client::Client alice(Channel(Token("a")));
  client::Client bob(Channel(Token("b")));
  EXPECT_EQ(nobody.RegisterHostRegion("r", (*object)->name(), 0, 100).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(nobody.ListRegions().status().code(), absl::StatusCode::kUnauthenticated);
  ASSERT_TRUE(alice.RegisterHostRegion("a1", (*object)->name(), 0, 4000).ok());
  const auto refused = alice.RegisterHostRegion("a2", (*object)->name(), 0, 4000);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--quota_region_bytes"), absl::string_view::npos) << refused.status();
  EXPECT_EQ(alice.ListRegions()->regions_size(), 1);  // nothing left behind
  ASSERT_TRUE(bob.RegisterHostRegion("b1", (*object)->name(), 0, 4000).ok());
  EXPECT_EQ(server_->quotas().region_bytes.used("alice"), 4000u);
  ASSERT_TRUE(bob.UnregisterRegion("a1").ok());  // anyone may; the charge goes back to alice
  EXPECT_TRUE(Eventually([&] { return server_->quotas().region_bytes.used("alice") == 0; }));
  EXPECT_TRUE(alice.RegisterHostRegion("a2", (*object)->name(), 0, 4000).ok());
}

}  // namespace
}  // namespace tally::testing
