// The null backend: does all of the RPC work, discards the data, and answers
// with results of the right shape holding no information (zeros, NaN for
// float results). It exists to measure the transport's own ceiling in the
// same run as the real backends.
#pragma once

#include <memory>

#include "server/engine/backend.h"

namespace tally {

std::unique_ptr<Backend> MakeNullBackend();

}  // namespace tally
