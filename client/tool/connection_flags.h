// The flags every subcommand takes to reach a server: where it is, TLS, a
// client certificate, and a bearer token.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "commands.h"
#include "flags.h"
#include "tally/client/channel.h"

namespace tally::client::tool {

struct Connection {
  std::string target{kDefaultTarget};
  ChannelSecurity security;
};

// --target, --tls, --ca, --cert, --key, --tls-server-name, --token and
// --token-file as given.
struct ConnectionFlags {
  std::optional<std::string> target, ca, cert, key, server_name, token, token_file;
  bool tls = false;

  // The connection they describe, checked. The token file is read here
  // (its first line, trimmed), so a missing one is a command-line error.
  [[nodiscard]] absl::StatusOr<Connection> Resolve() const;
};

// Declares the flags above on `app`, in the group "Connection".
void AddConnectionFlags(CLI::App& app, ConnectionFlags& flags);

// A channel to the connection's server, or null after printing why not
// ("tally COMMAND: ...") to stderr.
std::shared_ptr<grpc::Channel> OpenOrReport(const Connection& connection, absl::string_view command,
                                            const ChannelOptions& options = {});

}  // namespace tally::client::tool
