#include "server/frontend/call_parts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/engine/received_memory.h"

namespace tally {

std::vector<OpKind> OpKinds(const AggregationPlan& plan) {
  if (!plan.asked.empty()) return plan.asked;
  std::vector<OpKind> kinds;
  kinds.reserve(plan.ops.size());
  for (const OpSpec& op : plan.ops) kinds.push_back(op.kind);
  return kinds;
}

absl::Status ConsumePieces(const SlicedBytes& bytes, ElementAligner& aligner, Reduction& reduction) {
  // Whole elements with nothing carried (a unary message, and most stream
  // chunks): the backend sees all the pieces at once and may read them in
  // parallel.
  if (aligner.carried() == 0 && bytes.size() % reduction.element_size() == 0) {
    std::vector<Extent> runs;
    runs.reserve(bytes.pieces().size());
    for (std::span<const std::byte> piece : bytes.pieces()) runs.push_back({piece, PlacementOfReceived(piece)});
    return reduction.ConsumeRuns(HostRuns(runs));
  }
  for (std::span<const std::byte> piece : bytes.pieces()) {
    absl::Status s =
        aligner.Push(piece, [&reduction](std::span<const std::byte> elements) { return reduction.Consume(elements); });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<AggregationPlan> PlanOverElements(DType dtype, std::uint64_t length, std::uint64_t row_length,
                                                 const std::string& offsets, const char* offsets_field,
                                                 const std::string& validity, const char* validity_field,
                                                 const AggregationList& aggregations, const RequestLimits& limits,
                                                 const char* where) {
  AggregationPlan plan;
  plan.array.dtype = dtype;
  plan.array.length = length;
  plan.array.row_length = row_length;
  if (row_length != 0 && length % row_length != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_length: ", row_length, " does not divide the ", length, " elements of the ", where, "."));
  }
  absl::StatusOr<Offsets> checked = OffsetsFromProto(offsets, length, offsets_field);
  if (!checked.ok()) return checked.status();
  plan.array.offsets = std::move(*checked);
  absl::StatusOr<Validity> mask = ValidityFromProto(validity, length, validity_field);
  if (!mask.ok()) return mask.status();
  plan.array.validity = std::move(*mask);
  return FinishPlan(std::move(plan), aggregations, limits);
}

absl::StatusOr<AggregationResult> ReduceExtent(Backend& backend, const AggregationPlan& plan, const Extent& whole,
                                               const std::function<bool()>& cancelled, RequestRecord* record) {
  const PlacedPiece piece{0, whole};
  return ReducePieces(backend, plan, std::span(&piece, 1), cancelled, PhaseNoter(record));
}

std::function<void(const char*)> PhaseNoter(RequestRecord* record) {
  if (record == nullptr) return {};
  return [record](const char* name) { record->Phase(name); };
}

absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  grpc::Status s = grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(message, out, &own_buffer);
  if (!s.ok()) return absl::InternalError(absl::StrCat("the response could not be serialized: ", s.error_message()));
  return absl::OkStatus();
}

}  // namespace tally
