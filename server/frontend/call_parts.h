// Small pieces the Aggregator service's handlers share.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/frontend/convert.h"
#include "server/engine/element_aligner.h"
#include "server/engine/reduce_pieces.h"
#include "server/frontend/raw_message.h"
#include "server/frontend/request_record.h"

namespace tally {

std::vector<OpKind> OpKinds(const AggregationPlan& plan);

// Feeds `bytes` (received host bytes) to `reduction` in order, re-blocked
// into whole elements: the pieces are cut where the receive buffers were,
// not between elements. When they hold whole elements and nothing is carried
// from earlier bytes they go to Reduction::ConsumeRuns together.
[[nodiscard]] absl::Status ConsumePieces(const SlicedBytes& bytes, ElementAligner& aligner, Reduction& reduction);

// The plan for `length` elements of `dtype` that lie where the server keeps
// them (a dataset's range, a region): rows of `row_length` (0: none), which
// must divide the length, or the segments of `offsets` (wire form; empty:
// none; `offsets_field` names it in errors), with the validity mask
// `validity` (wire form; empty: none); `where` names the elements in the
// message.
[[nodiscard]] absl::StatusOr<AggregationPlan> PlanOverElements(DType dtype, std::uint64_t length,
                                                               std::uint64_t row_length, const std::string& offsets,
                                                               const char* offsets_field, const std::string& validity,
                                                               const char* validity_field,
                                                               const AggregationList& aggregations,
                                                               const RequestLimits& limits, const char* where);

// Reduces `whole` (the plan's bytes, wherever they lie) on `backend`: the
// one-piece case of ReducePieces (server/engine/reduce_pieces.h). `record`
// (may be null) notes the phases.
[[nodiscard]] absl::StatusOr<AggregationResult> ReduceExtent(Backend& backend, const AggregationPlan& plan,
                                                             const Extent& whole,
                                                             const std::function<bool()>& cancelled,
                                                             RequestRecord* record = nullptr);

// What ReducePieces' `phase` takes: notes on `record` (nothing when null).
std::function<void(const char*)> PhaseNoter(RequestRecord* record);

// `message` into gRPC's buffer; INTERNAL if it cannot be.
[[nodiscard]] absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

}  // namespace tally
