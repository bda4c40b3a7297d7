// The flags every subcommand takes to reach a server: where it is, TLS, a
// client certificate, and a bearer token.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "command_line.h"
#include "commands.h"
#include "tally/client/channel.h"

namespace tally::client::tool {

struct Connection {
  std::string target{kDefaultTarget};
  ChannelSecurity security;
};

// --target, --tls, --ca, --cert, --key, --tls-server-name, --token and
// --token-file. The token file is read here (its first line, trimmed), so a
// missing one is a command-line error.
[[nodiscard]] absl::Status TakeConnectionFlags(CommandLine& cl, Connection& connection);

// A channel to the connection's server, or null after printing why not
// ("tally COMMAND: ...") to stderr.
std::shared_ptr<grpc::Channel> OpenOrReport(const Connection& connection, absl::string_view command,
                                            const ChannelOptions& options = {});

// What `tally COMMAND --help` says about the flags above.
extern const absl::string_view kConnectionUsage;

}  // namespace tally::client::tool
