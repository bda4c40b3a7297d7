// A POSIX shared-memory object (a file in /dev/shm) mapped read-write: what
// a client on the server's host fills and registers as a host region
// (Client::RegisterHostRegion), so that the server reads the array where it
// lies instead of receiving it over the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace tally::client {

class SharedMemoryObject {
 public:
  // Creates `shm_name` ("/name"; it must not exist) of `bytes` bytes, mapped
  // read-write. The object is unlinked when this is destroyed (the server's
  // own mapping lasts until it unregisters the region).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SharedMemoryObject>> Create(const std::string& shm_name,
                                                                                  std::uint64_t bytes);
  // Maps an existing object (e.g. a file another program wrote in
  // /dev/shm) read-write; left in place when this is destroyed.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SharedMemoryObject>> Open(const std::string& shm_name);
  // A name no other process is using: "/tally-<pid>-<counter>-<tag>".
  static std::string UniqueName(const std::string& tag);

  ~SharedMemoryObject();
  SharedMemoryObject(const SharedMemoryObject&) = delete;
  SharedMemoryObject& operator=(const SharedMemoryObject&) = delete;

  const std::string& name() const { return name_; }
  std::span<std::byte> bytes() { return {static_cast<std::byte*>(data_), size_}; }
  std::uint64_t size() const { return size_; }

 private:
  SharedMemoryObject() = default;
  std::string name_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  bool unlink_ = false;
};

}  // namespace tally::client
