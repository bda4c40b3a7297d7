// Sums and counts: sum, sum_squares, count and their NaN-skipping forms.
#pragma once

#include "tally/rules/agg/function.h"

namespace tally::rules::agg {

inline constexpr Function kSum{.kind = OpKind::kSum, .name = "sum", .wire = 1,
                               .result = ResultRule::kLikeInput, .plain = OpKind::kSum,
                               .partial_state = true, .on_kernels = true, .exact = Exact::kFloats};
// The number of elements (of valid ones, under a mask); NaN counts.
inline constexpr Function kCount{.kind = OpKind::kCount, .name = "count", .wire = 5,
                                 .result = ResultRule::kCount, .plain = OpKind::kCount,
                                 .partial_state = true, .on_kernels = true};
inline constexpr Function kSumSquares{.kind = OpKind::kSumSquares, .name = "sum_squares", .spellings = {"sumsq"},
                                      .wire = 6, .result = ResultRule::kDouble, .plain = OpKind::kSumSquares,
                                      .partial_state = true, .on_kernels = true, .exact = Exact::kEveryDtype,
                                      .exact_squares = true, .exact_squares_only = true};
inline constexpr Function kNanSum = NanForm(kSum, OpKind::kNanSum, "nansum", 12);
// The number of non-NaN elements.
inline constexpr Function kNanCount = NanForm(kCount, OpKind::kNanCount, "nancount", 20);

inline constexpr Function kSums[] = {kSum, kCount, kSumSquares, kNanSum, kNanCount};

}  // namespace tally::rules::agg
