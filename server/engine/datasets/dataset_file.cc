#include "server/engine/datasets/dataset_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/datasets/dataset_directory.h"

namespace tally {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'L', 'L', 'Y', 'D', 'S', '1'};
constexpr char kEndMagic[8] = {'T', 'A', 'L', 'L', 'Y', 'E', 'N', 'D'};
constexpr std::uint64_t kFixedHeaderBytes = 60;
constexpr std::uint64_t kTrailerBytes = 4 + sizeof(kEndMagic);
// Three strings of at most 64 KiB each: anything longer is not a header
// tally wrote (a name is at most 256 bytes, an identity a line of a file).
constexpr std::uint64_t kMaxHeaderBytes = kFixedHeaderBytes + 3 * (2 + 0xffff);

std::uint32_t Crc(std::uint32_t crc, std::span<const std::byte> bytes) {
  return static_cast<std::uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<z_size_t>(bytes.size())));
}

void PutU16(std::string& out, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutString(std::string& out, const std::string& s) {
  PutU16(out, static_cast<std::uint16_t>(std::min<std::size_t>(s.size(), 0xffff)));
  out.append(s, 0, std::min<std::size_t>(s.size(), 0xffff));
}

std::uint64_t GetU(const std::string& in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}

std::int64_t UnixNanos(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
std::chrono::system_clock::time_point FromUnixNanos(std::int64_t ns) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(ns)));
}

absl::Status Corrupt(const std::string& path, const std::string& why) {
  return absl::DataLossError(absl::StrCat(path, ": ", why));
}

}  // namespace

std::string EncodeDatasetFileHeader(const DatasetFileHeader& h) {
  std::string body;
  PutU64(body, h.data_bytes());
  PutU64(body, h.length);
  PutU64(body, h.row_length);
  PutU64(body, h.sequence);
  PutU64(body, static_cast<std::uint64_t>(UnixNanos(h.created)));
  PutU64(body, h.expires ? static_cast<std::uint64_t>(UnixNanos(*h.expires)) : 0);
  PutString(body, h.name);
  PutString(body, rules::Name(h.dtype));
  PutString(body, h.owner);
  std::string out(kMagic, sizeof(kMagic));
  PutU32(out, static_cast<std::uint32_t>(sizeof(kMagic) + 4 + body.size()));
  return out + body;
}

DatasetFileWriter::DatasetFileWriter(DatasetDirectory& directory, int fd, std::string file, std::string temp_file,
                                     DatasetFileHeader header)
    : directory_(directory),
      fd_(fd),
      file_(std::move(file)),
      temp_file_(std::move(temp_file)),
      header_(std::move(header)) {}

DatasetFileWriter::~DatasetFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  // No fsync: a temporary file a crash leaves behind is removed at start.
  if (!landed_) directory_.Unlink(temp_file_);
}

absl::Status DatasetFileWriter::WriteAll(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), std::min<std::size_t>(bytes.size(), std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return directory_.IoError("writing", temp_file_, errno);
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status DatasetFileWriter::WriteHeader() {
  const std::string bytes = EncodeDatasetFileHeader(header_);
  header_bytes_ = bytes.size();
  return WriteAll(std::as_bytes(std::span(bytes.data(), bytes.size())));
}

absl::Status DatasetFileWriter::Append(std::span<const std::byte> bytes) {
  if (finished_) return absl::FailedPreconditionError("the dataset's file is already finished.");
  if (bytes.size() > header_.data_bytes() - appended_) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: more than the ", header_.data_bytes(), " bytes the dataset was declared with."));
  }
  if (absl::Status s = WriteAll(bytes); !s.ok()) return s;
  data_crc_ = Crc(data_crc_, bytes);
  appended_ += bytes.size();
  return absl::OkStatus();
}

absl::Status DatasetFileWriter::Finish(std::chrono::system_clock::time_point created,
                                       std::optional<std::chrono::system_clock::time_point> expires) {
  if (appended_ != header_.data_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: received ", appended_, " of the ", header_.data_bytes(), " bytes declared."));
  }
  header_.created = created;
  header_.expires = expires;
  const std::string header = EncodeDatasetFileHeader(header_);  // the same size: only fixed fields changed
  for (std::size_t at = 0; at < header.size();) {
    const ssize_t n = ::pwrite(fd_, header.data() + at, header.size() - at, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return directory_.IoError("writing", temp_file_, errno);
    at += static_cast<std::size_t>(n);
  }
  const std::uint32_t crc = static_cast<std::uint32_t>(
      crc32_combine(Crc(0, std::as_bytes(std::span(header.data(), header.size()))), data_crc_,
                    static_cast<z_off_t>(header_.data_bytes())));
  std::string trailer;
  PutU32(trailer, crc);
  trailer.append(kEndMagic, sizeof(kEndMagic));
  if (absl::Status s = WriteAll(std::as_bytes(std::span(trailer.data(), trailer.size()))); !s.ok()) return s;
  if (::fsync(fd_) != 0) return directory_.IoError("syncing", temp_file_, errno);
  ::close(fd_);
  fd_ = -1;
  finished_ = true;
  return absl::OkStatus();
}

absl::Status DatasetFileWriter::Land() {
  if (!finished_) return absl::FailedPreconditionError("the dataset's file is not finished.");
  if (absl::Status s = directory_.Rename(temp_file_, file_); !s.ok()) return s;
  if (absl::Status s = directory_.Sync(); !s.ok()) {
    // Not known to be durable: the upload fails, and leaves no file.
    directory_.Unlink(file_);
    return s;
  }
  landed_ = true;
  return absl::OkStatus();
}

// Seeds the CRC with the header's bytes (the trailer's CRC covers them).
absl::Status DatasetFileReader::ReadHeader(std::uint64_t file_bytes) {
  if (file_bytes < kFixedHeaderBytes + kTrailerBytes) {
    return Corrupt(path_, absl::StrCat("cut short: ", file_bytes, " bytes, fewer than any dataset file has"));
  }
  std::string fixed(kFixedHeaderBytes, '\0');
  if (absl::Status s = ReadAll(std::as_writable_bytes(std::span(fixed.data(), fixed.size())), "its header");
      !s.ok()) {
    return s;
  }
  if (std::memcmp(fixed.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corrupt(path_, "not a tally dataset file (format TALLYDS1): its first bytes differ");
  }
  const std::uint64_t header_bytes = GetU(fixed, 8, 4);
  if (header_bytes < kFixedHeaderBytes + 6 || header_bytes > kMaxHeaderBytes) {
    return Corrupt(path_, absl::StrCat("its header claims ", header_bytes, " bytes, not a size tally writes"));
  }
  std::string rest(header_bytes - kFixedHeaderBytes, '\0');
  if (absl::Status s = ReadAll(std::as_writable_bytes(std::span(rest.data(), rest.size())), "its header");
      !s.ok()) {
    return s;
  }
  const std::string all = fixed + rest;
  crc_ = Crc(0, std::as_bytes(std::span(all.data(), all.size())));
  const std::uint64_t data_bytes = GetU(all, 12, 8);
  header_.length = GetU(all, 20, 8);
  header_.row_length = GetU(all, 28, 8);
  header_.sequence = GetU(all, 36, 8);
  header_.created = FromUnixNanos(static_cast<std::int64_t>(GetU(all, 44, 8)));
  if (const auto expires = static_cast<std::int64_t>(GetU(all, 52, 8)); expires != 0) {
    header_.expires = FromUnixNanos(expires);
  }
  std::size_t at = kFixedHeaderBytes;
  std::string strings[3];
  for (std::string& s : strings) {
    if (at + 2 > all.size() || at + 2 + GetU(all, at, 2) > all.size()) {
      return Corrupt(path_, "its header's names run past the header");
    }
    s = all.substr(at + 2, GetU(all, at, 2));
    at += 2 + s.size();
  }
  header_.name = strings[0];
  header_.owner = strings[2];
  bool known = false;
  for (const rules::DType d : rules::kAllDTypes) {
    if (strings[1] == rules::Name(d)) {
      header_.dtype = d;
      known = true;
    }
  }
  if (!known) return Corrupt(path_, absl::StrCat("its dtype '", strings[1], "' is not one tally knows"));
  if (header_.length > (std::uint64_t{1} << 62) / rules::SizeOf(header_.dtype) ||
      data_bytes != header_.data_bytes()) {
    return Corrupt(path_, absl::StrCat("its header's ", data_bytes, " bytes are not ", header_.length, " ",
                                       rules::Name(header_.dtype), " elements"));
  }
  if (header_.row_length != 0 && header_.length % header_.row_length != 0) {
    return Corrupt(path_, absl::StrCat("its row length ", header_.row_length, " does not divide its ",
                                       header_.length, " elements"));
  }
  if (file_bytes != header_bytes + data_bytes + kTrailerBytes) {
    return Corrupt(path_, absl::StrCat(file_bytes < header_bytes + data_bytes + kTrailerBytes ? "cut short" : "too long",
                                       ": ", file_bytes, " bytes where its header promises ",
                                       header_bytes + data_bytes + kTrailerBytes));
  }
  return absl::OkStatus();
}

DatasetFileReader::DatasetFileReader(DatasetFileReader&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      header_(std::move(other.header_)),
      read_(other.read_),
      crc_(other.crc_) {}

DatasetFileReader::~DatasetFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status DatasetFileReader::ReadAll(std::span<std::byte> out, const char* what) {
  while (!out.empty()) {
    const ssize_t n = ::read(fd_, out.data(), std::min<std::size_t>(out.size(), std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat(path_, ": reading ", what, ": ", std::strerror(errno)));
    }
    if (n == 0) return Corrupt(path_, absl::StrCat("cut short while reading ", what));
    out = out.subspan(static_cast<std::size_t>(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::size_t> DatasetFileReader::Read(std::span<std::byte> out) {
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), header_.data_bytes() - read_));
  if (absl::Status s = ReadAll(out.first(n), "its data"); !s.ok()) return s;
  crc_ = Crc(crc_, out.first(n));
  read_ += n;
  return n;
}

absl::Status DatasetFileReader::Verify() {
  if (read_ != header_.data_bytes()) return absl::FailedPreconditionError("the dataset's data is not all read.");
  std::string trailer(kTrailerBytes, '\0');
  if (absl::Status s = ReadAll(std::as_writable_bytes(std::span(trailer.data(), trailer.size())), "its trailer");
      !s.ok()) {
    return s;
  }
  if (std::memcmp(trailer.data() + 4, kEndMagic, sizeof(kEndMagic)) != 0) {
    return Corrupt(path_, "its trailer is not one tally writes");
  }
  const auto stored = static_cast<std::uint32_t>(GetU(trailer, 0, 4));
  if (stored != crc_) {
    return Corrupt(path_, absl::StrCat("its checksum does not match its bytes (CRC-32 ", absl::Hex(crc_),
                                       " read, ", absl::Hex(stored), " written): changed on disk"));
  }
  return absl::OkStatus();
}

}  // namespace tally
