#include "server/frontend/dataset_query.h"

#include "absl/strings/str_cat.h"

namespace tally {

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
