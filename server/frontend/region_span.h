// Elements that lie in a registered region (a host region or a CUDA IPC
// region), located for any request that reads them in place
// (AggregateRegion, PutDatasetFromRegion, GroupBy's region columns).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/engine/regions/region_registry.h"

namespace tally {

// The region, held while its bytes are read (an unregister waits), and
// the bytes.
struct RegionSpan {
  std::shared_ptr<const Region> region;
  Extent bytes;
};

// `length` elements of `dtype` from `offset` bytes into region `name`:
// NOT_FOUND for an unknown region; INVALID_ARGUMENT naming `offset_field`
// for an offset that is not a multiple of the element size, and
// `length_field` for elements past the region's end; the region's own
// error when it was truncated under the server.
[[nodiscard]] absl::StatusOr<RegionSpan> LocateInRegion(RegionRegistry& regions, const std::string& name,
                                                        std::uint64_t offset, DType dtype, std::uint64_t length,
                                                        const std::string& offset_field, const std::string& length_field);

}  // namespace tally
