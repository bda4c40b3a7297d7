// The answers of a direct pass (a column's sums, counts and extremes by
// key: KeyedSums, from the GPU's pass or the host's) for the ops it takes,
// by numpy's rules, as the response carries them.
#pragma once

#include <optional>
#include <vector>

#include "server/core/request.h"
#include "server/engine/device_grouping.h"

namespace tally::grouping {

// Whether a direct pass answers `op`: sum, count, min, max, mean and their
// NaN-skipping forms, not as partial states.
bool IsDirect(const OpSpec& op);

// The arrays of KeyedSums that DirectAnswers reads for `ops` (those where
// no group holds a NaN or an infinity; KeyedArrays says what comes besides).
KeyedArrays ArraysFor(const std::vector<OpSpec>& ops);

// Each op's values for every group of `k` (direct ops over a float column
// of `dtype`); nullopt where an op's result type is not one this path
// gives. `k`'s vectors become answers as they are where they are one
// (sums, extremes and counts where no group holds a NaN or an infinity).
std::optional<std::vector<OpValues>> DirectAnswers(const std::vector<OpSpec>& ops, DType dtype, KeyedSums k);

}  // namespace tally::grouping
