// The one conversion from gRPC's status to absl's.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace tally::client {

// Payload key for the server's binary error details (a serialized
// google.rpc.Status), when it sent any.
inline constexpr absl::string_view kGrpcErrorDetailsTypeUrl =
    "type.googleapis.com/google.rpc.Status";

// Keeps the code (the two enums share the canonical numbering), the
// server's message, and its error details as a payload.
[[nodiscard]] absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tally::client
