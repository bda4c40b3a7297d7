#include "server/frontend/dataset_header.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/frontend/convert.h"

namespace tally {

absl::StatusOr<DatasetHeader> DatasetHeaderFromProto(const v1::PutDatasetRequest::Header& h,
                                                     const std::string& prefix) {
  if (absl::Status s = DatasetStore::CheckName(h.name()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, s.message()));
  }
  absl::StatusOr<DType> dtype = DTypeFromProto(h.spec().dtype());
  if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat(prefix, dtype.status().message()));
  if (!h.spec().has_length()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "spec.length: a dataset upload needs the array's length in elements up front."));
  }
  if (h.spec().row_length() != 0 && h.spec().length() % h.spec().row_length() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "spec.row_length: ", h.spec().row_length(),
                                                   " does not divide spec.length (", h.spec().length(),
                                                   "): a dataset with rows is a whole number of them."));
  }
  if (!h.spec().offsets().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "spec.offsets: a dataset has no segments of its own; give offsets with each AggregateDataset."));
  }
  if (!h.spec().validity().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "spec.validity: a dataset has no mask of its own; give validity with each AggregateDataset."));
  }
  if (!std::isfinite(h.ttl_seconds()) || h.ttl_seconds() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "ttl_seconds: ", h.ttl_seconds(), " is not a finite number of seconds >= 0."));
  }
  const std::uint64_t size = rules::SizeOf(*dtype);
  if (h.spec().length() > (std::uint64_t{1} << 62) / size) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "spec.length: ", h.spec().length(), " elements is beyond any array tally can take."));
  }
  DatasetHeader out;
  out.name = h.name();
  out.dtype = *dtype;
  out.length = h.spec().length();
  out.row_length = h.spec().row_length();
  out.replace = h.replace();
  if (h.ttl_seconds() > 0) {
    out.ttl = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(std::min(h.ttl_seconds(), 1e12) * 1e3)));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<void>> ChargeDataset(IdentityQuotas& quotas, const std::string& identity,
                                                    std::uint64_t bytes) {
  struct Charges {
    IdentityQuota::Charge bytes, count;
  };
  absl::StatusOr<IdentityQuota::Charge> count = quotas.datasets.TryCharge(identity, 1);
  if (!count.ok()) return count.status();
  absl::StatusOr<IdentityQuota::Charge> charged =
      quotas.dataset_bytes.TryCharge(identity, bytes + DatasetStore::kOverheadBytes);
  if (!charged.ok()) return charged.status();
  return std::make_shared<Charges>(Charges{std::move(*charged), std::move(*count)});
}

absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> BeginChargedUpload(DatasetStore& datasets,
                                                                     IdentityQuotas& quotas,
                                                                     const std::string& identity,
                                                                     const DatasetHeader& header) {
  absl::StatusOr<std::shared_ptr<void>> charge =
      ChargeDataset(quotas, identity, header.length * rules::SizeOf(header.dtype));
  if (!charge.ok()) return charge.status();
  return datasets.BeginUpload(DatasetStore::UploadRequest{header.name, header.dtype, header.length,
                                                          header.row_length, header.replace, header.ttl, identity},
                              std::move(*charge));
}

}  // namespace tally
