#include "server/frontend/region_span.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tally/rules/dtype.h"

namespace tally {

absl::StatusOr<RegionSpan> LocateInRegion(RegionRegistry& regions, const std::string& name, std::uint64_t offset,
                                          DType dtype, std::uint64_t length, const std::string& offset_field,
                                          const std::string& length_field) {
  absl::StatusOr<std::shared_ptr<const Region>> region = regions.Acquire(name);
  if (!region.ok()) return region.status();
  const RegionInfo& info = (*region)->info();
  const std::uint64_t size = rules::SizeOf(dtype);
  if (offset % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(offset_field, ": ", offset, " is not a multiple of the ",
                                                   rules::Name(dtype), " element size (", size, " bytes)."));
  }
  if (offset > info.bytes || length > (info.bytes - offset) / size) {
    return absl::InvalidArgumentError(absl::StrCat(length_field, ": ", length, " ", rules::Name(dtype),
                                                   " elements from offset ", offset, " run past the end of region '",
                                                   info.name, "' (", info.bytes, " bytes)."));
  }
  if (absl::Status s = (*region)->Intact(); !s.ok()) return s;
  Extent bytes = (*region)->extent().Sub(offset, length * size);
  return RegionSpan{*std::move(region), bytes};
}

}  // namespace tally
