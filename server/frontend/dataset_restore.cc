#include "server/frontend/dataset_restore.h"

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/frontend/dataset_header.h"
#include "spdlog/spdlog.h"

namespace tally {
namespace {

// Bytes read from a file per Append.
constexpr std::size_t kReadBytes = std::size_t{4} << 20;

// Loads `file`'s dataset; DATA_LOSS when the file fails its checks.
absl::Status Load(DatasetStore& datasets, DatasetDirectory& directory, IdentityQuotas& quotas,
                  const std::string& file, std::vector<std::byte>& buffer) {
  absl::StatusOr<DatasetFileReader> reader = directory.Read(file);
  if (!reader.ok()) return reader.status();
  const DatasetFileHeader& header = reader->header();
  absl::StatusOr<std::shared_ptr<void>> charge = ChargeDataset(quotas, header.owner, header.data_bytes());
  if (!charge.ok()) return charge.status();
  absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> upload =
      datasets.BeginRestore(header, file, std::move(*charge));
  if (!upload.ok()) return upload.status();
  for (;;) {
    absl::StatusOr<std::size_t> n = reader->Read(buffer);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    if (absl::Status s = (*upload)->Append(Extent::PageableHost(std::span(buffer.data(), *n))); !s.ok()) return s;
  }
  // Nothing is published before every byte was checked.
  if (absl::Status s = reader->Verify(); !s.ok()) return s;
  return (*upload)->Commit().status();
}

}  // namespace

RestoreReport RestoreDatasets(DatasetStore& datasets, DatasetDirectory& directory, IdentityQuotas& quotas) {
  const auto start = std::chrono::steady_clock::now();
  RestoreReport report;
  struct Version {
    std::string file;
    DatasetFileHeader header;
  };
  // Headers first (a file descriptor each only while it is read); oldest first.
  std::vector<Version> versions;
  for (const std::string& file : directory.TakeInventory()) {
    absl::StatusOr<DatasetFileReader> reader = directory.Read(file);
    if (!reader.ok()) {
      spdlog::warn("--dataset_dir: skipping a file that is not a whole dataset: {}", std::string(reader.status().message()));
      directory.SetAside(file);
      ++report.skipped;
      continue;
    }
    versions.push_back(Version{file, reader->header()});
  }
  // A replace whose commit a crash interrupted leaves the old version's file
  // beside the new one's: the latest is the name's.
  std::map<std::string, std::size_t> latest;
  for (std::size_t i = 0; i < versions.size(); ++i) {
    auto [it, first] = latest.emplace(versions[i].header.name, i);
    if (!first && versions[i].header.sequence > versions[it->second].header.sequence) it->second = i;
  }
  std::vector<std::string> stale;
  const auto now = std::chrono::system_clock::now();
  std::vector<std::byte> buffer(kReadBytes);
  for (std::size_t i = 0; i < versions.size(); ++i) {
    const Version& v = versions[i];
    if (latest.at(v.header.name) != i) {
      spdlog::info("--dataset_dir: removing {}, a version of dataset '{}' that a later one replaced", v.file,
                   v.header.name);
      stale.push_back(v.file);
      continue;
    }
    if (v.header.expires && *v.header.expires <= now) {
      spdlog::info("--dataset_dir: removing {}: dataset '{}' expired while the server was down", v.file,
                   v.header.name);
      stale.push_back(v.file);
      continue;
    }
    const absl::Status s = Load(datasets, directory, quotas, v.file, buffer);
    if (s.ok()) {
      ++report.loaded;
      report.bytes += v.header.data_bytes();
      continue;
    }
    ++report.skipped;
    if (s.code() == absl::StatusCode::kDataLoss) {
      spdlog::warn("--dataset_dir: dataset '{}' is not loaded: {}", v.header.name, std::string(s.message()));
      directory.SetAside(v.file);
    } else {
      spdlog::warn("--dataset_dir: dataset '{}' ({}/{}) is not loaded: {}: {}; its file is kept for a restart "
                   "with room",
                   v.header.name, directory.path(), v.file, absl::StatusCodeToString(s.code()), std::string(s.message()));
    }
  }
  directory.Remove(stale);
  spdlog::info("--dataset_dir: loaded {} dataset(s), {} bytes, from {} in {:.3f} s; {} skipped", report.loaded,
               report.bytes, directory.path(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), report.skipped);
  return report;
}

}  // namespace tally
