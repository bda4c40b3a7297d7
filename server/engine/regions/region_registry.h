// Registered shared-memory regions: host regions (a client's POSIX shared
// memory object, mapped once and attached to the backend once) and CUDA
// regions (another process's GPU memory, opened once from its IPC handle).
// The registry owns the names and the byte budget; queries hold a shared
// reference to the region they read, so unregistering never pulls memory
// from under a query: the region goes when its last reader ends.
#pragma once

#include <chrono>
#include <functional>
#include <span>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/attachment.h"
#include "server/engine/backend.h"
#include "server/engine/regions/shm_mapping.h"

namespace tally {

class Metrics;

struct RegionInfo {
  enum class Kind { kHost, kCuda };
  std::string name;
  Kind kind = Kind::kHost;
  std::string shm_name;       // host regions
  std::uint64_t offset = 0;   // host regions
  std::uint64_t bytes = 0;
  int device = -1;            // CUDA regions
  std::string place;          // "pinned host", "host", "cuda:0"
  std::chrono::system_clock::time_point registered;
  std::uint64_t queries = 0;
};

// One registered region: immutable, read by any number of queries.
class Region {
 public:
  ~Region();
  const RegionInfo& info() const { return info_; }
  // The registered bytes, where the backend reads them.
  Extent extent() const { return attachment_->extent(); }
  // OK while the bytes are still the client's (a host region's object has
  // not been truncated); checked before and after each query reads them.
  [[nodiscard]] absl::Status Intact() const;

 private:
  friend class RegionRegistry;
  RegionInfo info_;
  // Detached before unmapped: members go in reverse order.
  std::unique_ptr<ShmMapping> mapping_;      // host regions
  std::unique_ptr<Attachment> attachment_;
  std::shared_ptr<struct RegionCharge> charge_;  // gives the bytes back to the budget
  std::shared_ptr<void> caller_charge_;          // and to the caller's quota
};

class RegionRegistry {
 public:
  // `backend` and `metrics` (may be null) outlive the registry.
  // `max_bytes`: registered bytes allowed in all (0: no limit);
  // `max_regions`: regions registered at once (each holds a file descriptor
  // and a mapping; at most SigbusGuard::kMaxRanges host regions).
  RegionRegistry(Backend& backend, std::uint64_t max_bytes, Metrics* metrics, int max_regions = 1024);
  ~RegionRegistry();
  RegionRegistry(const RegionRegistry&) = delete;
  RegionRegistry& operator=(const RegionRegistry&) = delete;

  // `charge` (may be null) is held by the region until it is unmapped: a
  // caller's quota, say.
  [[nodiscard]] absl::StatusOr<RegionInfo> RegisterHost(const std::string& name, const std::string& shm_name,
                                                        std::uint64_t offset, std::uint64_t bytes,
                                                        std::shared_ptr<void> charge = nullptr);
  [[nodiscard]] absl::StatusOr<RegionInfo> RegisterCuda(const std::string& name, std::span<const std::byte> handle,
                                                        int device, std::uint64_t bytes,
                                                        std::shared_ptr<void> charge = nullptr);
  // Removes the name; queries reading the region finish on it.
  [[nodiscard]] absl::StatusOr<RegionInfo> Unregister(const std::string& name);
  // The region, for a query (NOT_FOUND when there is none); counts the query.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Region>> Acquire(const std::string& name);
  std::vector<RegionInfo> List();
  std::uint64_t charged_bytes();
  std::uint64_t max_bytes() const;

 private:
  absl::StatusOr<RegionInfo> Register(const std::string& name, std::uint64_t bytes, std::shared_ptr<void> charge,
                                      const std::function<absl::Status(Region&)>& attach);

  Backend& backend_;
  Metrics* const metrics_;
  const int max_regions_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Region>> regions_;
  std::shared_ptr<struct RegionCharge> charge_;
};

}  // namespace tally
