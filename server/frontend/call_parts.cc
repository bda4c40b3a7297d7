#include "server/frontend/call_parts.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace tally {

std::vector<OpKind> OpKinds(const AggregationPlan& plan) {
  std::vector<OpKind> kinds;
  kinds.reserve(plan.ops.size());
  for (const OpSpec& op : plan.ops) kinds.push_back(op.kind);
  return kinds;
}

absl::Status ConsumePieces(const SlicedBytes& bytes, ElementAligner& aligner, Reduction& reduction) {
  for (std::span<const std::byte> piece : bytes.pieces()) {
    absl::Status s =
        aligner.Push(piece, [&reduction](std::span<const std::byte> elements) { return reduction.Consume(elements); });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  grpc::Status s = grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(message, out, &own_buffer);
  if (!s.ok()) return absl::InternalError(absl::StrCat("the response could not be serialized: ", s.error_message()));
  return absl::OkStatus();
}

}  // namespace tally
