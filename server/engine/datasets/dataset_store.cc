#include "server/engine/datasets/dataset_store.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/metrics/metrics.h"
#include "spdlog/spdlog.h"

namespace tally {
namespace {

// The places a dataset has bytes on, each once.
std::vector<int> PlacesOf(const Dataset& d) {
  std::vector<int> places;
  for (const DatasetShard& sh : d.shards()) {
    if (std::find(places.begin(), places.end(), sh.place) == places.end()) places.push_back(sh.place);
  }
  return places;
}

}  // namespace

struct DatasetStore::Reclaimer {
  std::mutex mu;
  std::condition_variable wake;
  DatasetStore* store = nullptr;  // null once the store is going away
  bool stopping = false;
  std::deque<Dataset*> freed;

  // A dataset's last reference is gone (on whatever thread dropped it).
  void Push(Dataset* d) {
    {
      std::lock_guard lock(mu);
      if (store != nullptr) {
        freed.push_back(d);
        wake.notify_one();
        return;
      }
    }
    delete d;
  }
};

DatasetStore::DatasetStore(Backend& backend, DatasetOptions options, Metrics* metrics, DatasetDirectory* directory)
    : backend_(backend),
      options_(options),
      metrics_(metrics),
      directory_(directory),
      reclaimer_(std::make_shared<Reclaimer>()) {
  for (const ResidentPlace& p : backend_.ResidentPlaces()) places_.push_back(Place{p});
  reclaimer_->store = this;
  {
    std::lock_guard lock(mu_);
    ReportLocked();
  }
  sweeper_ = std::thread([this] { Sweep(); });
}

DatasetStore::~DatasetStore() {
  {
    std::lock_guard lock(reclaimer_->mu);
    reclaimer_->stopping = true;
  }
  reclaimer_->wake.notify_all();
  sweeper_.join();
  std::deque<Dataset*> left;
  {
    std::lock_guard lock(reclaimer_->mu);
    reclaimer_->store = nullptr;
    left.swap(reclaimer_->freed);
  }
  for (Dataset* d : left) delete d;
  RemoveDoomedFiles();  // expired datasets' files (a restart would drop them anyway)
  // entries_ go with the members; their deleters now free inline.
}

absl::Status DatasetStore::CheckName(const std::string& name, const char* what) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("name: a ", what, " name must not be empty."));
  if (name.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: ", name.size(), " bytes is over the 256-byte limit for a ", what, " name."));
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat("name: byte ", i, " (0x", absl::Hex(c, absl::kZeroPad2),
                                                     ") is not printable ASCII; ", what,
                                                     " names are 1 to 256 printable ASCII characters."));
    }
  }
  return absl::OkStatus();
}

std::string DatasetStore::FullnessLocked(const Place& p) const {
  std::string s = absl::StrCat(p.where.label, " holds ", p.charged, " bytes of its ", options_.max_bytes_per_place,
                               "-byte limit (--max_dataset_bytes): ", p.published, " in ", p.datasets,
                               " dataset(s), ", p.uploading, " in uploads in progress");
  if (const std::uint64_t read = p.charged - p.uploading - p.published; read > 0) {
    absl::StrAppend(&s, ", ", read, " of removed datasets still being read (freed when those queries end)");
  }
  return s;
}

DatasetStore::Room DatasetStore::FindRoomLocked(const std::string& name, const std::vector<std::uint64_t>& adding,
                                                bool for_commit, bool evict) const {
  Room room;
  const std::size_t n = places_.size();
  const std::uint64_t limit = options_.max_bytes_per_place;
  room.short_of = n;
  if (limit == 0) return room;
  std::vector<std::uint64_t> held(n), freed(n, 0);
  for (std::size_t p = 0; p < n; ++p) {
    held[p] = (for_commit ? places_[p].charged - places_[p].uploading : places_[p].charged) + adding[p];
  }
  auto remove = [&](const Dataset& d) {
    const std::vector<std::uint64_t> charges = ChargesOf(d.shards_, d.info_.dtype);
    for (std::size_t p = 0; p < n; ++p) freed[p] += charges[p];
  };
  auto over = [&](std::size_t p) { return held[p] > limit + freed[p]; };
  auto first_over = [&] {
    std::size_t p = 0;
    while (p < n && !over(p)) ++p;
    return p;
  };
  // The version a replace takes the place of goes at its commit anyway.
  if (auto old = entries_.find(name); old != entries_.end()) remove(*old->second.dataset);
  if (evict) {
    for (auto it = lru_.rbegin(); it != lru_.rend() && first_over() < n; ++it) {
      if (*it == name) continue;
      const Dataset& d = *entries_.at(*it).dataset;
      bool helps = false;
      for (const DatasetShard& sh : d.shards_) helps = helps || over(static_cast<std::size_t>(sh.place));
      if (!helps) continue;
      room.victims.push_back(*it);
      remove(d);
    }
  }
  room.short_of = first_over();
  return room;
}

std::string DatasetStore::RefusalLocked(const std::string& name, const std::vector<std::uint64_t>& adding,
                                        std::size_t place) const {
  return absl::StrCat("dataset '", name, "' needs ", adding[place], " bytes on ", places_[place].where.label, "; ",
                      FullnessLocked(places_[place]),
                      options_.evict_lru ? "; what could be evicted is not enough"
                                         : "; delete datasets, or run the server with --dataset_evict_lru");
}

std::vector<PlacedPiece> Dataset::Pieces(std::uint64_t begin, std::uint64_t end) const {
  const std::uint64_t size = rules::SizeOf(info_.dtype);
  std::vector<PlacedPiece> pieces;
  for (const DatasetShard& sh : shards_) {
    const std::uint64_t lo = std::max(begin, sh.first), hi = std::min(end, sh.first + sh.length);
    if (lo >= hi) continue;
    pieces.push_back(PlacedPiece{lo - begin, sh.memory->extent().Sub((lo - sh.first) * size, (hi - lo) * size)});
  }
  if (pieces.empty()) pieces.push_back(PlacedPiece{0, shards_.front().memory->extent().Sub(0, 0)});
  return pieces;
}

absl::StatusOr<std::shared_ptr<Dataset>> DatasetStore::Publish(Upload& upload) {
  const std::vector<std::uint64_t> mine = ChargesOf(upload.shards_, upload.spec_.dtype);
  const auto give_up = std::chrono::steady_clock::now() + options_.eviction_wait;
  const std::string& name = upload.request_.name;
  const bool evict = options_.evict_lru && upload.restored_from_.empty();
  std::vector<std::shared_ptr<Dataset>> removed;  // dropped outside the lock
  std::shared_ptr<Dataset> dataset;
  {
    std::unique_lock lock(mu_);
    Room room = FindRoomLocked(name, mine, /*for_commit=*/true, evict);
    while (room.short_of < places_.size()) {
      const Place& short_of = places_[room.short_of];
      const bool being_read = short_of.charged > short_of.uploading + short_of.published;
      if (!being_read || freed_.wait_until(lock, give_up) == std::cv_status::timeout) {
        return absl::ResourceExhaustedError(RefusalLocked(name, mine, room.short_of));
      }
      room = FindRoomLocked(name, mine, /*for_commit=*/true, evict);
    }
    for (const std::string& v : room.victims) {
      auto e = entries_.find(v);
      spdlog::warn("dataset '{}' evicted ({} bytes on {}, the least recently queried) to make room for the "
                   "upload of '{}' under --max_dataset_bytes={}",
                   v, e->second.dataset->info_.bytes, e->second.dataset->info_.place, name,
                   options_.max_bytes_per_place);
      if (metrics_ != nullptr) metrics_->DatasetEvicted();
      removed.push_back(e->second.dataset);
      RemoveLocked(e);
    }
    auto* d = new Dataset();
    d->shards_ = std::move(upload.shards_);
    d->charge_ = std::move(upload.charge_);
    d->file_ = upload.writer_ != nullptr ? upload.writer_->file() : upload.restored_from_;
    d->info_.name = name;
    d->info_.dtype = upload.spec_.dtype;
    d->info_.length = upload.spec_.length;
    d->info_.row_length = upload.request_.row_length;
    d->info_.bytes = upload.bytes_;
    std::vector<std::string> labels;
    for (const DatasetShard& sh : d->shards_) labels.push_back(places_[static_cast<std::size_t>(sh.place)].where.label);
    d->info_.place = absl::StrJoin(labels, ",");
    d->info_.shards = static_cast<std::uint32_t>(d->shards_.size());
    d->info_.created = upload.created_;
    d->info_.expires = upload.expires_;
    dataset = std::shared_ptr<Dataset>(d, [rec = reclaimer_](Dataset* p) { rec->Push(p); });
    d->info_.version = next_version_++;
    uploading_.erase(name);
    auto it = entries_.find(name);
    if (it != entries_.end()) {
      removed.push_back(it->second.dataset);
      RemoveLocked(it);
    }
    lru_.push_front(name);
    entries_.emplace(name, Entry{dataset, lru_.begin()});
    for (std::size_t p = 0; p < places_.size(); ++p) {
      places_[p].uploading -= mine[p];
      places_[p].published += mine[p];
    }
    for (const int p : PlacesOf(*d)) ++places_[static_cast<std::size_t>(p)].datasets;
    ReportLocked();
  }
  if (metrics_ != nullptr && upload.restored_from_.empty()) metrics_->DatasetUploaded();
  return dataset;
}

void DatasetStore::RemoveLocked(std::map<std::string, Entry>::iterator it) {
  const Dataset& d = *it->second.dataset;
  for (const int p : PlacesOf(d)) --places_[static_cast<std::size_t>(p)].datasets;
  // Its bytes stay charged until its last reader lets go of them.
  const std::vector<std::uint64_t> charges = ChargesOf(d.shards_, d.info_.dtype);
  for (std::size_t p = 0; p < places_.size(); ++p) places_[p].published -= charges[p];
  if (!d.file_.empty()) doomed_files_.push_back(d.file_);
  lru_.erase(it->second.lru);
  entries_.erase(it);
  ReportLocked();
}

void DatasetStore::RemoveDoomedFiles(bool wait) {
  if (directory_ == nullptr) return;
  std::unique_lock files(files_mu_, std::defer_lock);
  if (wait) {
    files.lock();
  } else if (!files.try_lock()) {
    return;
  }
  std::vector<std::string> doomed;
  {
    std::lock_guard lock(mu_);
    doomed.swap(doomed_files_);
  }
  directory_->Remove(doomed);
}

absl::StatusOr<std::shared_ptr<const Dataset>> DatasetStore::Acquire(const std::string& name) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  std::shared_ptr<const Dataset> d;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(name);
    const auto now = std::chrono::system_clock::now();
    if (it != entries_.end() && it->second.dataset->info_.expires && *it->second.dataset->info_.expires <= now) {
      RemoveLocked(it);
      if (metrics_ != nullptr) metrics_->DatasetExpired();
      it = entries_.end();
    }
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("name: there is no dataset '", name, "'."));
    }
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    ++it->second.dataset->info_.queries;
    d = it->second.dataset;
  }
  if (metrics_ != nullptr) metrics_->DatasetQueried();
  return d;
}

absl::StatusOr<DatasetInfo> DatasetStore::Describe(const std::string& name) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  ExpireNow();
  std::lock_guard lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("name: there is no dataset '", name, "'."));
  return it->second.dataset->info_;
}

std::vector<DatasetInfo> DatasetStore::List() {
  return ListPage("", std::numeric_limits<std::size_t>::max(), nullptr);
}

std::vector<DatasetInfo> DatasetStore::ListPage(const std::string& after, std::size_t limit, bool* more) {
  ExpireNow();
  std::lock_guard lock(mu_);
  std::vector<DatasetInfo> out;
  auto it = after.empty() ? entries_.begin() : entries_.upper_bound(after);
  for (; it != entries_.end() && out.size() < limit; ++it) out.push_back(it->second.dataset->info_);
  if (more != nullptr) *more = it != entries_.end();
  return out;
}

absl::StatusOr<DatasetInfo> DatasetStore::Delete(const std::string& name) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  std::shared_ptr<Dataset> gone;  // dropped outside the lock
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("name: there is no dataset '", name, "'."));
    gone = it->second.dataset;
    RemoveLocked(it);
  }
  // Its file is gone before the delete answers.
  RemoveDoomedFiles();
  if (metrics_ != nullptr) metrics_->DatasetDeleted();
  return gone->info_;
}

std::vector<DatasetStore::PlaceUsage> DatasetStore::Usage() {
  std::lock_guard lock(mu_);
  std::vector<PlaceUsage> out;
  for (const Place& p : places_) out.push_back({p.where.label, p.charged, p.datasets, options_.max_bytes_per_place});
  return out;
}

void DatasetStore::ExpireNow() {
  std::vector<std::shared_ptr<Dataset>> expired;  // dropped outside the lock
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::system_clock::now();
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      const auto& expires = it->second.dataset->info_.expires;
      if (expires && *expires <= now) {
        spdlog::info("dataset '{}' expired ({} bytes)", it->first, it->second.dataset->info_.bytes);
        expired.push_back(it->second.dataset);
        RemoveLocked(it);
        if (metrics_ != nullptr) metrics_->DatasetExpired();
      }
      it = next;
    }
  }
}

void DatasetStore::Charge(int place, std::int64_t bytes) {
  {
    std::lock_guard lock(mu_);
    places_[static_cast<std::size_t>(place)].charged += static_cast<std::uint64_t>(bytes);
    ReportLocked();
  }
  freed_.notify_all();
}

void DatasetStore::ReportLocked() {
  if (metrics_ == nullptr) return;
  for (const Place& p : places_) {
    metrics_->SetResidentDatasets(p.where.label, p.charged, p.datasets, options_.max_bytes_per_place);
  }
}

// The store's thread: frees the memory of datasets no one reads any more
// (so a query never frees on its own path) and expires datasets.
void DatasetStore::Sweep() {
  std::unique_lock lock(reclaimer_->mu);
  for (;;) {
    reclaimer_->wake.wait_for(lock, options_.sweep_interval,
                              [this] { return reclaimer_->stopping || !reclaimer_->freed.empty(); });
    if (reclaimer_->stopping) return;
    std::deque<Dataset*> freed;
    freed.swap(reclaimer_->freed);
    lock.unlock();
    for (Dataset* d : freed) {
      const std::vector<std::uint64_t> charges = ChargesOf(d->shards_, d->info_.dtype);
      delete d;
      for (std::size_t p = 0; p < charges.size(); ++p) {
        if (charges[p] != 0) Charge(static_cast<int>(p), -static_cast<std::int64_t>(charges[p]));
      }
    }
    ExpireNow();
    // Expired datasets' files; a file's expiry is in its header, so one a
    // crash leaves is dropped at the next start anyway.
    RemoveDoomedFiles(/*wait=*/false);
    lock.lock();
  }
}

}  // namespace tally
