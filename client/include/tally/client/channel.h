// Channels to a tally server: plaintext, or TLS with an optional client
// certificate, and an optional bearer token sent with every call.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "absl/status/statusor.h"

namespace tally::client {

struct ChannelOptions {
  // Responses with one value per row of a large batch can be big.
  int max_receive_message_bytes = 256 * 1024 * 1024;
  // gRPC shares one connection among channels to the same target unless
  // asked not to; a load generator wants one connection per client.
  bool dedicated_connection = false;
};

// An insecure (plaintext) channel to `target` ("HOST:PORT"), with no
// credentials.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const ChannelOptions& options = {});

// How a channel proves who it talks to, and who it is.
struct ChannelSecurity {
  // TLS: the server's certificate is verified against `ca_file` (PEM), or
  // the system's roots when that is empty. Without it the channel is
  // plaintext.
  bool tls = false;
  std::string ca_file;
  // A client certificate chain and its key (PEM files), for servers that
  // ask for mutual TLS. Both or neither; they need `tls`.
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must carry when it is not the
  // target's host (connecting by IP address, or through a tunnel).
  std::string server_name;
  // Sent with every call as `authorization: Bearer <token>`; empty: none.
  // Over a plaintext channel it crosses the network in clear: use it
  // without `tls` only on a network that encrypts for you (a service mesh).
  std::string token;
};

// A channel to `target` with `security`: reads the PEM files now, and fails
// (NOT_FOUND, INVALID_ARGUMENT) naming the one that cannot be used.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& target,
                                                                         const ChannelSecurity& security,
                                                                         const ChannelOptions& options = {});

}  // namespace tally::client
