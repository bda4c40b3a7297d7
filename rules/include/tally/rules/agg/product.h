// prod, count_nonzero, any, all and ptp: numpy's. any and all are read from
// the nonzero count (NaN is true); ptp keeps a min and a max and takes
// max - min in the dtype when it finishes (rules::PtpOf), so its states
// merge. On the GPU, products and nonzero counts take a pass of their own
// (tally/kernels/aggregate.h, the fold pass) and ptp the fused min and max.
#pragma once

#include "tally/rules/agg/function.h"

namespace tally::rules::agg {

inline constexpr Function kProduct{.kind = OpKind::kProduct, .name = "prod", .spellings = {"product"}, .wire = 21,
                                   .result = ResultRule::kLikeInput, .plain = OpKind::kProduct,
                                   .partial_state = true, .on_kernels = true, .rounds_in_order = true};
inline constexpr Function kCountNonzero{.kind = OpKind::kCountNonzero, .name = "count_nonzero",
                                        .spellings = {"nnz"}, .wire = 22, .result = ResultRule::kCount,
                                        .plain = OpKind::kCountNonzero, .partial_state = true, .on_kernels = true};
inline constexpr Function kAny{.kind = OpKind::kAny, .name = "any", .wire = 23, .result = ResultRule::kCount,
                               .plain = OpKind::kAny, .partial_state = true, .on_kernels = true};
inline constexpr Function kAll{.kind = OpKind::kAll, .name = "all", .wire = 24, .result = ResultRule::kCount,
                               .plain = OpKind::kAll, .partial_state = true, .on_kernels = true};
inline constexpr Function kPtp{.kind = OpKind::kPtp, .name = "ptp", .wire = 25, .result = ResultRule::kLikeInput,
                               .plain = OpKind::kPtp, .partial_state = true, .on_kernels = true, .refuses_empty = true,
                               .refuses_bool = "ptp of a bool array is not defined (numpy refuses boolean "
                                               "subtraction); ask for min and max."};

inline constexpr Function kProducts[] = {kProduct, kCountNonzero, kAny, kAll, kPtp};

}  // namespace tally::rules::agg
