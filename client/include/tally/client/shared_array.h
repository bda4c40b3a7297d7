// An array copied once into a shared-memory object and registered with a
// tally server on the same host as a host region: the zero-copy path for
// co-located clients (tally aggregate --shm, tally bench --mode=shm).
// Queries then send only their aggregations; the server reads the array
// where it lies. Destroying it unregisters the region and unlinks the object.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tally/client/array.h"
#include "tally/client/client.h"
#include "tally/client/shared_memory.h"

namespace tally::client {

class SharedArray {
 public:
  // Copies `array` into a new object in /dev/shm and registers it with the
  // server behind `client` (which must outlive this).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SharedArray>> Create(Client& client, const ArrayRef& array,
                                                                           absl::Duration timeout);
  ~SharedArray();
  SharedArray(const SharedArray&) = delete;
  SharedArray& operator=(const SharedArray&) = delete;

  // AggregateRegion over the whole array, rows as the array says; through
  // `via` (another connection to the same server) when given.
  [[nodiscard]] absl::StatusOr<v1::AggregateResponse> Aggregate(const std::vector<v1::Aggregation>& aggregations,
                                                                absl::Duration timeout, Client* via = nullptr) const;
  const std::string& region() const { return region_; }
  const v1::RegionInfo& info() const { return info_; }

 private:
  SharedArray() = default;
  Client* client_ = nullptr;
  ArrayRef array_;
  std::unique_ptr<SharedMemoryObject> object_;
  std::string region_;
  v1::RegionInfo info_;
};

}  // namespace tally::client
