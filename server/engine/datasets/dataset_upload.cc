// DatasetStore's upload path: an upload is begun (its room found and
// charged, or refused naming the limit), filled piece by piece, then
// committed (written to --dataset_dir first when there is one) or abandoned.
// Publishing it, and everything after, is dataset_store.cc's.
#include "server/engine/datasets/dataset_store.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/metrics/metrics.h"
#include "spdlog/spdlog.h"

namespace tally {

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

}  // namespace tally
