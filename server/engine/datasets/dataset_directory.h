// The directory durable datasets are kept in (--dataset_dir): one file per
// version of a dataset (dataset_file.h), named after its sequence number
// and, for people reading the directory, its name; the name that counts is
// the one in the file's header. Files are written under a temporary name
// and renamed into place, so a name ending in kComplete is always a whole
// file (or one changed on disk afterwards, which its checksum shows).
//
// One tally-server uses a directory at a time: it holds an exclusive lock
// on the directory's lock file while it runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/datasets/dataset_file.h"

namespace tally {

class DatasetDirectory {
 public:
  static constexpr char kComplete[] = ".tally";           // a whole file
  static constexpr char kTemporary[] = ".tally.tmp";      // being written, or left by a crash
  static constexpr char kSetAside[] = ".tally.corrupt";   // failed its checks; kept for a person to look at

  // Opens `path`, creating it (and its parents) when missing, and locks it.
  // FAILED_PRECONDITION when another process holds it.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<DatasetDirectory>> Open(const std::string& path);
  ~DatasetDirectory();
  DatasetDirectory(const DatasetDirectory&) = delete;
  DatasetDirectory& operator=(const DatasetDirectory&) = delete;

  const std::string& path() const { return path_; }

  // At start, before any upload: removes the temporary files that uploads
  // cut short by a crash left (each logged at warning), and returns the
  // complete files' names, oldest first. Later files get higher sequence
  // numbers than any seen here.
  std::vector<std::string> TakeInventory();

  // A new file for `header`, whose sequence number is given here, under a
  // temporary name until it lands.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<DatasetFileWriter>> Create(DatasetFileHeader header);
  // Opens a complete file and reads its header (DATA_LOSS when it is not a
  // whole dataset file).
  [[nodiscard]] absl::StatusOr<DatasetFileReader> Read(const std::string& file);

  // Removes complete files and waits until the directory says so. Errors
  // are logged: a file that could not be removed is loaded again by the
  // next start only if it is a name's latest version.
  void Remove(const std::vector<std::string>& files);
  // Renames a file that failed its checks to end in kSetAside, so that it
  // is kept but never loaded.
  void SetAside(const std::string& file);

  // For DatasetFileWriter: file operations relative to the directory.
  [[nodiscard]] absl::Status Rename(const std::string& from, const std::string& to);
  void Unlink(const std::string& file);
  [[nodiscard]] absl::Status Sync();
  // An error of `doing` (e.g. "writing") on `file`: RESOURCE_EXHAUSTED for a
  // full disk or quota, INTERNAL otherwise; naming --dataset_dir and the path.
  absl::Status IoError(const char* doing, const std::string& file, int error) const;

 private:
  DatasetDirectory(std::string path, int fd, int lock_fd) : path_(std::move(path)), fd_(fd), lock_fd_(lock_fd) {}

  const std::string path_;
  const int fd_;       // the directory, for *at() calls and fsync
  const int lock_fd_;  // holds the flock
  std::atomic<std::uint64_t> next_sequence_{1};
};

}  // namespace tally
