// Means and variances, from (count, mean, M2): mean, variance, stddev and
// their NaN-skipping forms. variance and stddev take numpy's ddof.
#pragma once

#include <cmath>

#include "tally/rules/agg/function.h"

namespace tally::rules::agg {

inline constexpr Param kDdofParams[] = {
    {.id = ParamId::kDdof, .field = "ddof", .label = "ddof", .text = "DDOF", .optional = true}};
inline constexpr ParamSet kDdof{kDdofParams, [](const OpSpec& op) -> std::optional<std::string> {
                                  if (std::isfinite(op.ddof) && op.ddof >= 0) return std::nullopt;
                                  std::string out = "ddof must be finite and >= 0, got ";
                                  return out.append(NumberText(op.ddof)).append(".");
                                }};

inline constexpr Function kMean{.kind = OpKind::kMean, .name = "mean", .wire = 4, .result = ResultRule::kDouble,
                                .plain = OpKind::kMean, .partial_state = true, .on_kernels = true,
                                .exact = Exact::kEveryDtype};
inline constexpr Function kVariance{.kind = OpKind::kVariance, .name = "variance", .spellings = {"var"}, .wire = 7,
                                    .params = &kDdof, .result = ResultRule::kDouble, .plain = OpKind::kVariance,
                                    .partial_state = true, .on_kernels = true, .exact = Exact::kEveryDtype,
                                    .exact_squares = true};
inline constexpr Function kStddev{.kind = OpKind::kStddev, .name = "stddev", .spellings = {"std"}, .wire = 8,
                                  .params = &kDdof, .result = ResultRule::kDouble, .plain = OpKind::kStddev,
                                  .partial_state = true, .on_kernels = true, .exact = Exact::kEveryDtype,
                                  .exact_squares = true};
inline constexpr Function kNanMean = NanForm(kMean, OpKind::kNanMean, "nanmean", 13);
inline constexpr Function kNanVariance = NanForm(kVariance, OpKind::kNanVariance, "nanvar", 18);
inline constexpr Function kNanStddev = NanForm(kStddev, OpKind::kNanStddev, "nanstd", 19);

inline constexpr Function kMoments[] = {kMean, kVariance, kStddev, kNanMean, kNanVariance, kNanStddev};

}  // namespace tally::rules::agg
