// histogram: counts over `bins` equal bins of [lo, hi], numpy.histogram's
// edges (tally/rules/histogram_bin.h). Whether the edges of a range in a
// dtype strictly increase is the server's check (server/core/validate.cc):
// it needs the dtype.
#pragma once

#include <cmath>

#include "tally/rules/agg/function.h"

namespace tally::rules::agg {

inline constexpr Param kHistogramParamList[] = {
    {.id = ParamId::kBins, .field = "histogram.bins", .label = "bins", .text = "BINS", .integer = true},
    {.id = ParamId::kLo, .field = "histogram.lo", .label = "lo", .text = "LO"},
    {.id = ParamId::kHi, .field = "histogram.hi", .label = "hi", .text = "HI"},
};

// Messages are built by appending: GCC 12 warns falsely (-Wrestrict) on
// "literal" + std::string temporaries.
inline std::optional<std::string> CheckHistogram(const OpSpec& op) {
  const HistogramSpec& h = op.histogram;
  const auto say = [&](std::string_view what, bool with_range, std::string_view after = ".") {
    std::string out(what);
    if (with_range) out.append("[").append(NumberText(h.lo)).append(", ").append(NumberText(h.hi)).append("]");
    out.append(after);
    return out;
  };
  if (h.bins == 0 || h.bins > kMaxHistogramBins) {
    std::string out = "histogram.bins must be 1 to ";
    out.append(std::to_string(kMaxHistogramBins)).append(", got ").append(std::to_string(h.bins)).append(".");
    return out;
  }
  if (!std::isfinite(h.lo) || !std::isfinite(h.hi)) return say("histogram.lo and histogram.hi must be finite, got ", true);
  if (!(h.lo < h.hi)) return say("histogram.lo must be less than histogram.hi, got ", true);
  if (!std::isfinite(h.hi - h.lo)) return say("histogram range ", true, " is too wide: hi - lo overflows float64.");
  return std::nullopt;
}
inline constexpr ParamSet kHistogramParams{kHistogramParamList, CheckHistogram};

inline constexpr Function kHistogram{.kind = OpKind::kHistogram, .name = "histogram", .spellings = {"hist"},
                                     .wire = 11, .params = &kHistogramParams, .result = ResultRule::kHistogram,
                                     .plain = OpKind::kHistogram, .partial_state = true, .on_kernels = true};

inline constexpr Function kHistograms[] = {kHistogram};

}  // namespace tally::rules::agg
