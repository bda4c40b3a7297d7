// Positions of extremes: argmin, argmax and their NaN-skipping forms. The
// first occurrence wins, as in numpy; the answer is an index.
#pragma once

#include "tally/rules/agg/function.h"

namespace tally::rules::agg {

inline constexpr Function kArgmin{.kind = OpKind::kArgmin, .name = "argmin", .wire = 9, .result = ResultRule::kIndex,
                                  .plain = OpKind::kArgmin, .answers_index = true, .partial_state = true,
                                  .on_kernels = true, .refuses_empty = true};
inline constexpr Function kArgmax{.kind = OpKind::kArgmax, .name = "argmax", .wire = 10, .result = ResultRule::kIndex,
                                  .plain = OpKind::kArgmax, .answers_index = true, .partial_state = true,
                                  .on_kernels = true, .refuses_empty = true};
// numpy.nanargmin and nanargmax raise "All-NaN slice encountered".
inline constexpr Function kNanArgmin = NanForm(kArgmin, OpKind::kNanArgmin, "nanargmin", 16, /*refuses_all_nan=*/true);
inline constexpr Function kNanArgmax = NanForm(kArgmax, OpKind::kNanArgmax, "nanargmax", 17, /*refuses_all_nan=*/true);

inline constexpr Function kArgs[] = {kArgmin, kArgmax, kNanArgmin, kNanArgmax};

}  // namespace tally::rules::agg
