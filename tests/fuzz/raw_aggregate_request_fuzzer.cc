// Fuzzes what Aggregate does with a received message before any backend
// sees it: ParseWithBytesInPlace (checked against protobuf's own parser,
// over any cut into slices), then PlanFromProto and ValidatePlan with the
// data's size, whose accepted plans must obey plan_check.h's rules.
#include "tally/v1/tally.pb.h"
#include "tests/fuzz/plan_check.h"
#include "tests/fuzz/raw_message_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using tally::v1::AggregateRequest;
  tally::fuzz::CheckAgainstProtobuf<AggregateRequest>(
      data, size, AggregateRequest::kDataFieldNumber, [](const AggregateRequest& request, std::uint64_t bytes) {
        const tally::RequestLimits limits;
        absl::StatusOr<tally::AggregationPlan> plan =
            tally::PlanFromProto(request.spec(), request.aggregations(), bytes, limits);
        if (plan.ok()) {
          tally::fuzz::CheckAcceptedPlan(*plan, request.spec(), request.aggregations(), bytes, limits);
        } else {
          TALLY_FUZZ_CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument ||
                               plan.status().code() == absl::StatusCode::kResourceExhausted,
                           plan.status().ToString());
        }
      });
  return 0;
}
