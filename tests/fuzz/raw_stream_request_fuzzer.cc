// Fuzzes what AggregateStream does with each received message:
// ParseWithBytesInPlace with the chunk left in place (checked against
// protobuf's parser, over any cut into slices), and for a header,
// PlanFromProto and ValidatePlan as a stream's header is checked.
#include "tally/v1/tally.pb.h"
#include "tests/fuzz/plan_check.h"
#include "tests/fuzz/raw_message_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using tally::v1::AggregateStreamRequest;
  tally::fuzz::CheckAgainstProtobuf<AggregateStreamRequest>(
      data, size, AggregateStreamRequest::kChunkFieldNumber,
      [](const AggregateStreamRequest& message, std::uint64_t chunk_bytes) {
        if (message.payload_case() != AggregateStreamRequest::kHeader) return;
        TALLY_FUZZ_CHECK(chunk_bytes == 0, "a header carries no chunk");
        const tally::RequestLimits limits;
        const auto& header = message.header();
        absl::StatusOr<tally::AggregationPlan> plan =
            tally::PlanFromProto(header.spec(), header.aggregations(), std::nullopt, limits);
        if (plan.ok()) {
          tally::fuzz::CheckAcceptedPlan(*plan, header.spec(), header.aggregations(), std::nullopt, limits);
        } else {
          TALLY_FUZZ_CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument ||
                               plan.status().code() == absl::StatusCode::kResourceExhausted,
                           plan.status().ToString());
        }
      });
  return 0;
}
