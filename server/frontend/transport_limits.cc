#include "server/frontend/transport_limits.h"

#include <climits>

#include "grpcpp/server_builder.h"

namespace tally {
namespace {

// gRPC takes times as int milliseconds; 0 means "never" here, INT_MAX there.
int Milliseconds(std::chrono::seconds s) {
  if (s.count() <= 0 || s.count() > INT_MAX / 1000) return INT_MAX;
  return static_cast<int>(s.count() * 1000);
}

}  // namespace

void ApplyTransportLimits(const TransportOptions& o, grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, o.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, Milliseconds(o.max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, Milliseconds(o.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, Milliseconds(o.max_connection_age_grace));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(o.keepalive));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Milliseconds(o.keepalive_timeout));
  // Enforcement of the clients' pings: at most one per interval, even on a
  // connection without calls (which max_connection_idle closes in time);
  // gRPC's default of two strikes before GOAWAY stays.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Here 0 means no minimum, as it does for gRPC.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             o.min_client_ping_interval.count() <= 0 ? 0 : Milliseconds(o.min_client_ping_interval));
}

}  // namespace tally
