// A client's POSIX shared-memory object, mapped read-only: the bytes of a
// host region. Watched by the SIGBUS guard for as long as it is mapped, so
// a client that truncates the object cannot crash the server; Intact()
// says whether the bytes are still the client's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tally {

class ShmMapping {
 public:
  // Opens `shm_name` read-only and maps [offset, offset + bytes) of it.
  // INVALID_ARGUMENT for a malformed name or an object smaller than
  // offset + bytes; NOT_FOUND when there is no such object;
  // PERMISSION_DENIED when the server may not read it; FAILED_PRECONDITION
  // when the name is not a regular file (a FIFO, a device, a directory),
  // found without blocking.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmMapping>> Open(const std::string& shm_name,
                                                                       std::uint64_t offset, std::uint64_t bytes);
  ~ShmMapping();
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;

  std::span<const std::byte> bytes() const { return bytes_; }
  // OK while the object still holds every mapped byte and no read has
  // faulted; FAILED_PRECONDITION saying what happened otherwise. Costs one
  // fstat.
  [[nodiscard]] absl::Status Intact() const;

 private:
  ShmMapping() = default;

  std::string name_;
  int fd_ = -1;
  void* map_ = nullptr;       // page-aligned start of the mapping
  std::size_t map_bytes_ = 0;
  std::uint64_t end_ = 0;     // offset + bytes: the object must stay at least this long
  std::span<const std::byte> bytes_;
  int guard_slot_ = -1;
};

// The rules on a shared-memory object's name (shm_open's): "/name" or
// "name", 1 to 255 bytes, no other '/', not "." or "..".
[[nodiscard]] absl::Status CheckShmName(const std::string& shm_name);

}  // namespace tally
