// A read-only memory mapping of a whole file: inputs of many GiB are sent
// straight from the page cache, never read into a buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tally::client {

class MappedFile {
 public:
  [[nodiscard]] static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // nullptr for an empty file (mmap cannot map zero bytes).
  const std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
  std::string path_;
};

}  // namespace tally::client
