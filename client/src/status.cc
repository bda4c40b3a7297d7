// gRPC status -> absl status.
#include "tally/client/status.h"

#include "absl/strings/cord.h"

namespace tally::client {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode both use the canonical codes
  // (google.rpc.Code), so the value carries over unchanged.
  absl::Status result(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (!status.error_details().empty()) {
    result.SetPayload(kGrpcErrorDetailsTypeUrl, absl::Cord(status.error_details()));
  }
  return result;
}

}  // namespace tally::client
