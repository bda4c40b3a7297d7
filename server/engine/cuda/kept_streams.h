// Streams given back for reuse instead of destroyed: a request's device
// pass takes one (Stream::Create) and gives it back at its end. Creating a
// stream took 22-49 us of a group-by's 1.3 ms server time on an H200 host
// (docs/performance.md), once per request.
#pragma once

#include <cuda_runtime_api.h>

namespace tally::cuda {

// Streams kept per device at most; past them a stream given back is
// destroyed. 64: the request workers and lanes a GPU serves at once.
inline constexpr int kMaxKeptStreams = 64;

// A non-blocking stream of the current device given back earlier, or
// nullptr where none is kept.
[[nodiscard]] cudaStream_t TakeKeptStream();

// Keeps `stream` (of the current device, its work queued or done) for the
// next TakeKeptStream, or destroys it where kMaxKeptStreams are kept.
cudaError_t KeepOrDestroyStream(cudaStream_t stream);

}  // namespace tally::cuda
