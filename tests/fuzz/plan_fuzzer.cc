// Fuzzes request validation directly: the fuzz bytes become an ArraySpec,
// its aggregations and (for Aggregate) the data's size, field by field, so
// that the fuzzer spends its time on the limits (lengths near 2^64, row
// lengths, bins, NaN and infinite edges, ddof) rather than on protobuf's
// encoding. Accepted plans must obey plan_check.h's rules.
#include "tally/v1/tally.pb.h"
#include "tests/fuzz/plan_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tally::fuzz::ByteReader in(data, size);
  tally::v1::ArraySpec spec;
  // Enum values outside the enum's range travel on the wire as they are.
  spec.set_dtype(static_cast<tally::v1::DType>(in.Byte() < 0xf0 ? in.Byte() % tally::v1::DType_ARRAYSIZE : in.Raw<std::int32_t>()));
  if (in.Bool()) spec.set_length(in.Count());
  spec.set_row_length(in.Count());
  std::optional<std::uint64_t> data_bytes;
  if (in.Bool()) data_bytes = in.Count();
  // A few past the 64-aggregation limit.
  const int count = in.Byte() % 70;
  tally::AggregationList aggregations;
  for (int i = 0; i < count && in.remaining() > 0; ++i) {
    tally::v1::Aggregation* a = aggregations.Add();
    a->set_op(static_cast<tally::v1::Op>(in.Byte() < 0xf0 ? in.Byte() % tally::v1::Op_ARRAYSIZE : in.Raw<std::int32_t>()));
    if (in.Bool()) a->set_ddof(in.Double());
    if (in.Bool()) {
      const std::uint8_t bins = in.Byte();
      a->mutable_histogram()->set_bins(bins < 0xc0 ? bins : in.Raw<std::uint32_t>());
      a->mutable_histogram()->set_lo(in.Double());
      a->mutable_histogram()->set_hi(in.Double());
    }
    // The parameters of quantiles, top-k and the sketches: q lists past
    // the limit now and then, methods past numpy's thirteen.
    if (in.Bool()) {
      const int q = in.Byte() < 0xf8 ? in.Byte() % 9 : 1025;
      for (int j = 0; j < q; ++j) a->add_q(in.Double());
      a->set_method(static_cast<tally::v1::QuantileMethod>(in.Byte() % 16));
    }
    if (in.Bool()) {
      a->set_k(in.Byte() < 0xf0 ? in.Byte() : in.Raw<std::uint32_t>());
      a->set_precision(in.Byte() % 24);
      a->set_relative_accuracy(in.Double());
    }
  }
  tally::RequestLimits limits;
  if (in.Bool()) {
    limits.max_aggregations = in.Byte();
    limits.max_result_values = in.Count();
  }
  absl::StatusOr<tally::AggregationPlan> plan = tally::PlanFromProto(spec, aggregations, data_bytes, limits);
  if (plan.ok()) {
    tally::fuzz::CheckAcceptedPlan(*plan, spec, aggregations, data_bytes, limits);
  } else {
    TALLY_FUZZ_CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument ||
                         plan.status().code() == absl::StatusCode::kResourceExhausted,
                     plan.status().ToString());
    TALLY_FUZZ_CHECK(!plan.status().message().empty(), "a refusal says why");
  }
  return 0;
}
