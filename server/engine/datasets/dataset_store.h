// Resident datasets: arrays uploaded once under a name and kept in a
// backend's resident memory (the GPU's on the cuda backend, the host's on the
// cpu backend) for any number of queries. The store owns the names, the
// per-place byte budgets, replacement, time-to-live and LRU eviction; the
// memory itself comes from the backend (Backend::AllocateResident).
//
// Safety rules:
// - A query holds a shared reference to the version it started on: delete,
//   replace, expiry and eviction only unpublish a name, and the bytes go when
//   the last query on them ends. Freeing happens on the store's own thread,
//   never on the query path.
// - A name is published only after its upload sealed: no query sees a
//   half-uploaded dataset. An upload that ends early, sends too much or is
//   cancelled leaves nothing behind.
// - One upload per name at a time: a second upload of a name being uploaded
//   is refused (exactly one of two concurrent uploads wins).
// - Bytes are charged to their place from the upload's start until the
//   memory is freed, so a deleted dataset still read by a query still counts.
// - Room is judged twice. An upload starts when it would fit once what its
//   commit may remove is gone: the version it replaces and, with LRU
//   eviction, the place's other datasets; so uploads in progress never
//   hold more than the budget between them. At commit, under the lock, the
//   resident bytes (published, and removed but still read) plus the
//   upload's must fit the budget once the replaced version goes: a replace
//   needs room for one version. Only then, and only for an upload that
//   arrived whole, are least recently used datasets evicted (each logged at
//   warning with its name and the upload it made room for); an upload that
//   fails, is cancelled or is refused evicts nothing.
//
// Durability (a store given a DatasetDirectory, --dataset_dir): each upload
// is also written to a file of its own (dataset_file.h) as its bytes
// arrive, and is made durable before its commit answers; a version that is
// unpublished (delete, replace, eviction, expiry) loses its file. Upload::
// Commit says what a crash at each step leaves in the directory. A restart
// loads the files again (BeginRestore). No disk I/O happens under the
// store's lock, and queries never wait for the disk.
//
// Shards: a dataset of at least two shards' minimum size is cut into
// contiguous element ranges of nearly equal length, dealt round-robin over
// the places from the one with the most room, each in its own resident
// memory (one per GPU by default on a server with several; see
// DatasetOptions::shards). A query reads every shard where it lies
// (reduce_pieces.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/column_facts.h"
#include "server/core/request.h"
#include "server/engine/backend.h"
#include "server/engine/datasets/dataset_directory.h"

namespace tally {

class Metrics;

struct DatasetOptions {
  // Resident bytes allowed per place (per GPU, or the host); 0: no limit
  // beyond the memory itself.
  std::uint64_t max_bytes_per_place = 0;
  // When an upload does not fit: false refuses it (RESOURCE_EXHAUSTED);
  // true evicts the least recently used datasets of its place first.
  bool evict_lru = false;
  // How long an upload waits for evicted datasets' memory (it goes when
  // the queries reading them end) before RESOURCE_EXHAUSTED.
  std::chrono::milliseconds eviction_wait{2000};
  // How often expired datasets are looked for.
  std::chrono::milliseconds sweep_interval{1000};
  // Shards per dataset: 0, one per place (per GPU); N, N shards dealt over
  // the places (N > places puts several on one: the sharded query's logic
  // on a single GPU). Fewer when shards would be under min_shard_bytes.
  int shards = 0;
  std::uint64_t min_shard_bytes = std::uint64_t{64} << 20;
  // Datasets published or being uploaded at once, in all (0: no limit).
  // 10,000 keeps a ListDatasets answer (names up to 256 bytes) under gRPC's
  // default 4 MiB receive limit, and the datasets' own overhead near 40 MiB.
  std::uint64_t max_datasets = 10000;
};

// What a client may know of a dataset.
struct DatasetInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  std::uint64_t length = 0;  // elements
  std::uint64_t row_length = 0;  // as uploaded: the default row length of its queries; 0: flat
  std::uint64_t bytes = 0;
  std::string place;         // "cuda:0", "host"; sharded: each shard's, in element order, comma-separated
  std::uint32_t shards = 1;
  std::uint64_t version = 0; // increases with every upload of the store
  std::chrono::system_clock::time_point created;
  std::optional<std::chrono::system_clock::time_point> expires;
  std::uint64_t queries = 0;
};

// One contiguous piece of a dataset in one place.
struct DatasetShard {
  int place = 0;            // index into the store's places
  std::uint64_t first = 0;  // its first element's index in the dataset
  std::uint64_t length = 0;
  std::unique_ptr<ResidentMemory> memory;
};

// One published version: immutable, read by any number of queries.
class Dataset {
 public:
  const DatasetInfo& info() const { return info_; }
  // Elements [begin, end) where they lie, shard by shard in element order;
  // each piece's `first` counts from `begin`. An empty range is one empty
  // piece of the first shard.
  std::vector<PlacedPiece> Pieces(std::uint64_t begin, std::uint64_t end) const;
  const std::vector<DatasetShard>& shards() const { return shards_; }
  // What reads of this version found (server/core/column_facts.h): the
  // bytes never change, so neither do they.
  ColumnFacts* facts() const { return facts_.get(); }

 private:
  friend class DatasetStore;
  DatasetInfo info_;
  std::unique_ptr<ColumnFacts> facts_ = std::make_unique<ColumnFacts>();
  std::string file_;              // its file in the store's directory; empty without one
  std::shared_ptr<void> charge_;  // goes after the memory (members go in reverse order)
  std::vector<DatasetShard> shards_;
};

class DatasetStore {
 public:
  // What a dataset costs beyond its bytes, charged to the place of its
  // first shard and to the uploader's --quota_dataset_bytes: its resident
  // memory's own page and mapping, its name and its entries. 75,000 one-byte
  // datasets took 338 MiB of RSS on the cpu backend, 4.6 KiB each; without
  // this, empty datasets were free and any number fit under any budget.
  static constexpr std::uint64_t kOverheadBytes = 4096;

  // What an upload declares.
  struct UploadRequest {
    std::string name;
    DType dtype = DType::kFloat32;
    std::uint64_t length = 0;
    std::uint64_t row_length = 0;  // 0: flat; otherwise it divides length
    bool replace = false;
    // The dataset expires that long after its upload is committed.
    std::optional<std::chrono::milliseconds> ttl;
    // Who uploads it, kept in its file so that a restart charges the same
    // identity; the store itself never looks at it.
    std::string owner;
  };

  // An upload in progress. Destroying it without Commit() discards it.
  class Upload {
   public:
    ~Upload();
    Upload(const Upload&) = delete;
    Upload& operator=(const Upload&) = delete;
    // The next bytes of the array, in order. With a directory, host bytes
    // only (they are written to the dataset's file too).
    [[nodiscard]] absl::Status Append(const Extent& piece);
    // Seals the bytes and publishes the dataset under its name (replacing
    // the old version when the upload asked to); with a directory, once its
    // file is on disk.
    [[nodiscard]] absl::StatusOr<DatasetInfo> Commit();

   private:
    friend class DatasetStore;
    Upload() = default;
    DatasetStore* store_ = nullptr;
    UploadRequest request_;
    ArraySpec spec_;
    std::uint64_t bytes_ = 0;
    std::shared_ptr<void> charge_;
    std::vector<DatasetShard> shards_;
    std::uint64_t appended_ = 0;  // bytes so far
    bool done_ = false;
    // Set by Commit (a restore: as its file says).
    std::chrono::system_clock::time_point created_;
    std::optional<std::chrono::system_clock::time_point> expires_;
    // Its file, being written; or, for a restore, the file it is read from.
    std::unique_ptr<DatasetFileWriter> writer_;
    std::string restored_from_;
  };

  // `backend`, `metrics` (may be null) and `directory` (may be null: the
  // datasets live as long as the process) outlive the store.
  DatasetStore(Backend& backend, DatasetOptions options, Metrics* metrics, DatasetDirectory* directory = nullptr);
  ~DatasetStore();
  DatasetStore(const DatasetStore&) = delete;
  DatasetStore& operator=(const DatasetStore&) = delete;

  // Checks the name, reserves it and the bytes, and allocates the memory.
  // ALREADY_EXISTS when the name exists and `replace` is false, or another
  // upload of it is in progress; RESOURCE_EXHAUSTED when it does not fit,
  // or would be one dataset more than max_datasets.
  // `ttl`: the dataset expires that long after its upload is committed.
  // `charge`, when given, is kept exactly as long as the bytes: released when
  // the upload is abandoned or the dataset's memory is freed. The store never
  // looks inside (the front end charges a caller's quota with it).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(const UploadRequest& request,
                                                                    std::shared_ptr<void> charge = nullptr);
  // A flat dataset with no owner.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Upload>> BeginUpload(
      const std::string& name, DType dtype, std::uint64_t length, bool replace,
      std::optional<std::chrono::milliseconds> ttl, std::shared_ptr<void> charge = nullptr) {
    return BeginUpload(UploadRequest{name, dtype, length, 0, replace, ttl, ""}, std::move(charge));
  }
  // At start, the dataset that `file` of the store's directory holds (its
  // header is `header`): under the same limits as an upload, but never
  // replacing or evicting anything. The caller appends the file's bytes and
  // commits; the file is not written again.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Upload>> BeginRestore(const DatasetFileHeader& header,
                                                                     const std::string& file,
                                                                     std::shared_ptr<void> charge = nullptr);
  bool durable() const { return directory_ != nullptr; }

  // The current version, for a query (NOT_FOUND when there is none). Counts
  // the query and makes the dataset the most recently used.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Dataset>> Acquire(const std::string& name);
  [[nodiscard]] absl::StatusOr<DatasetInfo> Describe(const std::string& name);
  std::vector<DatasetInfo> List();
  // At most `limit` datasets whose names sort after `after` ("": from the
  // first), by name; `*more` says whether others follow.
  std::vector<DatasetInfo> ListPage(const std::string& after, std::size_t limit, bool* more);
  // Unpublishes the name; queries reading it finish on it.
  [[nodiscard]] absl::StatusOr<DatasetInfo> Delete(const std::string& name);

  struct PlaceUsage {
    std::string place;
    std::uint64_t bytes = 0;     // charged: resident, uploading, or still read after removal
    std::uint64_t datasets = 0;  // published
    std::uint64_t limit = 0;     // 0: none
  };
  std::vector<PlaceUsage> Usage();

  // Removes expired datasets now (the store's thread does it periodically).
  void ExpireNow();

  // The rules on a dataset name: 1 to 256 bytes of printable ASCII. Regions
  // follow the same rules; `what` names the kind in the message.
  [[nodiscard]] static absl::Status CheckName(const std::string& name, const char* what = "dataset");

 private:
  struct Place {
    ResidentPlace where;
    std::uint64_t charged = 0;    // all of the below, and removed datasets still read
    std::uint64_t uploading = 0;  // uploads in progress
    std::uint64_t published = 0;  // published datasets
    std::uint64_t datasets = 0;   // published
  };
  // What a commit would remove to make room for bytes `adding` (per place)
  // under `name`; `short_of` is the first place still over the budget after
  // all that (places_.size() when everything fits).
  struct Room {
    std::vector<std::string> victims;  // least recently used first
    std::size_t short_of = 0;
  };
  struct Entry {
    std::shared_ptr<Dataset> dataset;
    std::list<std::string>::iterator lru;  // position in lru_
  };
  // Freed memory waits here for the store's thread; shared with datasets'
  // deleters, which may run after the store is gone.
  struct Reclaimer;

  // Unpublishes `it` (caller holds mu_); its memory goes with its last
  // reader, its file with RemoveDoomedFiles.
  void RemoveLocked(std::map<std::string, Entry>::iterator it);
  // Removes the files of the versions unpublished so far (none without a
  // directory). `wait` false: not if another thread is at it (the store's
  // thread, which tries again later).
  void RemoveDoomedFiles(bool wait = true);
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Upload>> Begin(const UploadRequest& request,
                                                              std::shared_ptr<void> charge, bool restoring);
  // How a dataset of `length` elements of `size` bytes is cut (first and
  // length of each shard; places not yet dealt).
  std::vector<DatasetShard> CutShards(std::uint64_t length, std::uint64_t size) const;
  // Deals `shards` round-robin over the places from `start`; what each
  // place is charged (ChargesOf).
  std::vector<std::uint64_t> Deal(std::vector<DatasetShard>& shards, std::size_t start, DType dtype) const;
  // What a dataset (or an upload) of these shards charges each place: its
  // shards' bytes, and kOverheadBytes on the first shard's place.
  std::vector<std::uint64_t> ChargesOf(const std::vector<DatasetShard>& shards, DType dtype) const;
  // Charges or gives back every shard's bytes to its place.
  void Charge(int place, std::int64_t bytes);
  void ReportLocked();
  void Sweep();
  // `for_commit`: room in resident bytes for a commit (the evictable
  // datasets are named); otherwise whether an upload may start (every
  // charge counts, and evictable bytes are only counted).
  // `evict`: the place's other datasets may be evicted (--dataset_evict_lru,
  // and not for a restore).
  Room FindRoomLocked(const std::string& name, const std::vector<std::uint64_t>& adding, bool for_commit,
                      bool evict) const;
  std::string RefusalLocked(const std::string& name, const std::vector<std::uint64_t>& adding,
                            std::size_t place) const;
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Dataset>> Publish(Upload& upload);
  void Abandon(Upload& upload);
  std::string FullnessLocked(const Place& p) const;

  Backend& backend_;
  const DatasetOptions options_;
  Metrics* const metrics_;
  DatasetDirectory* const directory_;
  // Taken before mu_ by whoever removes files, so that the files of versions
  // unpublished before a delete answers are gone when it does; never by a
  // query.
  std::mutex files_mu_;

  std::mutex mu_;
  std::condition_variable freed_;  // a place's charge went down
  std::vector<Place> places_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, bool> uploading_;
  std::list<std::string> lru_;  // front: most recently used
  std::uint64_t next_version_ = 1;
  std::vector<std::string> doomed_files_;  // of unpublished versions, still in the directory

  std::shared_ptr<Reclaimer> reclaimer_;
  std::thread sweeper_;
};

}  // namespace tally
