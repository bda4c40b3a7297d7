// Device bytes into pageable host memory through two of a GPU's pinned
// staging blocks, so that the copy over the bus runs at pinned speed and
// overlaps the host's copy out of the other block. A plain cudaMemcpy into
// pageable memory goes through the driver's own staging one piece at a
// time: 3.4 GB/s for group-by's 640 MB of 16M groups on an H200
// (docs/performance.md, "Group-by").
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "server/engine/cuda/pinned_pool.h"

namespace tally::cuda {

// Copies `bytes` from `from` (device memory of the current device) to `to`
// (host memory) on `stream`, and returns once `to` holds them. Falls back
// to a plain copy where the pool lends no two blocks within a moment (every
// block busy with streams): slower, never failing for it.
[[nodiscard]] absl::Status CopyToHostStaged(PinnedPool& pinned, cudaStream_t stream, const void* from,
                                            std::size_t bytes, void* to);

// One of several device arrays to bring to the host.
struct HostCopy {
  const void* from;
  std::size_t bytes;
  void* to;
};

// Every copy of `copies`, returning once each `to` holds its bytes. Where
// they fit one pinned block together (a group-by's few groups), all go over
// the bus into it and the stream is waited for once, where a copy each
// waits for its own (about 10-20 us each on an H200 host); larger ones go
// one by one through CopyToHostStaged.
[[nodiscard]] absl::Status CopyAllToHost(PinnedPool& pinned, cudaStream_t stream, std::span<const HostCopy> copies);

}  // namespace tally::cuda
