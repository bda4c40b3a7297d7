// The human-readable result format.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tally/client/aggregations.h"
#include "tally/client/format.h"
#include "tally/client/number_text.h"
#include "tally/client/sizes.h"
#include "tally/client/wire.h"
#include "tally/rules/agg/registry.h"
#include "tally/v1/aggregation_wire.h"

namespace tally::client {
namespace {

// "[a, b, c, ... (N more)]" with at most `shown` items unless `full`.
template <typename Values, typename ToText>
std::string ListText(const Values& values, int shown, bool full, ToText to_text) {
  const int n = values.size();
  const int take = full ? n : std::min(n, shown);
  std::vector<std::string> items;
  items.reserve(take + 1);
  for (int i = 0; i < take; ++i) items.push_back(to_text(values[i]));
  if (take < n) items.push_back(absl::StrCat("... (", n - take, " more)"));
  return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
}

std::string HistogramText(const v1::Histogram& h, bool show_counts, bool full, int max_shown) {
  std::uint64_t in_range = 0;
  for (std::uint64_t c : h.counts()) in_range += c;
  std::string text = absl::StrCat(in_range, " in range, ", h.below(), " below, ", h.above(),
                                  " above, ", h.nan(), " nan");
  if (show_counts) {
    absl::StrAppend(&text, "; counts ",
                    ListText(h.counts(), max_shown, full,
                             [](std::uint64_t c) { return absl::StrCat(c); }));
  }
  return text;
}

// The value part of one aggregation's line, or its indented block for
// segmented histograms.
std::string ValuesText(const v1::AggregationResult& r, const FormatOptions& o) {
  const auto dbl = [](double v) { return DoubleText(v); };
  const auto num = [](auto v) { return absl::StrCat(v); };
  const auto scalar_or_list = [&](const auto& values, auto to_text) -> std::string {
    if (values.size() == 1) return to_text(values[0]);
    return ListText(values, o.max_rows, o.full, to_text);
  };
  switch (r.values_case()) {
    case v1::AggregationResult::kDoubles: return scalar_or_list(r.doubles().values(), dbl);
    case v1::AggregationResult::kInt64S: return scalar_or_list(r.int64s().values(), num);
    case v1::AggregationResult::kUint64S:
      // any and all travel as 0 or 1; they read as numpy prints its bools.
      if (r.aggregation().op() == v1::OP_ANY || r.aggregation().op() == v1::OP_ALL) {
        return scalar_or_list(r.uint64s().values(), [](std::uint64_t v) { return std::string(v ? "True" : "False"); });
      }
      return scalar_or_list(r.uint64s().values(), num);
    case v1::AggregationResult::kHistograms: {
      const auto& hs = r.histograms().histograms();
      const bool show_counts =
          o.full || static_cast<int>(r.aggregation().histogram().bins()) <= o.max_bins_shown;
      if (hs.size() == 1) return HistogramText(hs[0], show_counts, o.full, o.max_bins_shown);
      std::string text;
      const int take = o.full ? hs.size() : std::min(hs.size(), o.max_rows);
      for (int i = 0; i < take; ++i) {
        absl::StrAppend(&text, "\n  row ", i, ": ",
                        HistogramText(hs[i], show_counts, o.full, o.max_bins_shown));
      }
      if (take < hs.size()) absl::StrAppend(&text, "\n  ... (", hs.size() - take, " more rows)");
      return text;
    }
    case v1::AggregationResult::kPartials:
      return absl::StrCat("partial states (version ", r.partials().version(), ", ", r.partials().states_size(),
                          r.partials().states_size() == 1 ? " row)" : " rows)");
    case v1::AggregationResult::VALUES_NOT_SET: break;
  }
  return "(no values)";
}

bool IsBlock(const std::string& values) { return !values.empty() && values[0] == '\n'; }

std::string Seconds(double s) {
  if (s < 1e-3) return absl::StrFormat("%.1f us", s * 1e6);
  if (s < 1.0) return absl::StrFormat("%.3f ms", s * 1e3);
  return absl::StrFormat("%.3f s", s);
}

}  // namespace

std::string FormatText(const v1::AggregateResponse& response, const FormatOptions& options) {
  // Single-line results align their "=" signs; multi-line blocks (segmented
  // histograms) put their rows underneath instead.
  std::vector<std::string> labels, values;
  size_t width = 0;
  for (const v1::AggregationResult& r : response.results()) {
    std::string label = AggregationLabel(r.aggregation());
    const int rows = r.values_case() == v1::AggregationResult::kDoubles   ? r.doubles().values_size()
                     : r.values_case() == v1::AggregationResult::kInt64S  ? r.int64s().values_size()
                     : r.values_case() == v1::AggregationResult::kUint64S ? r.uint64s().values_size()
                     : r.histograms().histograms_size();
    // minmax answers two values per row, a quantile one per q; topk and
    // bottomk say how many each row has.
    const rules::agg::Function* f = FunctionOf(r.aggregation().op());
    const auto per_row =
        f == nullptr ? 1 : static_cast<int>(std::max<std::uint64_t>(1, rules::agg::ValuesPerRow(OpSpecFromProto(*f, r.aggregation()))));
    if (r.has_lengths()) {
      if (r.lengths().values_size() != 1) absl::StrAppend(&label, " [", r.lengths().values_size(), " rows]");
    } else if (rows != per_row) {
      absl::StrAppend(&label, " [", rows / per_row, " rows]");
    }
    values.push_back(ValuesText(r, options));
    if (r.has_indices()) {
      absl::StrAppend(&values.back(), " at ", ListText(r.indices().values(), options.max_rows, options.full,
                                                       [](std::int64_t i) { return absl::StrCat(i); }));
    }
    if (!IsBlock(values.back())) width = std::max(width, label.size());
    labels.push_back(std::move(label));
  }
  std::string out;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (IsBlock(values[i])) {
      absl::StrAppend(&out, labels[i], ":", values[i], "\n");
    } else {
      absl::StrAppend(&out, labels[i], std::string(width - labels[i].size(), ' '), " = ",
                      values[i], "\n");
    }
  }
  const v1::Execution& e = response.execution();
  absl::StrAppend(&out, "execution: ", e.elements(), " elements (", FormatBytes(e.bytes()), "), ",
                  e.rows(), e.rows() == 1 ? " row" : " rows", ", backend ", e.backend());
  if (!e.device().empty()) absl::StrAppend(&out, " on ", e.device());
  absl::StrAppend(&out, ", server ", Seconds(e.server_seconds()));
  if (options.client_seconds) absl::StrAppend(&out, ", client ", Seconds(*options.client_seconds));
  if (options.transport) absl::StrAppend(&out, " (", *options.transport, ")");
  out += "\n";
  return out;
}

}  // namespace tally::client
