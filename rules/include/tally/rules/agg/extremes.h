// Extremes: min, max, their NaN-skipping forms, and minmax (both in one
// answer). None has a value on an empty input, as in numpy.
#pragma once

#include "tally/rules/agg/function.h"

namespace tally::rules::agg {

inline constexpr Function kMin{.kind = OpKind::kMin, .name = "min", .wire = 2, .result = ResultRule::kLikeInput,
                               .plain = OpKind::kMin, .partial_state = true, .on_kernels = true,
                               .refuses_empty = true};
inline constexpr Function kMax{.kind = OpKind::kMax, .name = "max", .wire = 3, .result = ResultRule::kLikeInput,
                               .plain = OpKind::kMax, .partial_state = true, .on_kernels = true,
                               .refuses_empty = true};
// All-NaN rows answer NaN (numpy warns); empty ones have no value.
inline constexpr Function kNanMin = NanForm(kMin, OpKind::kNanMin, "nanmin", 14);
inline constexpr Function kNanMax = NanForm(kMax, OpKind::kNanMax, "nanmax", 15);
// numpy's (min, max), Arrow's min_max. A plan never holds it: the front end
// asks for a min and a max (one fused pass) and pairs their answers, so it
// has no state or kernel of its own; ask for min's and max's states.
inline constexpr Function kMinMax{.kind = OpKind::kMinMax, .name = "minmax", .wire = 26,
                                  .result = ResultRule::kLikeInput, .plain = OpKind::kMinMax,
                                  .refuses_empty = true, .values_per_row = 2};

inline constexpr Function kExtremes[] = {kMin, kMax, kNanMin, kNanMax, kMinMax};

}  // namespace tally::rules::agg
