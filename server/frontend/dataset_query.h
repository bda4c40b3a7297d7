// What a dataset query or listing asks, checked against the dataset store's
// rules: the row length an AggregateDataset cuts its range into, and the
// page a ListDatasets call asks for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/engine/datasets/dataset_store.h"
#include "tally/v1/tally.pb.h"

namespace tally {

// The row length `request` cuts elements [begin, end) of `info`'s dataset
// into: its own when it gives one (0: one result), none when it gives
// offsets, and otherwise the dataset's as uploaded, whose rows the range
// must then start and end on (INVALID_ARGUMENT naming the range and the
// row length when it does not).
[[nodiscard]] absl::StatusOr<std::uint64_t> DatasetQueryRowLength(const v1::AggregateDatasetRequest& request,
                                                                  const DatasetInfo& info, std::uint64_t begin,
                                                                  std::uint64_t end);

// Datasets one ListDatasets answer holds at most: 1000 entries of at most
// a few hundred bytes each keep a page far under gRPC's default 4 MiB
// receive limit, however many datasets the server holds.
inline constexpr std::uint32_t kMaxDatasetPage = 1000;

struct DatasetPage {
  std::string after;  // the page starts after this name ("": the first page)
  std::size_t size = kMaxDatasetPage;
};
// INVALID_ARGUMENT naming page_size and the limit when it is over it, or
// page_token when it cannot be a token ListDatasets gave.
[[nodiscard]] absl::StatusOr<DatasetPage> DatasetPageFromProto(const v1::ListDatasetsRequest& request);

}  // namespace tally
