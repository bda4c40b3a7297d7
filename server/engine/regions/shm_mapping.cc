#include "server/engine/regions/shm_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/engine/regions/sigbus_guard.h"

namespace tally {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISDIR(mode)) return "directory";
  return "file of another kind";
}

}  // namespace

absl::Status CheckShmName(const std::string& shm_name) {
  const std::string bare = !shm_name.empty() && shm_name[0] == '/' ? shm_name.substr(1) : shm_name;
  if (bare.empty() || bare.size() > 255 || bare == "." || bare == ".." ||
      bare.find('/') != std::string::npos || bare.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm_name: '", shm_name.substr(0, 300),
        "' is not a shared-memory object's name: \"/name\" or \"name\", 1 to 255 bytes, no other '/'."));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmMapping>> ShmMapping::Open(const std::string& shm_name, std::uint64_t offset,
                                                             std::uint64_t bytes) {
  if (absl::Status s = CheckShmName(shm_name); !s.ok()) return s;
  const std::string path = shm_name[0] == '/' ? shm_name : "/" + shm_name;
  std::unique_ptr<ShmMapping> m(new ShmMapping());
  m->name_ = path;
  // O_NONBLOCK: a FIFO (or a device) put in /dev/shm under the name would
  // otherwise hold this worker in open() until a writer comes, past any
  // deadline. What was opened is then judged by the descriptor itself, so a
  // rename between a check and the open cannot swap it.
  m->fd_ = shm_open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
  if (m->fd_ < 0) {
    const int err = errno;
    const std::string why = absl::StrCat("shm_name: cannot open shared-memory object '", path, "': ", std::strerror(err), ".");
    if (err == ENOENT) return absl::NotFoundError(why);
    if (err == EACCES) return absl::PermissionDeniedError(why);
    if (err == EMFILE || err == ENFILE) return absl::ResourceExhaustedError(why);
    return absl::InvalidArgumentError(why);
  }
  struct stat st;
  if (fstat(m->fd_, &st) != 0) {
    return absl::InternalError(absl::StrCat("fstat of '", path, "': ", std::strerror(errno), "."));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shm_name: '", path, "' is not a shared-memory object (a regular file in /dev/shm) but a ",
        FileKind(st.st_mode), "; only shm_open'd objects can be registered."));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (offset > size || bytes > size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("byte_size: offset ", offset, " + byte_size ", bytes,
                                                   " is past the end of '", path, "', which has ", size, " bytes."));
  }
  m->end_ = offset + bytes;
  if (bytes == 0) return m;
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t start = offset / page * page;
  m->map_bytes_ = static_cast<std::size_t>(offset + bytes - start);
  // MAP_SHARED: the client's pages themselves, not a copy. No MAP_POPULATE:
  // the cuda backend's registration faults them in once; the cpu backend
  // reads them as queries come.
  m->map_ = mmap(nullptr, m->map_bytes_, PROT_READ, MAP_SHARED, m->fd_, static_cast<off_t>(start));
  if (m->map_ == MAP_FAILED) {
    m->map_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat("mapping ", m->map_bytes_, " bytes of '", path, "': ", std::strerror(errno), "."));
  }
  absl::StatusOr<int> slot = SigbusGuard::Watch(m->map_, m->map_bytes_);
  if (!slot.ok()) return slot.status();
  m->guard_slot_ = *slot;
  m->bytes_ = {static_cast<const std::byte*>(m->map_) + (offset - start), static_cast<std::size_t>(bytes)};
  return m;
}

ShmMapping::~ShmMapping() {
  if (guard_slot_ >= 0) SigbusGuard::Unwatch(guard_slot_);
  if (map_ != nullptr) munmap(map_, map_bytes_);
  if (fd_ >= 0) close(fd_);
}

absl::Status ShmMapping::Intact() const {
  if (guard_slot_ >= 0 && SigbusGuard::Faulted(guard_slot_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shared-memory object '", name_, "' was truncated while registered and its bytes are gone; "
        "unregister the region and register it again."));
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) return absl::InternalError(absl::StrCat("fstat of '", name_, "': ", std::strerror(errno), "."));
  if (static_cast<std::uint64_t>(st.st_size) < end_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shared-memory object '", name_, "' was truncated to ", st.st_size, " bytes, short of the ", end_,
        " the region was registered with; unregister the region (and register it again once the object is whole)."));
  }
  return absl::OkStatus();
}

}  // namespace tally
