// Small pieces the Aggregator service's handlers share.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/frontend/element_aligner.h"
#include "server/frontend/raw_message.h"

namespace tally {

std::vector<OpKind> OpKinds(const AggregationPlan& plan);

// Feeds `bytes` (received host bytes) to `reduction` in order, re-blocked
// into whole elements: the pieces are cut where the receive buffers were,
// not between elements.
[[nodiscard]] absl::Status ConsumePieces(const SlicedBytes& bytes, ElementAligner& aligner, Reduction& reduction);

// `message` into gRPC's buffer; INTERNAL if it cannot be.
[[nodiscard]] absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

}  // namespace tally
