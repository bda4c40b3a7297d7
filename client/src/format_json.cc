// The JSON result format (schema in tally/client/format.h).
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "tally/client/aggregations.h"
#include "tally/client/format.h"
#include "tally/client/number_text.h"
#include "tally/rules/agg/registry.h"
#include "tally/v1/aggregation_wire.h"

namespace tally::client {
namespace {

// DoubleText gives a valid JSON number for finite values; the three values
// JSON cannot spell become strings.
std::string JsonDouble(double v) {
  std::string text = DoubleText(v);
  if (!std::isfinite(v)) return absl::StrCat("\"", text, "\"");
  return text;
}

template <typename Values, typename ToJson>
void AppendArray(std::string* out, const Values& values, ToJson to_json) {
  out->push_back('[');
  bool first = true;
  for (const auto& v : values) {
    if (!first) out->push_back(',');
    first = false;
    absl::StrAppend(out, to_json(v));
  }
  out->push_back(']');
}

void AppendResult(std::string* out, const v1::AggregationResult& r) {
  const v1::Aggregation& a = r.aggregation();
  absl::StrAppend(out, "{\"op\":", JsonQuote(OpName(a.op())));
  // The function's parameters by their labels (a histogram's go with its
  // counts, below).
  if (const rules::agg::Function* f = FunctionOf(a.op()); f != nullptr && a.op() != v1::OP_HISTOGRAM) {
    const rules::OpSpec spec = OpSpecFromProto(*f, a);
    for (const rules::agg::Param& p : f->params->params) {
      absl::StrAppend(out, ",", JsonQuote(std::string(p.label)), ":");
      if (p.list) {
        AppendArray(out, spec.q, JsonDouble);
      } else if (!p.choices.empty()) {
        const auto c = static_cast<std::size_t>(rules::agg::Get(spec, p.id));
        absl::StrAppend(out, JsonQuote(c < p.choices.size() ? std::string(p.choices[c]) : std::string("unknown")));
      } else {
        absl::StrAppend(out, JsonDouble(rules::agg::Get(spec, p.id)));
      }
    }
  }
  const auto integer = [](auto v) { return absl::StrCat(v); };
  switch (r.values_case()) {
    case v1::AggregationResult::kDoubles:
      absl::StrAppend(out, ",\"type\":\"float64\",\"values\":");
      AppendArray(out, r.doubles().values(), JsonDouble);
      break;
    case v1::AggregationResult::kInt64S:
      absl::StrAppend(out, ",\"type\":\"int64\",\"values\":");
      AppendArray(out, r.int64s().values(), integer);
      break;
    case v1::AggregationResult::kUint64S:
      if (a.op() == v1::OP_ANY || a.op() == v1::OP_ALL) {  // 0 or 1 on the wire; JSON has booleans
        absl::StrAppend(out, ",\"type\":\"bool\",\"values\":");
        AppendArray(out, r.uint64s().values(), [](std::uint64_t v) { return std::string(v ? "true" : "false"); });
        break;
      }
      absl::StrAppend(out, ",\"type\":\"uint64\",\"values\":");
      AppendArray(out, r.uint64s().values(), integer);
      break;
    case v1::AggregationResult::kHistograms:
      absl::StrAppend(out, ",\"bins\":", a.histogram().bins(),
                      ",\"lo\":", JsonDouble(a.histogram().lo()),
                      ",\"hi\":", JsonDouble(a.histogram().hi()), ",\"histograms\":");
      AppendArray(out, r.histograms().histograms(), [&](const v1::Histogram& h) {
        std::string item = "{\"counts\":";
        AppendArray(&item, h.counts(), integer);
        absl::StrAppend(&item, ",\"below\":", h.below(), ",\"above\":", h.above(),
                        ",\"nan\":", h.nan(), "}");
        return item;
      });
      break;
    case v1::AggregationResult::kPartials:
      // States are for merging (client/partial.h), not for reading: the
      // output says what they are, not what they hold.
      absl::StrAppend(out, ",\"type\":\"partial_states\",\"version\":", r.partials().version(),
                      ",\"rows\":", r.partials().states_size());
      break;
    case v1::AggregationResult::VALUES_NOT_SET:
      absl::StrAppend(out, ",\"values\":[]");
      break;
  }
  if (r.has_indices()) {  // topk, bottomk: each value's index and each row's count
    absl::StrAppend(out, ",\"indices\":");
    AppendArray(out, r.indices().values(), integer);
    absl::StrAppend(out, ",\"lengths\":");
    AppendArray(out, r.lengths().values(), integer);
  }
  out->push_back('}');
}

}  // namespace

std::string FormatJson(const v1::AggregateResponse& response, const FormatOptions& options) {
  std::string out = "{\"results\":[";
  for (int i = 0; i < response.results_size(); ++i) {
    if (i > 0) out += ",\n  ";
    else out += "\n  ";
    AppendResult(&out, response.results(i));
  }
  const v1::Execution& e = response.execution();
  absl::StrAppend(&out, "],\n\"execution\":{\"elements\":", e.elements(), ",\"bytes\":", e.bytes(),
                  ",\"rows\":", e.rows(), ",\"backend\":", JsonQuote(e.backend()),
                  ",\"device\":", JsonQuote(e.device()),
                  ",\"server_seconds\":", JsonDouble(e.server_seconds()));
  if (options.client_seconds) {
    absl::StrAppend(&out, ",\"client_seconds\":", JsonDouble(*options.client_seconds));
  }
  if (options.transport) absl::StrAppend(&out, ",\"transport\":", JsonQuote(*options.transport));
  out += "}}\n";
  return out;
}

}  // namespace tally::client
