// The connection flags, and the channel they open.
#include "connection_flags.h"

#include <cstdio>
#include <fstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally::client::tool {

void AddConnectionFlags(CLI::App& app, ConnectionFlags& f) {
  StartGroup(app, "Connection (every command)");
  AddTextFlag(app, "--target", f.target, "HOST:PORT", "the server's address", std::string(kDefaultTarget));
  AddSwitch(app, "--tls", f.tls,
            "connect with TLS, verifying the server's certificate against --ca (default: the system's CAs)");
  AddTextFlag(app, "--ca", f.ca, "FILE", "PEM CA certificate(s) the server's certificate must chain to; implies --tls");
  AddTextFlag(app, "--cert", f.cert, "FILE",
              "PEM client certificate, for servers that ask for mutual TLS; goes with --key; implies --tls");
  AddTextFlag(app, "--key", f.key, "FILE", "the client certificate's PEM key; implies --tls");
  AddTextFlag(app, "--tls-server-name", f.server_name, "NAME",
              "the name the server's certificate must carry, when it is not --target's host; implies --tls");
  AddTextFlag(app, "--token", f.token, "TOKEN",
              "send `authorization: Bearer TOKEN` with every call (without --tls it crosses the network in clear)");
  AddTextFlag(app, "--token-file", f.token_file, "FILE",
              "the same, with the token read from FILE's first line (keeps it out of the process list and "
              "shell history)");
}

absl::StatusOr<Connection> ConnectionFlags::Resolve() const {
  Connection c;
  if (target) {
    if (target->empty()) return absl::InvalidArgumentError("--target: empty address");
    c.target = *target;
  }
  c.security.tls = tls;
  for (auto [name, value, field] :
       {std::tuple<absl::string_view, const std::optional<std::string>*, std::string*>{"--ca", &ca, &c.security.ca_file},
        {"--cert", &cert, &c.security.cert_file},
        {"--key", &key, &c.security.key_file},
        {"--tls-server-name", &server_name, &c.security.server_name}}) {
    if (!*value) continue;
    if ((*value)->empty()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
    *field = **value;
    c.security.tls = true;
  }
  if (c.security.cert_file.empty() != c.security.key_file.empty()) {
    return absl::InvalidArgumentError("--cert and --key go together");
  }
  if (token && token_file) return absl::InvalidArgumentError("give --token or --token-file, not both");
  std::optional<std::string> bearer = token;
  if (token_file) {
    std::ifstream in(*token_file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file=", *token_file, ": cannot be read"));
    }
    bearer = std::string(absl::StripAsciiWhitespace(line));
  }
  if (bearer) {
    if (bearer->empty()) return absl::InvalidArgumentError("the bearer token is empty");
    c.security.token = *bearer;
  }
  return c;
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
