#include "tally/client/shared_array.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "tally/client/wire.h"

namespace tally::client {

absl::StatusOr<std::unique_ptr<SharedArray>> SharedArray::Create(Client& client, const ArrayRef& array,
                                                                 absl::Duration timeout) {
  std::unique_ptr<SharedArray> s(new SharedArray());
  s->client_ = &client;
  const std::string name = SharedMemoryObject::UniqueName("array");
  absl::StatusOr<std::unique_ptr<SharedMemoryObject>> object = SharedMemoryObject::Create(name, array.size_bytes());
  if (!object.ok()) return object.status();
  s->object_ = std::move(*object);
  if (array.size_bytes() > 0) std::memcpy(s->object_->bytes().data(), array.data, array.size_bytes());
  s->array_ = array;
  s->array_.data = s->object_->bytes().data();
  absl::StatusOr<v1::RegionInfo> info =
      client.RegisterHostRegion(name.substr(1), name, 0, array.size_bytes(), timeout);
  if (!info.ok()) return info.status();
  s->region_ = info->name();
  s->info_ = *std::move(info);
  return s;
}

SharedArray::~SharedArray() {
  if (!region_.empty()) (void)client_->UnregisterRegion(region_, absl::Seconds(30));
}

absl::StatusOr<v1::AggregateResponse> SharedArray::Aggregate(const std::vector<v1::Aggregation>& aggregations,
                                                             absl::Duration timeout, Client* via) const {
  const v1::ArraySpec spec = SpecOf(array_);
  return (via != nullptr ? via : client_)->AggregateRegion(region_, 0, spec, aggregations, timeout);
}

}  // namespace tally::client
