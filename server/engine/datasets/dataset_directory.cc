#include "server/engine/datasets/dataset_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace tally {
namespace {

constexpr char kLockFile[] = ".lock";

// mkdir -p: the directory and whatever parents it lacks.
absl::Status MakeDirectories(const std::string& path) {
  for (std::size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("--dataset_dir: could not create ", prefix, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// The sequence number a file's name starts with (16 hex digits); 0 when
// it does not.
std::uint64_t SequenceOf(const std::string& file) {
  std::uint64_t sequence = 0;
  if (file.size() < 16 || !absl::SimpleHexAtoi(file.substr(0, 16), &sequence)) return 0;
  return sequence;
}

// What of a dataset's name goes into its file's name, for people reading
// the directory: letters, digits, '.', '-' and '_', the rest as '_'.
std::string Readable(const std::string& name) {
  std::string out;
  for (const char c : name.substr(0, 64)) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '-' || c == '_';
    out.push_back(plain ? c : '_');
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DatasetDirectory>> DatasetDirectory::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("--dataset_dir: empty path.");
  if (absl::Status s = MakeDirectories(path); !s.ok()) return s;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--dataset_dir: could not open the directory ", path, ": ", std::strerror(errno)));
  }
  const int lock_fd = ::openat(fd, kLockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    const int error = errno;
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("--dataset_dir: could not create ", path, "/", kLockFile,
                                                      " (is the directory writable?): ", std::strerror(error)));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(lock_fd);
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "--dataset_dir: ", path, " is in use by another tally-server (its lock file ", kLockFile, " is held: ",
        std::strerror(error), "); give each server a directory of its own."));
  }
  return std::unique_ptr<DatasetDirectory>(new DatasetDirectory(path, fd, lock_fd));
}

DatasetDirectory::~DatasetDirectory() {
  ::close(lock_fd_);  // and with it the lock
  ::close(fd_);
}

std::vector<std::string> DatasetDirectory::TakeInventory() {
  std::vector<std::string> complete;
  std::uint64_t highest = 0;
  const int listing = ::dup(fd_);
  DIR* dir = listing < 0 ? nullptr : ::fdopendir(listing);
  if (dir == nullptr) {
    if (listing >= 0) ::close(listing);
    spdlog::error("--dataset_dir: could not list {}: {}", path_, std::strerror(errno));
    return complete;
  }
  ::rewinddir(dir);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string file = entry->d_name;
    highest = std::max(highest, SequenceOf(file));
    if (absl::EndsWith(file, kTemporary)) {
      spdlog::warn("--dataset_dir: removing {}/{}: an upload that a crash or kill cut short (it was never "
                   "published)",
                   path_, file);
      Unlink(file);
    } else if (absl::EndsWith(file, kComplete)) {
      complete.push_back(file);
    }
  }
  ::closedir(dir);
  if (absl::Status s = Sync(); !s.ok()) spdlog::error("{}", std::string(s.message()));
  next_sequence_ = highest + 1;
  // Fixed-width hexadecimal sequence numbers first: by name is oldest first.
  std::sort(complete.begin(), complete.end());
  return complete;
}

absl::StatusOr<std::unique_ptr<DatasetFileWriter>> DatasetDirectory::Create(DatasetFileHeader header) {
  header.sequence = next_sequence_++;
  const std::string stem = absl::StrFormat("%016x-%s", header.sequence, Readable(header.name));
  const std::string file = stem + kComplete, temp_file = stem + kTemporary;
  const int fd = ::openat(fd_, temp_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("creating", temp_file, errno);
  std::unique_ptr<DatasetFileWriter> writer(new DatasetFileWriter(*this, fd, file, temp_file, std::move(header)));
  if (absl::Status s = writer->WriteHeader(); !s.ok()) return s;
  return writer;
}

absl::StatusOr<DatasetFileReader> DatasetDirectory::Read(const std::string& file) {
  const std::string path = absl::StrCat(path_, "/", file);
  const int fd = ::openat(fd_, file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::DataLossError(absl::StrCat(path, ": could not open it: ", std::strerror(errno)));
  DatasetFileReader reader(fd, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return absl::DataLossError(absl::StrCat(path, ": ", std::strerror(errno)));
  if (absl::Status s = reader.ReadHeader(static_cast<std::uint64_t>(st.st_size)); !s.ok()) return s;
  return reader;
}

void DatasetDirectory::Remove(const std::vector<std::string>& files) {
  if (files.empty()) return;
  for (const std::string& file : files) Unlink(file);
  if (absl::Status s = Sync(); !s.ok()) spdlog::error("{}", std::string(s.message()));
}

void DatasetDirectory::SetAside(const std::string& file) {
  std::string kept = file.substr(0, file.size() - std::strlen(kComplete)) + kSetAside;
  if (absl::Status s = Rename(file, kept); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return;
  }
  spdlog::warn("--dataset_dir: {}/{} is kept as {} for inspection and will not be loaded", path_, file, kept);
  if (absl::Status s = Sync(); !s.ok()) spdlog::error("{}", std::string(s.message()));
}

absl::Status DatasetDirectory::Rename(const std::string& from, const std::string& to) {
  if (::renameat(fd_, from.c_str(), fd_, to.c_str()) != 0) return IoError("renaming", from, errno);
  return absl::OkStatus();
}

void DatasetDirectory::Unlink(const std::string& file) {
  if (::unlinkat(fd_, file.c_str(), 0) != 0 && errno != ENOENT) {
    spdlog::error("--dataset_dir: could not remove {}/{}: {}", path_, file, std::strerror(errno));
  }
}

absl::Status DatasetDirectory::Sync() {
  if (::fsync(fd_) != 0) return IoError("syncing", ".", errno);
  return absl::OkStatus();
}

absl::Status DatasetDirectory::IoError(const char* doing, const std::string& file, int error) const {
  const std::string message =
      absl::StrCat("--dataset_dir: ", doing, " ", path_, "/", file, ": ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace tally
