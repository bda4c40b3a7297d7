// What a dataset upload declares (PutDataset's header, or
// PutDatasetFromRegion's), checked once for both.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "tally/v1/tally.pb.h"

namespace tally {

struct DatasetHeader {
  std::string name;
  DType dtype = DType::kFloat32;
  std::uint64_t length = 0;
  bool replace = false;
  std::optional<std::chrono::milliseconds> ttl;
};
// Checks `h`; errors name its fields after `prefix` ("header.").
[[nodiscard]] absl::StatusOr<DatasetHeader> DatasetHeaderFromProto(const v1::PutDatasetRequest::Header& h,
                                                                   const std::string& prefix);

}  // namespace tally
