#include "tally/client/npz.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tally::client {
namespace {

// Little-endian fields of the zip format (APPNOTE.TXT, sections 4.3.7,
// 4.3.12, 4.3.16 and 4.5.3).
std::uint64_t Le(const std::string& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

constexpr std::uint32_t kEndOfDirectory = 0x06054b50;
constexpr std::uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr std::uint32_t kDirectoryEntry = 0x02014b50;
constexpr std::uint32_t kLocalHeader = 0x04034b50;

absl::StatusOr<std::string> Inflate(const std::string& in, std::uint64_t size, const std::string& where) {
  std::string out(size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return absl::InternalError(absl::StrCat(where, ": zlib failed to start"));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const std::uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != size) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the deflated data is corrupt"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<NpzMember>> ReadNpz(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  const std::string b((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a .npz file (", what, ")"));
  };
  // The end-of-directory record, within the last 64 KiB + 22 bytes.
  if (b.size() < 22) return bad("too short");
  std::size_t end = std::string::npos;
  for (std::size_t at = b.size() - 22;; --at) {
    if (Le(b, at, 4) == kEndOfDirectory) {
      end = at;
      break;
    }
    if (at == 0 || b.size() - at > 65535 + 22) break;
  }
  if (end == std::string::npos) return bad("no zip directory");
  std::uint64_t entries = Le(b, end + 10, 2);
  std::uint64_t directory = Le(b, end + 16, 4);
  if ((entries == 0xffff || directory == 0xffffffff) && end >= 20) {
    const std::uint64_t locator = Le(b, end - 20 + 8, 8);  // the zip64 locator's pointer
    if (locator + 56 > b.size() || Le(b, locator, 4) != kZip64EndOfDirectory) return bad("bad zip64 directory");
    entries = Le(b, locator + 32, 8);
    directory = Le(b, locator + 48, 8);
  }
  std::vector<NpzMember> out;
  std::size_t at = directory;
  for (std::uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > b.size() || Le(b, at, 4) != kDirectoryEntry) return bad("bad directory entry");
    const std::uint64_t method = Le(b, at + 10, 2);
    std::uint64_t compressed = Le(b, at + 20, 4), size = Le(b, at + 24, 4);
    const std::size_t name_length = Le(b, at + 28, 2), extra_length = Le(b, at + 30, 2),
                      comment_length = Le(b, at + 32, 2);
    std::uint64_t local = Le(b, at + 42, 4);
    if (at + 46 + name_length + extra_length > b.size()) return bad("bad directory entry");
    std::string name = b.substr(at + 46, name_length);
    // zip64: the sizes and offset that overflowed 32 bits, in this order.
    for (std::size_t x = at + 46 + name_length; x + 4 <= at + 46 + name_length + extra_length;) {
      const std::uint64_t id = Le(b, x, 2), length = Le(b, x + 2, 2);
      std::size_t f = x + 4;
      if (id == 1) {
        if (size == 0xffffffff) size = Le(b, f, 8), f += 8;
        if (compressed == 0xffffffff) compressed = Le(b, f, 8), f += 8;
        if (local == 0xffffffff) local = Le(b, f, 8);
      }
      x += 4 + length;
    }
    at += 46 + name_length + extra_length + comment_length;
    if (local + 30 > b.size() || Le(b, local, 4) != kLocalHeader) return bad(absl::StrCat("bad header for ", name));
    const std::uint64_t data = local + 30 + Le(b, local + 26, 2) + Le(b, local + 28, 2);
    if (data + compressed > b.size()) return bad(absl::StrCat(name, " runs past the end"));
    const std::string where = absl::StrCat(path, ": ", name);
    NpzMember m;
    m.name = absl::EndsWith(name, ".npy") ? name.substr(0, name.size() - 4) : name;
    if (method == 0) {
      m.npy = b.substr(data, compressed);
    } else if (method == 8) {
      absl::StatusOr<std::string> inflated = Inflate(b.substr(data, compressed), size, where);
      if (!inflated.ok()) return inflated.status();
      m.npy = *std::move(inflated);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(where, ": compression method ", method,
                                                     " (only stored and deflated members are read)"));
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace tally::client
