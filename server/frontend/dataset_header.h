// What a dataset upload declares (PutDataset's header, or
// PutDatasetFromRegion's), checked once for both.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/request.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/frontend/identity_quota.h"
#include "tally/v1/tally.pb.h"

namespace tally {

struct DatasetHeader {
  std::string name;
  DType dtype = DType::kFloat32;
  std::uint64_t length = 0;
  std::uint64_t row_length = 0;  // 0: flat
  bool replace = false;
  std::optional<std::chrono::milliseconds> ttl;
};
// Checks `h`; errors name its fields after `prefix` ("header.").
[[nodiscard]] absl::StatusOr<DatasetHeader> DatasetHeaderFromProto(const v1::PutDatasetRequest::Header& h,
                                                                   const std::string& prefix);

// Charges `identity` for one dataset of `bytes` bytes: the bytes and the
// overhead every dataset carries (DatasetStore::kOverheadBytes) to
// --quota_dataset_bytes, and one dataset to --quota_datasets. What the store
// keeps beside the dataset, and frees with its memory.
[[nodiscard]] absl::StatusOr<std::shared_ptr<void>> ChargeDataset(IdentityQuotas& quotas, const std::string& identity,
                                                                  std::uint64_t bytes);

// Reserves the name and the memory of `header`'s dataset, charged to
// `identity`'s quotas until the dataset's memory is freed: its bytes and the
// overhead every dataset carries (DatasetStore::kOverheadBytes) to
// --quota_dataset_bytes, and one dataset to --quota_datasets (PutDataset and
// PutDatasetFromRegion alike).
[[nodiscard]] absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> BeginChargedUpload(
    DatasetStore& datasets, IdentityQuotas& quotas, const std::string& identity, const DatasetHeader& header);

}  // namespace tally
