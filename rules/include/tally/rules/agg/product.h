// prod, count_nonzero, any, all and ptp: numpy's, computed by the cpu
// backend only (no kernel and no partial state yet). any and all are read
// from the nonzero count (NaN is true); ptp is max - min in the dtype.
#pragma once

#include "tally/rules/agg/function.h"

namespace tally::rules::agg {

inline constexpr Function kProduct{.kind = OpKind::kProduct, .name = "prod", .spellings = {"product"}, .wire = 21,
                                   .result = ResultRule::kLikeInput, .plain = OpKind::kProduct};
inline constexpr Function kCountNonzero{.kind = OpKind::kCountNonzero, .name = "count_nonzero",
                                        .spellings = {"nnz"}, .wire = 22, .result = ResultRule::kCount,
                                        .plain = OpKind::kCountNonzero};
inline constexpr Function kAny{.kind = OpKind::kAny, .name = "any", .wire = 23, .result = ResultRule::kCount,
                               .plain = OpKind::kAny};
inline constexpr Function kAll{.kind = OpKind::kAll, .name = "all", .wire = 24, .result = ResultRule::kCount,
                               .plain = OpKind::kAll};
inline constexpr Function kPtp{.kind = OpKind::kPtp, .name = "ptp", .wire = 25, .result = ResultRule::kLikeInput,
                               .plain = OpKind::kPtp, .refuses_empty = true,
                               .refuses_bool = "ptp of a bool array is not defined (numpy refuses boolean "
                                               "subtraction); ask for min and max."};

inline constexpr Function kProducts[] = {kProduct, kCountNonzero, kAny, kAll, kPtp};

}  // namespace tally::rules::agg
