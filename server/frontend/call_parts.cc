#include "server/frontend/call_parts.h"

#include <algorithm>

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
  // Whole elements with nothing carried (a unary message, and most stream
  // chunks): the backend sees all the pieces at once and may read them in
  // parallel.
  if (aligner.carried() == 0 && bytes.size() % reduction.element_size() == 0) {
    std::vector<Extent> runs;
    runs.reserve(bytes.pieces().size());
    for (std::span<const std::byte> piece : bytes.pieces()) runs.push_back(Extent::PageableHost(piece));
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
                                                 const AggregationList& aggregations, const RequestLimits& limits,
                                                 const char* where) {
  AggregationPlan plan;
  plan.array.dtype = dtype;
  plan.array.length = length;
  plan.array.row_length = row_length;
  if (plan.array.segmented() && length % row_length != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_length: ", row_length, " does not divide the ", length, " elements of the ", where, "."));
  }
  return FinishPlan(std::move(plan), aggregations, limits);
}

absl::Status CancelledByClient() {
  return absl::CancelledError("the client cancelled the request, or its deadline passed.");
}

absl::StatusOr<AggregationResult> ReduceExtent(Backend& backend, const AggregationPlan& plan, const Extent& whole,
                                               const std::function<bool()>& cancelled, RequestRecord* record) {
  const auto phase = [record](const char* name) {
    if (record != nullptr) record->Phase(name);
  };
  // 64 MiB pieces: a cancel stops a host read within a few milliseconds,
  // and the cpu backend's answer does not depend on the pieces.
  constexpr std::uint64_t kHostPieceBytes = std::uint64_t{64} << 20;
  absl::StatusOr<std::unique_ptr<Reduction>> reduction = backend.Start(plan, whole.placement);
  if (!reduction.ok()) return reduction.status();
  phase("started");
  const std::uint64_t size = rules::SizeOf(plan.array.dtype);
  const std::uint64_t piece = whole.placement.host() ? kHostPieceBytes / size * size : whole.size();
  for (std::uint64_t at = 0; at < whole.size(); at += piece) {
    if (cancelled()) return CancelledByClient();
    if (absl::Status s = (*reduction)->Consume(whole.Sub(at, std::min(piece, whole.size() - at))); !s.ok()) return s;
  }
  phase("consumed");
  absl::StatusOr<AggregationResult> result = (*reduction)->Finish();
  phase("finished");
  return result;
}

absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  grpc::Status s = grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(message, out, &own_buffer);
  if (!s.ok()) return absl::InternalError(absl::StrCat("the response could not be serialized: ", s.error_message()));
  return absl::OkStatus();
}

}  // namespace tally
