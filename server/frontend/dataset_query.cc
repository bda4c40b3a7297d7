#include "server/frontend/dataset_query.h"

#include "absl/strings/str_cat.h"

namespace tally {

absl::StatusOr<std::uint64_t> DatasetQueryRowLength(const v1::AggregateDatasetRequest& request,
                                                    const DatasetInfo& info, std::uint64_t begin, std::uint64_t end) {
  if (request.has_row_length()) return request.row_length();
  if (!request.offsets().empty() || info.row_length == 0) return 0;
  const std::uint64_t rows = info.row_length;
  if (begin % rows != 0 || end % rows != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "range: [", begin, ", ", end, ") does not start and end on the rows of dataset '", info.name, "' (",
        rows, " elements each, as uploaded); give a range of whole rows, or set row_length (0 for one result "
        "over the range)."));
  }
  return rows;
}

absl::StatusOr<DatasetPage> DatasetPageFromProto(const v1::ListDatasetsRequest& request) {
  if (request.page_size() > kMaxDatasetPage) {
    return absl::InvalidArgumentError(absl::StrCat("page_size: ", request.page_size(), " is over the limit of ",
                                                   kMaxDatasetPage,
                                                   " datasets per page; follow next_page_token for the rest."));
  }
  if (!request.page_token().empty()) {
    if (absl::Status s = DatasetStore::CheckName(request.page_token()); !s.ok()) {
      return absl::InvalidArgumentError(
          "page_token: not a token ListDatasets gave (give the last answer's next_page_token, or none for the "
          "first page).");
    }
  }
  DatasetPage page;
  page.after = request.page_token();
  if (request.page_size() != 0) page.size = request.page_size();
  return page;
}

}  // namespace tally
