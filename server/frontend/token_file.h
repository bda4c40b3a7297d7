// The bearer tokens a server accepts, read from a file of lines
//
//   <sha256 of the token, 64 hex digits>  <identity>
//
// ('#' starts a comment; blank lines are skipped). Only hashes are stored,
// so the file (a Kubernetes Secret, say) never holds a usable token. The
// file is looked at again at most every `recheck` and re-read when it
// changed (a new inode, size or modification time: a Secret volume's
// symlink swap is one), so tokens are added and revoked without a restart.
// A changed file is read once it has stopped changing (the same stamp at
// two checks in a row), so a file rewritten in place is not taken half
// written. A file that cannot be read or parsed, holds no token, or changed
// while it was read leaves the last good table in force, and says so in the
// log once per version of the file.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct stat;

namespace tally {

class TokenFile {
 public:
  using Clock = std::chrono::steady_clock;

  // Reads the file once; fails if it cannot be read or parsed, or holds no
  // token, so that a server never starts with authentication that no one
  // can pass.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TokenFile>> Open(std::string path,
                                                                       std::chrono::milliseconds recheck);

  // The identity a token belongs to, if any.
  std::optional<std::string> Lookup(absl::string_view token);

  // The table a file's text describes; INVALID_ARGUMENT naming the line.
  using Table = std::map<std::string, std::string, std::less<>>;  // hash (lowercase hex) -> identity
  [[nodiscard]] static absl::StatusOr<Table> Parse(absl::string_view text);
  // SHA-256 of `token`, as 64 lowercase hex digits.
  static std::string Sha256Hex(absl::string_view token);

 private:
  struct Stamp {
    std::uint64_t device = 0, inode = 0, size = 0;
    std::int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  static Stamp StampOf(const struct stat& st);
  TokenFile(std::string path, std::chrono::milliseconds recheck) : path_(std::move(path)), recheck_(recheck) {}
  // Reads and parses the file; the table in force changes only on success.
  // UNAVAILABLE when the file is not the version `expected` (when given)
  // or changed while it was read.
  absl::Status Load(const std::optional<Stamp>& expected = std::nullopt);
  void MaybeReloadLocked(Clock::time_point now);

  const std::string path_;
  const std::chrono::milliseconds recheck_;
  std::mutex mu_;
  Table table_;
  Stamp stamp_;                    // of the file the table was read from
  std::optional<Stamp> settling_;  // a change seen at the last check
  std::optional<Stamp> refused_;   // a version of the file already refused (and logged)
  Clock::time_point checked_;
};

}  // namespace tally
