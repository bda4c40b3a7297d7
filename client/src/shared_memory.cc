#include "tally/client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tally::client {
namespace {

std::string WithSlash(const std::string& name) { return !name.empty() && name[0] == '/' ? name : "/" + name; }

absl::Status Errno(const std::string& what, int err) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EEXIST) return absl::AlreadyExistsError(message);
  if (err == EACCES) return absl::PermissionDeniedError(message);
  if (err == ENOSPC || err == ENOMEM) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace

std::string SharedMemoryObject::UniqueName(const std::string& tag) {
  static std::atomic<std::uint64_t> counter{0};
  return absl::StrCat("/tally-", getpid(), "-", counter.fetch_add(1), "-", tag);
}

absl::StatusOr<std::unique_ptr<SharedMemoryObject>> SharedMemoryObject::Create(const std::string& shm_name,
                                                                               std::uint64_t bytes) {
  std::unique_ptr<SharedMemoryObject> o(new SharedMemoryObject());
  o->name_ = WithSlash(shm_name);
  const int fd = shm_open(o->name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(absl::StrCat("creating shared memory ", o->name_), errno);
  o->unlink_ = true;
  // posix_fallocate, not ftruncate: the pages are taken now, so a full
  // /dev/shm fails here rather than with SIGBUS while the array is written.
  int err = bytes == 0 ? 0 : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err == 0 && bytes > 0) {
    o->data_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (o->data_ == MAP_FAILED) {
      o->data_ = nullptr;
      err = errno;
    }
  }
  close(fd);
  if (err != 0) return Errno(absl::StrCat("sizing shared memory ", o->name_, " to ", bytes, " bytes"), err);
  o->size_ = bytes;
  return o;
}

absl::StatusOr<std::unique_ptr<SharedMemoryObject>> SharedMemoryObject::Open(const std::string& shm_name) {
  std::unique_ptr<SharedMemoryObject> o(new SharedMemoryObject());
  o->name_ = WithSlash(shm_name);
  const int fd = shm_open(o->name_.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Errno(absl::StrCat("opening shared memory ", o->name_), errno);
  struct stat st;
  int err = fstat(fd, &st) == 0 ? 0 : errno;
  if (err == 0 && st.st_size > 0) {
    o->data_ = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (o->data_ == MAP_FAILED) {
      o->data_ = nullptr;
      err = errno;
    }
  }
  close(fd);
  if (err != 0) return Errno(absl::StrCat("mapping shared memory ", o->name_), err);
  o->size_ = static_cast<std::size_t>(st.st_size);
  return o;
}

SharedMemoryObject::~SharedMemoryObject() {
  if (data_ != nullptr) munmap(data_, size_);
  if (unlink_) shm_unlink(name_.c_str());
}

}  // namespace tally::client
