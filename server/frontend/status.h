// The one conversion from tally's internal absl::Status values to the
// grpc::Status a client sees.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tally {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace tally
