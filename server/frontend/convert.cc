#include "server/frontend/convert.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tally/rules/segments.h"
#include "tally/rules/validity.h"
#include "tally/v1/aggregation_wire.h"
#include "tally/v1/partial_state_wire.h"

namespace tally {

absl::StatusOr<DType> DTypeFromProto(v1::DType d) {
  switch (d) {
    case v1::DTYPE_FLOAT32: return DType::kFloat32;
    case v1::DTYPE_FLOAT64: return DType::kFloat64;
    case v1::DTYPE_INT32: return DType::kInt32;
    case v1::DTYPE_INT64: return DType::kInt64;
    case v1::DTYPE_UINT32: return DType::kUInt32;
    case v1::DTYPE_UINT8: return DType::kUInt8;
    case v1::DTYPE_INT8: return DType::kInt8;
    case v1::DTYPE_INT16: return DType::kInt16;
    case v1::DTYPE_UINT16: return DType::kUInt16;
    case v1::DTYPE_UINT64: return DType::kUInt64;
    case v1::DTYPE_BOOL: return DType::kBool;
    case v1::DTYPE_FLOAT16: return DType::kFloat16;
    case v1::DTYPE_BFLOAT16: return DType::kBFloat16;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "spec.dtype: ", d == v1::DTYPE_UNSPECIFIED ? std::string("no dtype was given") : absl::StrCat("unknown dtype ", static_cast<int>(d)),
      "; expected one of float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool."));
}

v1::DType DTypeToProto(DType d) {
  switch (d) {
    case DType::kFloat32: return v1::DTYPE_FLOAT32;
    case DType::kFloat64: return v1::DTYPE_FLOAT64;
    case DType::kInt32: return v1::DTYPE_INT32;
    case DType::kInt64: return v1::DTYPE_INT64;
    case DType::kUInt32: return v1::DTYPE_UINT32;
    case DType::kUInt8: return v1::DTYPE_UINT8;
    case DType::kInt8: return v1::DTYPE_INT8;
    case DType::kInt16: return v1::DTYPE_INT16;
    case DType::kUInt16: return v1::DTYPE_UINT16;
    case DType::kUInt64: return v1::DTYPE_UINT64;
    case DType::kBool: return v1::DTYPE_BOOL;
    case DType::kFloat16: return v1::DTYPE_FLOAT16;
    case DType::kBFloat16: return v1::DTYPE_BFLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

namespace {

// The registry's function for aggregations[index].op.
absl::StatusOr<const rules::agg::Function*> OpFromProto(int index, v1::Op op) {
  if (const rules::agg::Function* f = FunctionOf(op)) return f;
  return absl::InvalidArgumentError(absl::StrCat(
      "aggregations[", index, "].op: ",
      op == v1::OP_UNSPECIFIED ? std::string("no op was given") : absl::StrCat("unknown op ", static_cast<int>(op)),
      "; expected one of ", rules::agg::NameList(), "."));
}

// NaN results go out as one canonical quiet NaN, so equal requests give
// bitwise-equal responses whatever NaN payload the arithmetic produced.
double Canonical(double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; }

void FillValues(std::vector<double>&& v, DType, v1::AggregationResult* out) {
  auto* f = out->mutable_doubles()->mutable_values();
  f->Reserve(static_cast<int>(v.size()));
  for (double x : v) f->Add(Canonical(x));
}
void FillValues(std::vector<std::int64_t>&& v, DType, v1::AggregationResult* out) {
  out->mutable_int64s()->mutable_values()->Add(v.begin(), v.end());
}
void FillValues(std::vector<std::uint64_t>&& v, DType, v1::AggregationResult* out) {
  out->mutable_uint64s()->mutable_values()->Add(v.begin(), v.end());
}
void FillValues(std::vector<HistogramResult>&& v, DType, v1::AggregationResult* out) {
  auto* hs = out->mutable_histograms()->mutable_histograms();
  hs->Reserve(static_cast<int>(v.size()));
  for (HistogramResult& h : v) {
    v1::Histogram* p = hs->Add();
    p->mutable_counts()->Add(h.counts.begin(), h.counts.end());
    p->set_below(h.below);
    p->set_above(h.above);
    p->set_nan(h.nan);
  }
}
// Float fields go out as they are: a state is merged further, and a
// canonical NaN would be no more equal than the one computed.
void FillValues(std::vector<rules::PartialState>&& v, DType dtype, v1::AggregationResult* out) {
  v1::PartialStates* p = out->mutable_partials();
  p->set_version(rules::kPartialStateVersion);
  p->set_dtype(DTypeToProto(dtype));
  p->mutable_states()->Reserve(static_cast<int>(v.size()));
  for (rules::PartialState& state : v) PartialStateToProto(std::move(state), p->add_states());
}

// A function the registry keeps the state of: its answers by the wire's
// one rule for them.
void FillValues(std::vector<rules::agg::RowAnswer>&& v, DType dtype, OpKind kind, v1::AggregationResult* out) {
  RowAnswersToProto(kind, dtype, v, out);
}
template <typename V>
void FillValues(V&& v, DType dtype, OpKind, v1::AggregationResult* out) {
  FillValues(std::forward<V>(v), dtype, out);
}

// A minmax's answer from its min's and its max's: min_0, max_0, min_1, ...
OpValues PairRows(OpValues&& min, const OpValues& max) {
  return std::visit(
      [&](auto&& lo) -> OpValues {
        using Vec = std::decay_t<decltype(lo)>;
        const Vec& hi = std::get<Vec>(max);
        Vec both;
        both.reserve(lo.size() * 2);
        for (std::size_t r = 0; r < lo.size(); ++r) {
          both.push_back(std::move(lo[r]));
          both.push_back(hi[r]);
        }
        return both;
      },
      std::move(min));
}

}  // namespace

absl::StatusOr<Offsets> OffsetsFromProto(const std::string& bytes, std::uint64_t length, const char* field) {
  if (bytes.empty()) return Offsets{};
  if (bytes.size() % sizeof(std::int64_t) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes.size(),
                                                   " bytes is not a whole number of int64 offsets (8 bytes each)."));
  }
  // Copied, not viewed: the message's bytes need not be 8-byte aligned, and
  // the plan outlives the message on a stream. Little-endian on the wire,
  // as on every host tally builds for.
  std::vector<std::int64_t> wire(bytes.size() / sizeof(std::int64_t));
  std::memcpy(wire.data(), bytes.data(), bytes.size());
  const rules::OffsetsFault f = rules::CheckOffsets(std::span<const std::int64_t>(wire), length);
  const auto at = [&](std::size_t i) { return absl::StrCat(field, "[", i, "] = ", wire[i]); };
  switch (f.kind) {
    case rules::OffsetsFault::kNone: break;
    case rules::OffsetsFault::kEmpty: break;  // not reached: bytes is not empty
    case rules::OffsetsFault::kFirstNotZero:
      return absl::InvalidArgumentError(absl::StrCat(at(0), ": the first offset must be 0."));
    case rules::OffsetsFault::kDecreasing:
      return absl::InvalidArgumentError(
          absl::StrCat(at(f.index), " is less than ", field, "[", f.index - 1, "] = ", wire[f.index - 1],
                       ": offsets must never decrease."));
    case rules::OffsetsFault::kPastLength:
      return absl::InvalidArgumentError(
          absl::StrCat(at(f.index), " is past the end of the ", length, "-element array."));
    case rules::OffsetsFault::kLastNotLength:
      return absl::InvalidArgumentError(absl::StrCat(
          at(f.index), ": the last offset must be the array's length, ", length,
          " (every element in a segment)."));
  }
  std::vector<std::uint64_t> checked(wire.size());
  std::memcpy(checked.data(), wire.data(), bytes.size());  // all >= 0 now
  return std::make_shared<const std::vector<std::uint64_t>>(std::move(checked));
}

absl::StatusOr<Validity> ValidityFromProto(const std::string& bytes, std::uint64_t length, const char* field) {
  if (bytes.empty()) return Validity{};  // no mask (an empty array's is empty too)
  if (bytes.size() != rules::ValidityBytes(length)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", bytes.size(), " bytes, but a mask of ", length, " elements takes ceil(", length,
        " / 8) = ", rules::ValidityBytes(length), " bytes (one bit per element, least significant first)."));
  }
  std::vector<std::uint32_t> words((length + 31) / 32, 0);
  std::memcpy(words.data(), bytes.data(), bytes.size());  // little-endian, as on every host tally builds for
  if (const std::uint64_t tail = length & 31; tail != 0) words.back() &= (std::uint32_t{1} << tail) - 1;
  return std::make_shared<const std::vector<std::uint32_t>>(std::move(words));
}

absl::StatusOr<AggregationPlan> PlanFromProto(const v1::ArraySpec& spec, const AggregationList& aggregations,
                                              std::optional<std::uint64_t> data_bytes,
                                              const RequestLimits& limits) {
  AggregationPlan plan;
  absl::StatusOr<DType> dtype = DTypeFromProto(spec.dtype());
  if (!dtype.ok()) return dtype.status();
  plan.array.dtype = *dtype;
  const std::uint64_t size = rules::SizeOf(*dtype);
  if (data_bytes.has_value()) {
    if (*data_bytes % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("data: ", *data_bytes, " bytes is not a whole number of ",
                                                     rules::Name(*dtype), " elements (", size, " bytes each)."));
    }
    plan.array.length = *data_bytes / size;
    if (spec.has_length() && spec.length() != plan.array.length) {
      return absl::InvalidArgumentError(absl::StrCat("spec.length: the spec says ", spec.length(),
                                                     " elements, but data holds ", plan.array.length, " ",
                                                     rules::Name(*dtype), " elements (", *data_bytes, " bytes)."));
    }
  } else {
    if (!spec.has_length()) {
      return absl::InvalidArgumentError(
          "header.spec.length: AggregateStream needs the array's length in elements up front.");
    }
    plan.array.length = spec.length();
  }
  plan.array.row_length = spec.row_length();
  absl::StatusOr<Offsets> offsets = OffsetsFromProto(spec.offsets(), plan.array.length,
                                                     data_bytes.has_value() ? "spec.offsets" : "header.spec.offsets");
  if (!offsets.ok()) return offsets.status();
  plan.array.offsets = std::move(*offsets);
  absl::StatusOr<Validity> mask = ValidityFromProto(spec.validity(), plan.array.length,
                                                    data_bytes.has_value() ? "spec.validity" : "header.spec.validity");
  if (!mask.ok()) return mask.status();
  plan.array.validity = std::move(*mask);
  return FinishPlan(std::move(plan), aggregations, limits);
}

absl::StatusOr<AggregationPlan> FinishPlan(AggregationPlan plan, const AggregationList& aggregations,
                                           const RequestLimits& limits) {
  plan.ops.reserve(aggregations.size());
  for (int i = 0; i < aggregations.size(); ++i) {
    const v1::Aggregation& a = aggregations[i];
    absl::StatusOr<const rules::agg::Function*> f = OpFromProto(i, a.op());
    if (!f.ok()) return f.status();
    OpSpec op = OpSpecFromProto(**f, a);
    if (op.kind == OpKind::kMinMax) {
      if (op.partial) {
        return absl::InvalidArgumentError(absl::StrCat(
            "aggregations[", i, "].partial: minmax has no partial state of its own; ask for the partial states of "
            "min and max."));
      }
      op.kind = OpKind::kMin;
    }
    plan.ops.push_back(op);
  }
  // Each minmax's max after the aggregations, so that every aggregation
  // keeps its position in plan.ops (and in the errors that name it).
  for (int i = 0; i < aggregations.size(); ++i) {
    if (aggregations[i].op() != v1::OP_MINMAX) continue;
    if (plan.asked.empty()) {
      for (int k = 0; k < aggregations.size(); ++k) plan.asked.push_back(FunctionOf(aggregations[k].op())->kind);
    }
    OpSpec max = plan.ops[static_cast<std::size_t>(i)];
    max.kind = OpKind::kMax;
    plan.ops.push_back(max);
  }
  if (absl::Status s = ValidatePlan(plan, limits); !s.ok()) return s;
  return plan;
}

namespace {

// A Values message's repeated numbers moved into its `data` bytes,
// little-endian as this host's (Aggregation.values_as_bytes).
template <typename Values>
void PackInto(Values* v) {
  if (v->values().empty()) return;
  v->set_data(reinterpret_cast<const char*>(v->values().data()), v->values().size() * sizeof(v->values(0)));
  v->clear_values();
}

static_assert(std::endian::native == std::endian::little, "the answers' bytes are little-endian");

// Every number field of `r` as bytes: its values, and top-k's indices and
// lengths.
void ValuesAsBytes(v1::AggregationResult* r) {
  if (r->has_doubles()) PackInto(r->mutable_doubles());
  if (r->has_int64s()) PackInto(r->mutable_int64s());
  if (r->has_uint64s()) PackInto(r->mutable_uint64s());
  if (r->has_indices()) PackInto(r->mutable_indices());
  if (r->has_lengths()) PackInto(r->mutable_lengths());
}

}  // namespace

void ResultToProto(const AggregationPlan& plan, const AggregationList& aggregations, AggregationResult result,
                   double server_seconds, v1::AggregateResponse* response) {
  std::size_t next_max = static_cast<std::size_t>(aggregations.size());
  for (int i = 0; i < aggregations.size(); ++i) {
    v1::AggregationResult* out = response->add_results();
    *out->mutable_aggregation() = aggregations[i];
    OpValues& values = result.values[static_cast<std::size_t>(i)];
    if (aggregations[i].op() == v1::OP_MINMAX) values = PairRows(std::move(values), result.values[next_max++]);
    const OpKind kind = plan.ops[static_cast<std::size_t>(i)].kind;
    std::visit([&](auto&& v) { FillValues(std::move(v), plan.array.dtype, kind, out); }, std::move(values));
    if (aggregations[i].values_as_bytes()) ValuesAsBytes(out);
  }
  v1::Execution* e = response->mutable_execution();
  e->set_elements(plan.array.length);
  e->set_bytes(plan.array.bytes());
  e->set_rows(plan.array.segmented() ? plan.array.rows() : 1);
  e->set_backend(std::move(result.backend));
  e->set_device(std::move(result.device));
  e->set_server_seconds(server_seconds);
}

namespace {
double UnixSeconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}
}  // namespace

void DatasetInfoToProto(const DatasetInfo& info, v1::DatasetInfo* out) {
  out->set_name(info.name);
  out->set_dtype(DTypeToProto(info.dtype));
  out->set_length(info.length);
  out->set_row_length(info.row_length);
  out->set_bytes(info.bytes);
  out->set_place(info.place);
  out->set_version(info.version);
  out->set_created_unix_seconds(UnixSeconds(info.created));
  out->set_expires_unix_seconds(info.expires ? UnixSeconds(*info.expires) : 0.0);
  out->set_queries(info.queries);
  out->set_shards(info.shards);
}

}  // namespace tally
