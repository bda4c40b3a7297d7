#include "server/frontend/token_file.h"

#include <openssl/sha.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace tally {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string TokenFile::Sha256Hex(absl::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

TokenFile::Stamp TokenFile::StampOf(const struct stat& st) {
  return Stamp{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
               static_cast<std::uint64_t>(st.st_size),
               static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

absl::StatusOr<TokenFile::Table> TokenFile::Parse(absl::string_view text) {
  Table table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_number, ": expected '<sha256 hex of the token> <identity>', got ", fields.size(), " fields."));
    }
    std::string hash = absl::AsciiStrToLower(fields[0]);
    if (hash.size() != 64 || !IsLowerHex(hash)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_number, ": '", fields[0],
          "' is not a SHA-256 in hex (64 digits; printf %s TOKEN | sha256sum gives one)."));
    }
    if (fields[1] == "anonymous" || fields[1] == "other") {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_number, ": '", fields[1],
          "' is reserved (the metrics' label for unauthenticated calls and for identities past the limit)."));
    }
    if (!table.emplace(std::move(hash), std::string(fields[1])).second) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": the same token hash appears twice."));
    }
  }
  return table;
}

absl::StatusOr<std::unique_ptr<TokenFile>> TokenFile::Open(std::string path, std::chrono::milliseconds recheck) {
  std::unique_ptr<TokenFile> file(new TokenFile(std::move(path), recheck));
  if (absl::Status s = file->Load(); !s.ok()) return s;
  file->checked_ = Clock::now();
  return file;
}

absl::Status TokenFile::Load(const std::optional<Stamp>& expected) {
  struct stat st {}, after {};
  if (::stat(path_.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path_, ": cannot stat the file."));
  if (expected && !(StampOf(st) == *expected)) {
    return absl::UnavailableError(absl::StrCat(path_, ": changed again before it was read."));
  }
  absl::StatusOr<std::string> text = ReadWhole(path_);
  if (!text.ok()) return text.status();
  if (::stat(path_.c_str(), &after) != 0 || !(StampOf(after) == StampOf(st)) ||
      text->size() != static_cast<std::size_t>(st.st_size)) {
    return absl::UnavailableError(absl::StrCat(path_, ": changed while it was read."));
  }
  absl::StatusOr<Table> table = Parse(*text);
  if (!table.ok()) return absl::InvalidArgumentError(absl::StrCat(path_, ": ", table.status().message()));
  // An empty file is what a writer that truncates first leaves for a while,
  // and taken it would lock every caller out.
  if (table->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": holds no token; no call could authenticate."));
  }
  table_ = std::move(*table);
  stamp_ = StampOf(st);
  return absl::OkStatus();
}

void TokenFile::MaybeReloadLocked(Clock::time_point now) {
  if (now - checked_ < recheck_) return;
  checked_ = now;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (!refused_ || !(*refused_ == Stamp{})) {
      spdlog::warn("--auth_token_file {}: cannot stat it; the {} token(s) read before stay in force", path_,
                   table_.size());
      refused_ = Stamp{};
    }
    return;
  }
  const Stamp seen = StampOf(st);
  if (seen == stamp_ || (refused_ && seen == *refused_)) {
    settling_.reset();
    return;
  }
  if (!settling_ || !(*settling_ == seen)) {
    settling_ = seen;  // read at the next check, if it has stopped changing by then
    return;
  }
  settling_.reset();
  if (absl::Status s = Load(seen); !s.ok()) {
    if (s.code() == absl::StatusCode::kUnavailable) {  // still being written: read at a later check
      spdlog::debug("--auth_token_file: {}", std::string(s.message()));
      return;
    }
    spdlog::warn("--auth_token_file: {} The {} token(s) read before stay in force; write the file whole and "
                 "rename it into place.",
                 std::string(s.message()), table_.size());
    refused_ = seen;  // logged once; read again when it changes
    return;
  }
  refused_.reset();
  spdlog::info("--auth_token_file {}: re-read, {} token(s)", path_, table_.size());
}

std::optional<std::string> TokenFile::Lookup(absl::string_view token) {
  // Hashing first means a lookup's timing depends on the hash, which tells
  // an attacker nothing about the tokens.
  const std::string hash = Sha256Hex(token);
  std::lock_guard<std::mutex> lock(mu_);
  MaybeReloadLocked(Clock::now());
  const auto it = table_.find(hash);
  if (it == table_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tally
