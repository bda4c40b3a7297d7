// Channels: plaintext, or TLS from PEM files, with the bearer token added to
// every call by an interceptor.
#include "tally/client/channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tally::client {
namespace {

grpc::ChannelArguments ArgumentsOf(const ChannelOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  if (options.dedicated_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

absl::StatusOr<std::string> ReadPem(absl::string_view what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " ", path, ": cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": is not a PEM file"));
  }
  return text.str();
}

// Adds the bearer token to every call's metadata. An interceptor rather than
// call credentials: gRPC sends call credentials over TLS only, and a token
// may also travel over a plaintext connection that a mesh encrypts.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token) : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;  // lives as long as the channel, which owns the factory
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const ChannelOptions& options) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), ArgumentsOf(options));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& target,
                                                           const ChannelSecurity& security,
                                                           const ChannelOptions& options) {
  grpc::ChannelArguments args = ArgumentsOf(options);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!security.tls) {
    if (!security.ca_file.empty() || !security.cert_file.empty() || !security.key_file.empty() ||
        !security.server_name.empty()) {
      return absl::InvalidArgumentError("a CA, client certificate, key or server name needs TLS");
    }
  } else {
    if (security.cert_file.empty() != security.key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate needs its key, and a key its certificate");
    }
    grpc::SslCredentialsOptions ssl;
    if (!security.ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadPem("CA file", security.ca_file);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    if (!security.cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadPem("certificate file", security.cert_file);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("key file", security.key_file);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
    if (!security.server_name.empty()) args.SetSslTargetNameOverride(security.server_name);
  }
  if (security.token.empty()) return grpc::CreateCustomChannel(target, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<BearerTokenFactory>(security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, credentials, args,
                                                                 std::move(interceptors));
}

}  // namespace tally::client
