#include "server/engine/regions/region_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/metrics/metrics.h"

namespace tally {

// The registry's byte count, shared with the regions: a region may outlive
// the registry (a query still reading it when the server stops).
struct RegionCharge {
  std::mutex mu;
  std::uint64_t bytes = 0;
  std::uint64_t regions = 0;  // registered names
  std::uint64_t limit = 0;
  Metrics* metrics = nullptr;

  void Add(std::int64_t delta_bytes, std::int64_t delta_regions) {
    std::lock_guard lock(mu);
    bytes += delta_bytes;
    regions += delta_regions;
    if (metrics != nullptr) metrics->SetRegions(regions, bytes, limit);
  }

  // Charges `more` bytes if they fit under the limit.
  absl::Status Reserve(std::uint64_t more) {
    std::lock_guard lock(mu);
    if (limit != 0 && (more > limit || bytes > limit - more)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "byte_size: registering ", more, " more bytes would exceed --max_region_bytes=", limit, " (", bytes,
          " bytes are registered or still being read); unregister regions first."));
    }
    bytes += more;
    if (metrics != nullptr) metrics->SetRegions(regions, bytes, limit);
    return absl::OkStatus();
  }
};

Region::~Region() {
  attachment_.reset();  // cudaHostUnregister / cudaIpcCloseMemHandle before munmap
  mapping_.reset();
  if (charge_) charge_->Add(-static_cast<std::int64_t>(info_.bytes), 0);
  caller_charge_.reset();
}

absl::Status Region::Intact() const { return mapping_ ? mapping_->Intact() : absl::OkStatus(); }

RegionRegistry::RegionRegistry(Backend& backend, std::uint64_t max_bytes, Metrics* metrics, int max_regions)
    : backend_(backend),
      metrics_(metrics),
      max_regions_(max_regions),
      charge_(std::make_shared<RegionCharge>()) {
  charge_->limit = max_bytes;
  charge_->metrics = metrics;
  charge_->Add(0, 0);
}

RegionRegistry::~RegionRegistry() {
  std::lock_guard lock(charge_->mu);
  charge_->metrics = nullptr;  // the metrics may go before regions still being read
}

absl::StatusOr<RegionInfo> RegionRegistry::Register(const std::string& name, std::uint64_t bytes,
                                                    std::shared_ptr<void> charge,
                                                    const std::function<absl::Status(Region&)>& attach) {
  if (absl::Status s = DatasetStore::CheckName(name, "region"); !s.ok()) return s;
  {
    std::lock_guard lock(mu_);
    if (regions_.contains(name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("name: region '", name, "' is registered already; unregister it first."));
    }
    if (static_cast<int>(regions_.size()) >= max_regions_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "name: ", regions_.size(), " regions are registered, the most --max_regions=", max_regions_,
          " allows; unregister some first."));
    }
    if (absl::Status s = charge_->Reserve(bytes); !s.ok()) return s;
    regions_[name] = nullptr;  // reserved while the mapping and the attachment are made
  }
  auto region = std::make_shared<Region>();
  region->info_.name = name;
  region->info_.bytes = bytes;
  region->info_.registered = std::chrono::system_clock::now();
  region->charge_ = charge_;  // from here the region gives the bytes back when it goes
  region->caller_charge_ = std::move(charge);
  absl::Status attached = attach(*region);
  std::lock_guard lock(mu_);
  if (!attached.ok()) {
    regions_.erase(name);
    return attached;
  }
  regions_[name] = region;
  charge_->Add(0, 1);
  return region->info_;
}

absl::StatusOr<RegionInfo> RegionRegistry::RegisterHost(const std::string& name, const std::string& shm_name,
                                                        std::uint64_t offset, std::uint64_t bytes,
                                                        std::shared_ptr<void> charge) {
  // What the object is (a FIFO, a short file, a bad name) decides before the
  // byte budget: mapping reads nothing, and a refusal for what the object is
  // must not depend on what other registrations hold at that moment.
  if (absl::Status s = DatasetStore::CheckName(name, "region"); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<ShmMapping>> mapping = ShmMapping::Open(shm_name, offset, bytes);
  if (!mapping.ok()) return mapping.status();
  return Register(name, bytes, std::move(charge), [&](Region& r) -> absl::Status {
    r.info_.kind = RegionInfo::Kind::kHost;
    r.info_.shm_name = shm_name;
    r.info_.offset = offset;
    r.mapping_ = std::move(*mapping);
    absl::StatusOr<std::unique_ptr<Attachment>> attached = backend_.AttachHost(r.mapping_->bytes());
    if (!attached.ok()) return attached.status();
    r.attachment_ = std::move(*attached);
    r.info_.place = r.attachment_->extent().placement.memory == Memory::kPinnedHost ? "pinned host" : "host";
    return absl::OkStatus();
  });
}

absl::StatusOr<RegionInfo> RegionRegistry::RegisterCuda(const std::string& name, std::span<const std::byte> handle,
                                                        int device, std::uint64_t bytes,
                                                        std::shared_ptr<void> charge) {
  return Register(name, bytes, std::move(charge), [&](Region& r) -> absl::Status {
    r.info_.kind = RegionInfo::Kind::kCuda;
    r.info_.device = device;
    absl::StatusOr<std::unique_ptr<Attachment>> attached = backend_.AttachCudaIpc(handle, device, bytes);
    if (!attached.ok()) return attached.status();
    r.attachment_ = std::move(*attached);
    r.info_.place = absl::StrCat("cuda:", device);
    return absl::OkStatus();
  });
}

absl::StatusOr<RegionInfo> RegionRegistry::Unregister(const std::string& name) {
  std::shared_ptr<Region> gone;
  {
    std::lock_guard lock(mu_);
    auto it = regions_.find(name);
    if (it == regions_.end() || it->second == nullptr) {
      return absl::NotFoundError(absl::StrCat("name: no region '", name.substr(0, 300), "' is registered."));
    }
    gone = std::move(it->second);
    regions_.erase(it);
  }
  charge_->Add(0, -1);
  RegionInfo info = gone->info_;
  // Queries holding it keep it; the last one unmaps it.
  return info;
}

absl::StatusOr<std::shared_ptr<const Region>> RegionRegistry::Acquire(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second == nullptr) {
    return absl::NotFoundError(absl::StrCat("region: no region '", name.substr(0, 300), "' is registered."));
  }
  ++it->second->info_.queries;
  if (metrics_ != nullptr) metrics_->RegionQueried();
  return std::shared_ptr<const Region>(it->second);
}

std::vector<RegionInfo> RegionRegistry::List() {
  std::lock_guard lock(mu_);
  std::vector<RegionInfo> out;
  for (const auto& [name, region] : regions_) {
    if (region != nullptr) out.push_back(region->info_);
  }
  return out;
}

std::uint64_t RegionRegistry::max_bytes() const { return charge_->limit; }  // set once, before any thread

std::uint64_t RegionRegistry::charged_bytes() {
  std::lock_guard lock(charge_->mu);
  return charge_->bytes;
}

}  // namespace tally
