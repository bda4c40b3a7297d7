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

absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> DatasetStore::BeginUpload(const UploadRequest& request,
                                                                              std::shared_ptr<void> charge) {
  return Begin(request, std::move(charge), /*restoring=*/false);
}

absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> DatasetStore::BeginRestore(const DatasetFileHeader& header,
                                                                               const std::string& file,
                                                                               std::shared_ptr<void> charge) {
  UploadRequest request{header.name, header.dtype, header.length, header.row_length, false, std::nullopt,
                        header.owner};
  absl::StatusOr<std::unique_ptr<Upload>> upload = Begin(request, std::move(charge), /*restoring=*/true);
  if (!upload.ok()) return upload.status();
  (*upload)->restored_from_ = file;
  (*upload)->created_ = header.created;
  (*upload)->expires_ = header.expires;
  return upload;
}

absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> DatasetStore::Begin(const UploadRequest& request,
                                                                        std::shared_ptr<void> charge,
                                                                        bool restoring) {
  const std::string& name = request.name;
  const DType dtype = request.dtype;
  const std::uint64_t length = request.length;
  const bool replace = request.replace;
  // A restore finds room or is skipped: it evicts nothing it restored before.
  const bool evict = options_.evict_lru && !restoring;
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  if (places_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", backend_.name(), " backend keeps no resident datasets."));
  }
  const std::uint64_t size = rules::SizeOf(dtype);
  if (length > ~std::uint64_t{0} / size) {
    return absl::InvalidArgumentError(absl::StrCat("spec.length: ", length, " elements is too many bytes."));
  }
  if (request.row_length != 0 && length % request.row_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec.row_length: ", request.row_length,
                                                   " does not divide the dataset's ", length, " elements."));
  }
  const std::uint64_t bytes = length * size;
  auto upload = std::unique_ptr<Upload>(new Upload());
  upload->request_ = request;
  upload->charge_ = std::move(charge);
  upload->spec_.dtype = dtype;
  upload->spec_.length = length;
  upload->bytes_ = bytes;
  const std::uint64_t limit = options_.max_bytes_per_place;
  std::vector<DatasetShard> shards = CutShards(length, size);
  {
    // The most one place takes, wherever the deal starts (the loop below
    // deals again from the place with the most room).
    const std::vector<std::uint64_t> need = Deal(shards, 0, dtype);
    const std::uint64_t most = *std::max_element(need.begin(), need.end());
    if (limit != 0 && most > limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "spec.length: ", bytes, " bytes", shards.size() > 1 ? absl::StrCat(" (", most, " on one place)") : "",
          " and the ", kOverheadBytes, " every dataset is charged are over the ", limit,
          "-byte limit per place (--max_dataset_bytes)."));
    }
  }
  const auto give_up = std::chrono::steady_clock::now() + options_.eviction_wait;
  std::unique_lock lock(mu_);
  for (;;) {
    if (uploading_.contains(name)) {
      return absl::AlreadyExistsError(absl::StrCat("name: an upload of dataset '", name,
                                                   "' is already in progress; one upload of a name at a time."));
    }
    if (!replace && entries_.contains(name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("name: dataset '", name, "' exists; set replace to upload a new version."));
    }
    // A replace takes its old version's place in the count at its commit.
    if (options_.max_datasets != 0 && !entries_.contains(name) &&
        entries_.size() + uploading_.size() >= options_.max_datasets) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "name: ", entries_.size(), " datasets exist and ", uploading_.size(),
          " are being uploaded, the most --max_datasets=", options_.max_datasets,
          " allows; delete datasets first."));
    }
    // The deal starts at the place with the most room.
    std::size_t start = 0;
    for (std::size_t p = 1; p < places_.size(); ++p) {
      if (places_[p].charged < places_[start].charged) start = p;
    }
    const std::vector<std::uint64_t> need = Deal(shards, start, dtype);
    // Nothing is evicted here: the upload may yet fail or be cancelled.
    // It starts if its commit could make room.
    const Room room = FindRoomLocked(name, need, /*for_commit=*/false, evict);
    if (room.short_of == places_.size()) {
      for (std::size_t p = 0; p < places_.size(); ++p) {
        places_[p].charged += need[p];
        places_[p].uploading += need[p];
      }
      upload->store_ = this;  // from here its destruction gives the name and bytes back
      upload->shards_ = std::move(shards);
      uploading_[name] = true;
      ReportLocked();
      break;
    }
    // With --dataset_evict_lru, memory that removed datasets' readers still
    // hold is worth waiting for: it goes when their queries end.
    const Place& short_of = places_[room.short_of];
    const bool being_read = short_of.charged > short_of.uploading + short_of.published;
    if (!evict || !being_read || freed_.wait_until(lock, give_up) == std::cv_status::timeout) {
      return absl::ResourceExhaustedError(RefusalLocked(name, need, room.short_of));
    }
  }
  lock.unlock();
  for (DatasetShard& sh : upload->shards_) {
    absl::StatusOr<std::unique_ptr<ResidentMemory>> memory = backend_.AllocateResident(
        sh.length * size, places_[static_cast<std::size_t>(sh.place)].where.index);
    if (!memory.ok()) {
      upload->done_ = true;
      Abandon(*upload);
      return memory.status();
    }
    sh.memory = std::move(*memory);
  }
  if (directory_ != nullptr && !restoring) {
    // The header's times are written when the upload commits.
    DatasetFileHeader header{name, dtype, length, request.row_length, 0, {}, std::nullopt, request.owner};
    absl::StatusOr<std::unique_ptr<DatasetFileWriter>> writer = directory_->Create(header);
    if (!writer.ok()) return writer.status();  // `upload` goes, and gives back what it reserved
    upload->writer_ = std::move(*writer);
  }
  return upload;
}

std::vector<DatasetShard> DatasetStore::CutShards(std::uint64_t length, std::uint64_t size) const {
  std::uint64_t count = options_.shards > 0 ? static_cast<std::uint64_t>(options_.shards) : places_.size();
  const std::uint64_t min_elements = std::max<std::uint64_t>(1, options_.min_shard_bytes / size);
  count = std::max<std::uint64_t>(1, std::min(count, length / min_elements));
  std::vector<DatasetShard> shards;
  for (std::uint64_t i = 0; i < count; ++i) {
    // Nearly equal lengths; computed in 128 bits, length * i can overflow.
    const auto at = [&](std::uint64_t k) {
      return static_cast<std::uint64_t>(static_cast<unsigned __int128>(length) * k / count);
    };
    shards.push_back(DatasetShard{0, at(i), at(i + 1) - at(i), nullptr});
  }
  return shards;
}

std::vector<std::uint64_t> DatasetStore::Deal(std::vector<DatasetShard>& shards, std::size_t start,
                                              DType dtype) const {
  for (std::size_t i = 0; i < shards.size(); ++i) shards[i].place = static_cast<int>((start + i) % places_.size());
  return ChargesOf(shards, dtype);
}

std::vector<std::uint64_t> DatasetStore::ChargesOf(const std::vector<DatasetShard>& shards, DType dtype) const {
  std::vector<std::uint64_t> charges(places_.size(), 0);
  for (const DatasetShard& sh : shards) charges[static_cast<std::size_t>(sh.place)] += sh.length * rules::SizeOf(dtype);
  if (!shards.empty()) charges[static_cast<std::size_t>(shards.front().place)] += kOverheadBytes;
  return charges;
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

DatasetStore::Upload::~Upload() {
  if (!done_ && store_ != nullptr) store_->Abandon(*this);
}

absl::Status DatasetStore::Upload::Append(const Extent& piece) {
  if (done_) return absl::FailedPreconditionError("the upload has ended.");
  if (piece.size() > bytes_ - appended_) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: more than the ", bytes_, " bytes the dataset was declared with."));
  }
  // The file is written from the bytes as they arrive; a GPU's bytes would
  // need a copy back first.
  if (writer_ != nullptr && !piece.placement.host()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the server keeps its datasets in --dataset_dir and writes them from host memory; this upload's bytes "
        "lie in ",
        piece.placement.Describe(), ": upload it with PutDataset, or from a host region."));
  }
  // Each shard takes its bytes in order and is sealed when full, which
  // gives back a GPU lane its copies held.
  const std::uint64_t size = rules::SizeOf(spec_.dtype);
  std::uint64_t at = 0;
  for (DatasetShard& sh : shards_) {
    if (at == piece.size()) break;
    const std::uint64_t end = (sh.first + sh.length) * size;
    if (appended_ >= end) continue;
    const std::uint64_t take = std::min<std::uint64_t>(piece.size() - at, end - appended_);
    if (absl::Status s = sh.memory->Append(piece.Sub(at, take)); !s.ok()) return s;
    at += take;
    appended_ += take;
    if (appended_ == end) {
      if (absl::Status s = sh.memory->Seal(); !s.ok()) return s;
    }
  }
  // After the memory's copy: a shared-memory region truncated under it
  // reads as zeros there (the SIGBUS guard), and is refused by its caller.
  if (writer_ != nullptr) return writer_->Append(piece.bytes);
  return absl::OkStatus();
}

absl::StatusOr<DatasetInfo> DatasetStore::Upload::Commit() {
  if (done_) return absl::FailedPreconditionError("the upload has ended.");
  if (appended_ != bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("data: received ", appended_, " of the ", bytes_, " bytes declared."));
  }
  if (bytes_ == 0) {  // no Append() filled, and so sealed, the one empty shard
    if (absl::Status s = shards_.front().memory->Seal(); !s.ok()) return s;
  }
  if (restored_from_.empty()) {
    created_ = std::chrono::system_clock::now();
    if (request_.ttl) expires_ = created_ + *request_.ttl;
  }
  // With a directory, what a crash (SIGKILL, power loss) at each step
  // leaves there; the client has no answer until the last:
  // 1. Bytes arriving: the temporary file, which the next start removes.
  //    The version this one replaces keeps its own file.
  // 2. Finish: the file whole and on disk, still temporary: as in 1.
  // 3. Land: renamed into place, the directory synced. From here the next
  //    start serves this version: a replaced version's file may still be
  //    there too, and the start keeps a name's latest (sequence) alone.
  // 4. Publish: queries see it. Refused for room, the file is removed
  //    before the refusal is answered (a crash before that serves it after
  //    the restart: the client never heard of the refusal).
  // 5. RemoveDoomedFiles: the files of the versions it replaced or evicted
  //    are removed, and then the upload is answered.
  if (writer_ != nullptr) {
    if (absl::Status s = writer_->Finish(created_, expires_); !s.ok()) return s;
    if (absl::Status s = writer_->Land(); !s.ok()) return s;
  }
  // Refused for room, the upload is abandoned with this object: its name
  // and bytes go back, and nothing was evicted for it.
  absl::StatusOr<std::shared_ptr<Dataset>> published = store_->Publish(*this);
  if (!published.ok()) {
    if (writer_ != nullptr) store_->directory_->Remove({writer_->file()});
    return published.status();
  }
  done_ = true;
  store_->RemoveDoomedFiles();
  return (*published)->info_;
}

void DatasetStore::Abandon(Upload& upload) {
  upload.done_ = true;
  for (DatasetShard& sh : upload.shards_) sh.memory.reset();
  upload.charge_.reset();
  // Its temporary file goes with the writer (a landed one was removed by
  // Commit).
  upload.writer_.reset();
  std::lock_guard lock(mu_);
  uploading_.erase(upload.request_.name);
  const std::vector<std::uint64_t> charges = ChargesOf(upload.shards_, upload.spec_.dtype);
  for (std::size_t p = 0; p < places_.size(); ++p) {
    places_[p].charged -= charges[p];
    places_[p].uploading -= charges[p];
  }
  ReportLocked();
  freed_.notify_all();
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
