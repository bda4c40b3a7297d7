// The file one version of a durable dataset is kept in under --dataset_dir:
// a header that says what the dataset is, its bytes as they were uploaded,
// and a trailer holding a CRC-32 of everything before it, so that a file cut
// short or changed on disk is recognised and never served.
//
// Layout, little-endian:
//   0   "TALLYDS1"              magic, with the format's version
//   8   u32 header_bytes        where the data starts
//   12  u64 data_bytes
//   20  u64 length, u64 row_length, u64 sequence
//   44  i64 created, i64 expires (unix nanoseconds; expires 0: never)
//   60  name, dtype name, owner: each a u16 byte count and its bytes
//   header_bytes: the data (data_bytes)
//   then u32 CRC-32 (zlib's) of every byte before it, and "TALLYEND"
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tally/rules/dtype.h"

namespace tally {

class DatasetDirectory;

// What a dataset file says of its dataset.
struct DatasetFileHeader {
  std::string name;
  rules::DType dtype = rules::DType::kFloat32;
  std::uint64_t length = 0;      // elements
  std::uint64_t row_length = 0;  // 0: flat
  // Orders the versions of one name: the highest is the latest (a replace
  // that a crash interrupted may leave two).
  std::uint64_t sequence = 0;
  std::chrono::system_clock::time_point created;
  std::optional<std::chrono::system_clock::time_point> expires;
  // Who uploaded it: charged the same quotas when a restart loads it.
  std::string owner;

  std::uint64_t data_bytes() const { return length * rules::SizeOf(dtype); }
};

// Writes one file under a temporary name, then renames it into place. A
// writer destroyed before Land() removes its temporary file.
class DatasetFileWriter {
 public:
  ~DatasetFileWriter();
  DatasetFileWriter(const DatasetFileWriter&) = delete;
  DatasetFileWriter& operator=(const DatasetFileWriter&) = delete;

  // The next bytes of the data, in order.
  [[nodiscard]] absl::Status Append(std::span<const std::byte> bytes);
  // Writes the header's times (known only when the upload commits) and the
  // trailer, and waits until the file is on disk (fsync), still under its
  // temporary name. Every data byte must have been appended.
  [[nodiscard]] absl::Status Finish(std::chrono::system_clock::time_point created,
                                    std::optional<std::chrono::system_clock::time_point> expires);
  // Renames the finished file to its final name and waits until the
  // directory says so (fsync of the directory).
  [[nodiscard]] absl::Status Land();
  // Its name in the directory once landed.
  const std::string& file() const { return file_; }

 private:
  friend class DatasetDirectory;
  DatasetFileWriter(DatasetDirectory& directory, int fd, std::string file, std::string temp_file,
                    DatasetFileHeader header);
  // Room for the header, first in the file: its fixed-size times are
  // rewritten by Finish.
  [[nodiscard]] absl::Status WriteHeader();
  [[nodiscard]] absl::Status WriteAll(std::span<const std::byte> bytes);

  DatasetDirectory& directory_;
  int fd_ = -1;
  const std::string file_;
  const std::string temp_file_;
  DatasetFileHeader header_;
  std::size_t header_bytes_ = 0;
  std::uint64_t appended_ = 0;
  std::uint32_t data_crc_ = 0;  // of the data alone; the header's is combined with it at the end
  bool finished_ = false;
  bool landed_ = false;
};

// Reads one file: the header at once, then the data in order, then the
// check of the trailer. A file that is not a whole dataset file is
// DATA_LOSS, naming the file and what is wrong with it.
class DatasetFileReader {
 public:
  DatasetFileReader(DatasetFileReader&& other) noexcept;
  DatasetFileReader& operator=(DatasetFileReader&&) = delete;
  ~DatasetFileReader();

  const DatasetFileHeader& header() const { return header_; }
  // The next data bytes, up to out.size(); how many were read (0 at the end).
  [[nodiscard]] absl::StatusOr<std::size_t> Read(std::span<std::byte> out);
  // After every data byte was read: the trailer's CRC against the bytes.
  [[nodiscard]] absl::Status Verify();

 private:
  friend class DatasetDirectory;
  DatasetFileReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  [[nodiscard]] absl::Status ReadHeader(std::uint64_t file_bytes);
  [[nodiscard]] absl::Status ReadAll(std::span<std::byte> out, const char* what);

  int fd_ = -1;
  std::string path_;  // for messages
  DatasetFileHeader header_;
  std::uint64_t read_ = 0;  // data bytes so far
  std::uint32_t crc_ = 0;
};

// The header's bytes as the file holds them.
std::string EncodeDatasetFileHeader(const DatasetFileHeader& header);

}  // namespace tally
