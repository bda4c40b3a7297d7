// Durable datasets' files (--dataset_dir): what is written reads back the
// same; a byte changed anywhere or a file cut anywhere is DATA_LOSS; a
// writer that never lands leaves nothing; one process per directory. And the
// store over a directory: each published version has its file, and a
// delete, a replace or a refused commit leaves none behind.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/datasets/dataset_directory.h"
#include "server/engine/datasets/dataset_store.h"
#include "tests/unit/test_seed.h"

namespace tally {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != ".." && name != ".lock") out.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string ReadAll(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY);
  char buffer[4096];
  for (ssize_t n; fd >= 0 && (n = ::read(fd, buffer, sizeof(buffer))) > 0;) out.append(buffer, n);
  if (fd >= 0) ::close(fd);
  return out;
}

void WriteAll(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

class DatasetFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tally-files-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    path_ = dir;
    Open();
  }
  void TearDown() override {
    store_.reset();
    directory_.reset();
    for (const std::string& f : Files(path_)) ::unlink((path_ + "/" + f).c_str());
    ::unlink((path_ + "/.lock").c_str());
    ::rmdir(path_.c_str());
  }
  void Open() {
    absl::StatusOr<std::unique_ptr<DatasetDirectory>> d = DatasetDirectory::Open(path_);
    ASSERT_TRUE(d.ok()) << d.status();
    directory_ = std::move(*d);
  }

  // A landed file of `data` under `header`; its name.
  std::string Write(DatasetFileHeader header, const std::string& data) {
    absl::StatusOr<std::unique_ptr<DatasetFileWriter>> w = directory_->Create(header);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return "";
    // Pieces of odd sizes: the checksum must not depend on them.
    for (std::size_t at = 0; at < data.size(); at += 777) {
      const std::string piece = data.substr(at, 777);
      EXPECT_TRUE((*w)->Append(std::as_bytes(std::span(piece.data(), piece.size()))).ok());
    }
    EXPECT_TRUE((*w)->Finish(header.created, header.expires).ok());
    EXPECT_TRUE((*w)->Land().ok());
    return (*w)->file();
  }

  // Reads `file` back whole: the header's checks, the data, the trailer's.
  absl::Status ReadBack(const std::string& file, DatasetFileHeader* header = nullptr, std::string* data = nullptr) {
    absl::StatusOr<DatasetFileReader> r = directory_->Read(file);
    if (!r.ok()) return r.status();
    if (header != nullptr) *header = r->header();
    std::string got;
    std::vector<std::byte> buffer(1000);
    for (;;) {
      absl::StatusOr<std::size_t> n = r->Read(buffer);
      if (!n.ok()) return n.status();
      if (*n == 0) break;
      got.append(reinterpret_cast<const char*>(buffer.data()), *n);
    }
    if (data != nullptr) *data = got;
    return r->Verify();
  }

  static std::string Random(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string out(n, '\0');
    for (char& c : out) c = static_cast<char>(rng());
    return out;
  }

  static DatasetFileHeader Header(const std::string& name, std::uint64_t length) {
    DatasetFileHeader h;
    h.name = name;
    h.dtype = rules::DType::kFloat64;
    h.length = length;
    h.row_length = length % 10 == 0 ? 10 : 0;
    h.created = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
    h.expires = h.created + std::chrono::hours(2);
    h.owner = "alice";
    return h;
  }

  std::string path_;
  std::unique_ptr<DatasetDirectory> directory_;
  std::unique_ptr<Backend> backend_ = MakeCpuBackend(CpuBackendOptions{.threads = 2});
  std::unique_ptr<DatasetStore> store_;
};

TEST_F(DatasetFilesTest, WhatIsWrittenReadsBackTheSame) {
  const std::string data = Random(8 * 5000, testing::TestSeed());
  const std::string file = Write(Header("a name/with spaces", 5000), data);
  EXPECT_NE(file.find("-a_name_with_spaces.tally"), std::string::npos) << file;
  DatasetFileHeader h;
  std::string got;
  ASSERT_TRUE(ReadBack(file, &h, &got).ok());
  EXPECT_EQ(got, data);
  const DatasetFileHeader want = Header("a name/with spaces", 5000);
  EXPECT_EQ(h.name, want.name);
  EXPECT_EQ(h.dtype, want.dtype);
  EXPECT_EQ(h.length, want.length);
  EXPECT_EQ(h.row_length, 10u);
  EXPECT_EQ(h.created, want.created);
  EXPECT_EQ(h.expires, want.expires);
  EXPECT_EQ(h.owner, "alice");
  EXPECT_GT(h.sequence, 0u);
  EXPECT_EQ(Files(path_), std::vector<std::string>{file});  // no temporary file left
}

TEST_F(DatasetFilesTest, AnyChangedByteOrCutIsDataLoss) {
  const std::string file = Write(Header("x", 64), Random(8 * 64, 1));
  const std::string path = path_ + "/" + file;
  const std::string whole = ReadAll(path);
  // Every byte, header, data and trailer alike.
  for (std::size_t at = 0; at < whole.size(); ++at) {
    std::string changed = whole;
    changed[at] = static_cast<char>(changed[at] ^ 0x01);
    WriteAll(path, changed);
    const absl::Status s = ReadBack(file);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << at << ": " << s;
  }
  for (std::size_t cut : {std::size_t{0}, std::size_t{10}, std::size_t{70}, whole.size() / 2, whole.size() - 1}) {
    WriteAll(path, whole.substr(0, cut));
    const absl::Status s = ReadBack(file);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "cut at " << cut << ": " << s;
  }
  WriteAll(path, whole + "x");
  EXPECT_EQ(ReadBack(file).code(), absl::StatusCode::kDataLoss);
  WriteAll(path, whole);
  EXPECT_TRUE(ReadBack(file).ok());
}

TEST_F(DatasetFilesTest, WritersThatNeverLandLeaveNothing) {
  {
    absl::StatusOr<std::unique_ptr<DatasetFileWriter>> w = directory_->Create(Header("gone", 10));
    ASSERT_TRUE(w.ok());
    ASSERT_EQ(Files(path_).size(), 1u);  // the temporary file
  }
  EXPECT_TRUE(Files(path_).empty());
  // What a crash leaves, the next start removes; sequence numbers go on.
  const std::string kept = Write(Header("kept", 10), Random(80, 2));
  const int fd = ::open((path_ + "/00000000000000ff-crashed.tally.tmp").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  directory_.reset();
  Open();
  EXPECT_EQ(directory_->TakeInventory(), std::vector<std::string>{kept});
  EXPECT_EQ(Files(path_), std::vector<std::string>{kept});
  const std::string next = Write(Header("next", 10), Random(80, 3));
  EXPECT_GT(next, "00000000000000ff") << next;
}

TEST_F(DatasetFilesTest, OneProcessPerDirectory) {
  // flock locks belong to the open file: a second open in this process is
  // refused as another process's would be.
  absl::StatusOr<std::unique_ptr<DatasetDirectory>> second = DatasetDirectory::Open(path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another tally-server"), std::string::npos);
}

TEST_F(DatasetFilesTest, TheStoreKeepsAFilePerPublishedVersionOnly) {
  store_ = std::make_unique<DatasetStore>(*backend_, DatasetOptions{}, nullptr, directory_.get());
  auto put = [&](const std::string& name, std::size_t bytes, bool replace) -> absl::StatusOr<DatasetInfo> {
    absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> up =
        store_->BeginUpload(DatasetStore::UploadRequest{name, DType::kUInt8, bytes, 0, replace, std::nullopt, "bob"});
    if (!up.ok()) return up.status();
    const std::string data = Random(bytes, bytes);
    if (absl::Status s = (*up)->Append(Extent::PageableHost(std::as_bytes(std::span(data.data(), data.size()))));
        !s.ok()) {
      return s;
    }
    return (*up)->Commit();
  };
  ASSERT_TRUE(put("a", 1000, false).ok());
  ASSERT_TRUE(put("b", 1000, false).ok());
  ASSERT_EQ(Files(path_).size(), 2u);
  const std::string first_a = Files(path_)[0];
  ASSERT_TRUE(put("a", 1000, true).ok());  // the replaced version's file goes
  const std::vector<std::string> after_replace = Files(path_);
  ASSERT_EQ(after_replace.size(), 2u);
  EXPECT_EQ(std::count(after_replace.begin(), after_replace.end(), first_a), 0);
  ASSERT_TRUE(store_->Delete("b").ok());  // gone before the delete answers
  ASSERT_EQ(Files(path_).size(), 1u);
  // An upload that ends early leaves no file.
  {
    absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> up = store_->BeginUpload("short", DType::kUInt8, 10, false,
                                                                                  std::nullopt);
    ASSERT_TRUE(up.ok());
    EXPECT_EQ(Files(path_).size(), 2u);
  }
  EXPECT_EQ(Files(path_).size(), 1u);
  // The file says what the store holds.
  DatasetFileHeader h;
  ASSERT_TRUE(ReadBack(Files(path_)[0], &h).ok());
  EXPECT_EQ(h.name, "a");
  EXPECT_EQ(h.owner, "bob");
  EXPECT_EQ(std::chrono::duration_cast<milliseconds>(h.created.time_since_epoch()),
            std::chrono::duration_cast<milliseconds>(store_->Describe("a")->created.time_since_epoch()));
}

}  // namespace
}  // namespace tally
