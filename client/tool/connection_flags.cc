#include "connection_flags.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally::client::tool {

const absl::string_view kConnectionUsage = R"(Connection flags (every command):
  --target=HOST:PORT      server address (default 127.0.0.1:50051)
  --tls                   connect with TLS, verifying the server's certificate
                          against --ca (default: the system's CAs)
  --ca=FILE               PEM CA certificate(s) the server's certificate must
                          chain to; implies --tls
  --cert=FILE --key=FILE  PEM client certificate and key, for servers that ask
                          for mutual TLS; imply --tls
  --tls-server-name=NAME  the name the server's certificate must carry, when
                          it is not --target's host; implies --tls
  --token=TOKEN           send `authorization: Bearer TOKEN` with every call
  --token-file=FILE       the same, with the token read from FILE's first line
                          (keeps it out of the process list and shell history)
  A token without --tls crosses the network in clear.
)";

absl::Status TakeConnectionFlags(CommandLine& cl, Connection& c) {
  if (auto t = cl.TakeString("target")) c.target = *t;
  absl::StatusOr<bool> tls = cl.TakeBool("tls");
  if (!tls.ok()) return tls.status();
  c.security.tls = *tls;
  const auto implies_tls = [&](absl::string_view name, std::string& field) -> absl::Status {
    std::optional<std::string> value = cl.TakeString(name);
    if (!value) return absl::OkStatus();
    if (value->empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    field = *value;
    c.security.tls = true;
    return absl::OkStatus();
  };
  for (auto [name, field] : {std::pair<absl::string_view, std::string*>{"ca", &c.security.ca_file},
                             {"cert", &c.security.cert_file},
                             {"key", &c.security.key_file},
                             {"tls-server-name", &c.security.server_name}}) {
    if (absl::Status s = implies_tls(name, *field); !s.ok()) return s;
  }
  if (c.security.cert_file.empty() != c.security.key_file.empty()) {
    return absl::InvalidArgumentError("--cert and --key go together");
  }
  std::optional<std::string> token = cl.TakeString("token");
  std::optional<std::string> token_file = cl.TakeString("token-file");
  if (token && token_file) return absl::InvalidArgumentError("give --token or --token-file, not both");
  if (token_file) {
    std::ifstream in(*token_file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file=", *token_file, ": cannot be read"));
    }
    token = std::string(absl::StripAsciiWhitespace(line));
  }
  if (token) {
    if (token->empty()) return absl::InvalidArgumentError("the bearer token is empty");
    c.security.token = *token;
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> OpenOrReport(const Connection& connection, absl::string_view command,
                                            const ChannelOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(connection.target, connection.security, options);
  if (!channel.ok()) {
    absl::FPrintF(stderr, "tally %s: %s\n", command, channel.status().message());
    return nullptr;
  }
  return *std::move(channel);
}

}  // namespace tally::client::tool
