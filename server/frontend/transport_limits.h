// gRPC's own limits on connections and streams, set deliberately instead of
// left at gRPC's defaults (unlimited streams per connection, connections
// that stay open forever, client pings as often as a client likes): each
// bounds what one client can hold open, or make the server do, without
// sending requests.
#pragma once

#include <chrono>

namespace grpc {
class ServerBuilder;
}

namespace tally {

struct TransportOptions {
  // Streams (calls) one HTTP/2 connection may have open at once; a client
  // that wants more waits for one to end. 100 is the HTTP/2 specification's
  // recommended minimum. At least 1.
  int max_concurrent_streams = 100;
  // A connection with no call in progress for this long is closed (GOAWAY);
  // clients reconnect when they next call. 0: never.
  std::chrono::seconds max_connection_idle{300};
  // A connection older than this (plus gRPC's +-10% jitter) is asked to go
  // away: calls in progress get max_connection_age_grace to finish, new ones
  // go to a new connection, which also spreads clients over new replicas.
  // 0: never.
  std::chrono::seconds max_connection_age{1800};
  std::chrono::seconds max_connection_age_grace{600};
  // The server pings a connection that has been quiet this long, and closes
  // it if no answer comes within keepalive_timeout: dead clients' calls go.
  // 0: no pings.
  std::chrono::seconds keepalive{60};
  std::chrono::seconds keepalive_timeout{20};
  // Clients may ping at most this often (with or without calls in progress);
  // one that pings more often is told to go away (GOAWAY too_many_pings).
  // 0: no minimum.
  std::chrono::seconds min_client_ping_interval{10};
  // New connections are refused while fewer file descriptors than this are
  // left under the process's limit (at most a quarter of the limit), so
  // the listener is never the call that runs out (ConnectionGate).
  int min_free_fds = 0;  // 0: gRPC's own listener (see --min_free_file_descriptors)
};

void ApplyTransportLimits(const TransportOptions& options, grpc::ServerBuilder& builder);

}  // namespace tally
