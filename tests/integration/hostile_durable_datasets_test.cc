// Datasets kept in --dataset_dir against what ends a server's life and what
// happens to its files: tally-server processes killed with SIGKILL (or
// stopped with SIGTERM) and started again on the same directory answer the
// same queries bitwise; files cut short or changed on disk, an upload a kill
// cut short, and datasets the limits no longer fit are skipped with a
// warning and never served.
#include <gtest/gtest.h>

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tally/v1/tally.grpc.pb.h"
#include "tests/integration/server_process.h"

namespace tally::testing {
namespace {

using namespace std::chrono_literals;

v1::Aggregation Op(v1::Op op) {
  v1::Aggregation a;
  a.set_op(op);
  return a;
}

v1::Aggregation Hist(std::uint32_t bins, double lo, double hi) {
  v1::Aggregation a = Op(v1::OP_HISTOGRAM);
  a.mutable_histogram()->set_bins(bins);
  a.mutable_histogram()->set_lo(lo);
  a.mutable_histogram()->set_hi(hi);
  return a;
}

// Random bytes: every bit pattern of the dtype, NaNs and infinities too.
std::string RandomBytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// Random float32s in [-1000, 1000): sums and moments worth comparing bitwise.
std::string RandomFloats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

struct Upload {
  std::string name;
  v1::DType dtype;
  std::uint64_t length;
  std::uint64_t row_length;
  std::string bytes;
  double ttl_seconds = 0;
  bool replace = false;
};

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The one file in `dir` whose name ends in `suffix` and mentions `name`.
std::string FileOf(const std::string& dir, const std::string& name, const std::string& suffix = ".tally") {
  std::string found;
  for (const std::string& f : Files(dir)) {
    if (f.find("-" + name + ".") != std::string::npos && f.size() >= suffix.size() &&
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) {
      EXPECT_TRUE(found.empty()) << "two files for " << name;
      found = f;
    }
  }
  return found;
}

class DurableDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tally-durable-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    for (const std::string& f : Files(dir_)) std::remove((dir_ + "/" + f).c_str());
    ::rmdir(dir_.c_str());
  }

  std::unique_ptr<ServerProcess> Start(std::vector<std::string> args = {}) {
    args.push_back("--backend=cpu");
    args.push_back("--threads=2");
    args.push_back("--dataset_dir=" + dir_);
    auto server = std::make_unique<ServerProcess>(TALLY_SERVER_BINARY, args);
    EXPECT_NE(server->port(), 0) << server->Output();
    stub_ = v1::Aggregator::NewStub(server->Channel());
    return server;
  }

  grpc::Status Put(const Upload& u) {
    grpc::ClientContext ctx;
    v1::PutDatasetResponse resp;
    auto writer = stub_->PutDataset(&ctx, &resp);
    v1::PutDatasetRequest header;
    header.mutable_header()->set_name(u.name);
    header.mutable_header()->mutable_spec()->set_dtype(u.dtype);
    header.mutable_header()->mutable_spec()->set_length(u.length);
    header.mutable_header()->mutable_spec()->set_row_length(u.row_length);
    header.mutable_header()->set_ttl_seconds(u.ttl_seconds);
    header.mutable_header()->set_replace(u.replace);
    bool open = writer->Write(header);
    for (std::size_t at = 0; open && at < u.bytes.size(); at += 1 << 20) {
      v1::PutDatasetRequest chunk;
      chunk.set_chunk(u.bytes.substr(at, 1 << 20));
      open = writer->Write(chunk);
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Delete(const std::string& name) {
    grpc::ClientContext ctx;
    v1::DeleteDatasetRequest r;
    r.set_name(name);
    v1::DeleteDatasetResponse resp;
    return stub_->DeleteDataset(&ctx, r, &resp);
  }

  // The datasets as ListDatasets reports them, without what a restart
  // changes by design (versions, query counts).
  std::map<std::string, std::string> Listing() {
    grpc::ClientContext ctx;
    v1::ListDatasetsResponse resp;
    const grpc::Status s = stub_->ListDatasets(&ctx, v1::ListDatasetsRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::map<std::string, std::string> out;
    for (v1::DatasetInfo d : resp.datasets()) {
      d.clear_version();
      d.clear_queries();
      out[d.name()] = d.SerializeAsString();
    }
    return out;
  }

  // Every query's results over every dataset, serialized (equal strings
  // are equal bits), with the status of each; by dataset and query.
  std::map<std::string, std::string> Answers() {
    grpc::ClientContext list_ctx;
    v1::ListDatasetsResponse list;
    EXPECT_TRUE(stub_->ListDatasets(&list_ctx, v1::ListDatasetsRequest(), &list).ok());
    std::map<std::string, std::string> out;
    for (const v1::DatasetInfo& d : list.datasets()) {
      const std::uint64_t row = std::max<std::uint64_t>(d.row_length(), 1);
      for (int q = 0; q < 4; ++q) {
        v1::AggregateDatasetRequest r;
        r.set_name(d.name());
        for (v1::Op op : {v1::OP_SUM, v1::OP_MEAN, v1::OP_VARIANCE, v1::OP_NANMAX, v1::OP_ARGMIN, v1::OP_COUNT}) {
          *r.add_aggregations() = Op(op);
        }
        *r.add_aggregations() = Hist(33, -500, 500);
        if (q == 1) r.set_row_length(0);  // one answer, whatever the dataset's rows
        if (q == 2) {                     // whole rows from the middle, cut as the dataset is
          r.mutable_range()->set_begin(d.length() / row / 3 * row);
          r.mutable_range()->set_end(d.length() / row * 2 / 3 * row);
        }
        if (q == 3) r.set_row_length(1);
        v1::AggregateResponse resp;
        grpc::ClientContext ctx;
        const grpc::Status s = stub_->AggregateDataset(&ctx, r, &resp);
        std::string answer = std::to_string(s.error_code()) + ":";
        for (const v1::AggregationResult& result : resp.results()) answer += result.SerializeAsString();
        out[d.name() + " query " + std::to_string(q)] = answer;
      }
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<v1::Aggregator::Stub> stub_;
};

// Datasets of several dtypes and shapes, a replaced one, a deleted one, an
// empty one, one with a TTL.
std::vector<Upload> Uploads() {
  return {
      {"floats", v1::DTYPE_FLOAT32, 1'000'003, 0, RandomFloats(1'000'003, 1)},
      {"rows of int16", v1::DTYPE_INT16, 300 * 77, 77, RandomBytes(300 * 77 * 2, 2)},
      {"f64/with ttl", v1::DTYPE_FLOAT64, 5000, 0, RandomBytes(5000 * 8, 3), 3600},
      {"replaced", v1::DTYPE_UINT8, 100, 10, RandomBytes(100, 4)},
      {"replaced", v1::DTYPE_INT32, 600, 0, RandomBytes(600 * 4, 5), 0, true},
      {"deleted", v1::DTYPE_FLOAT64, 10, 0, RandomBytes(80, 6)},
      {"empty", v1::DTYPE_UINT8, 0, 0, ""},
      {"bools", v1::DTYPE_BOOL, 999, 9, std::string(999, '\1')},
  };
}

const std::vector<std::string> kServed = {"floats", "rows of int16", "f64/with ttl", "replaced", "empty", "bools"};

class RestartTest : public DurableDatasetTest, public ::testing::WithParamInterface<int> {};

TEST_P(RestartTest, TheRestartedServerAnswersTheSameQueriesBitwise) {
  std::map<std::string, std::string> listed, answers;
  {
    auto server = Start();
    for (const Upload& u : Uploads()) ASSERT_TRUE(Put(u).ok()) << u.name;
    ASSERT_TRUE(Delete("deleted").ok());
    listed = Listing();
    answers = Answers();
    ASSERT_EQ(listed.size(), kServed.size());
    ASSERT_EQ(answers.size(), 4 * kServed.size());
    const auto ok = std::count_if(answers.begin(), answers.end(), [](const auto& a) { return a.second[0] == '0'; });
    EXPECT_GE(ok, 16) << "too few queries answered to compare";
    server->Signal(GetParam());  // right after the answers: nothing more to wait for
    server->Wait();
  }
  auto server = Start();
  EXPECT_TRUE(server->WaitFor("loaded 6 dataset(s)")) << server->Output();
  EXPECT_TRUE(Listing() == listed) << "ListDatasets differs after the restart";
  const std::map<std::string, std::string> again = Answers();
  ASSERT_EQ(again.size(), answers.size());
  for (const auto& [query, answer] : answers) {
    EXPECT_TRUE(again.at(query) == answer) << query << " is answered otherwise after the restart";
  }
  grpc::ClientContext ctx;
  v1::DescribeDatasetRequest r;
  r.set_name("deleted");
  v1::DatasetInfo info;
  EXPECT_EQ(stub_->DescribeDataset(&ctx, r, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  // One file per dataset: the replaced version's and the deleted one's are gone.
  int files = 0;
  for (const std::string& f : Files(dir_)) files += f.find(".tally") != std::string::npos;
  EXPECT_EQ(files, static_cast<int>(kServed.size()));
}

INSTANTIATE_TEST_SUITE_P(Signals, RestartTest, ::testing::Values(SIGKILL, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == SIGKILL ? std::string("SIGKILL") : std::string("SIGTERM");
                         });

TEST_F(DurableDatasetTest, FilesCutShortOrChangedOnDiskAreSkippedNeverServed) {
  {
    auto server = Start();
    for (const char* name : {"good", "flipped", "cut"}) {
      ASSERT_TRUE(Put({name, v1::DTYPE_FLOAT32, 4096, 0, RandomFloats(4096, 7)}).ok());
    }
    server->Signal(SIGKILL);
    server->Wait();
  }
  const std::string flipped = FileOf(dir_, "flipped"), cut = FileOf(dir_, "cut");
  ASSERT_FALSE(flipped.empty());
  ASSERT_FALSE(cut.empty());
  {
    std::fstream f(dir_ + "/" + flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(2000);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);  // one bit of one float
    f.seekp(2000);
    f.write(&c, 1);
  }
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/" + cut).c_str(), &st), 0);
  ASSERT_EQ(::truncate((dir_ + "/" + cut).c_str(), st.st_size - 100), 0);
  // What a crash while writing leaves: a temporary file.
  std::ofstream(dir_ + "/00000000000000ff-leftover.tally.tmp") << "half of a dataset";

  auto server = Start();
  ASSERT_TRUE(server->WaitFor("loaded 1 dataset(s)")) << server->Output();
  EXPECT_EQ(Listing().size(), 1u);
  EXPECT_EQ(Listing().count("good"), 1u);
  for (const char* name : {"flipped", "cut"}) {
    v1::AggregateDatasetRequest r;
    r.set_name(name);
    *r.add_aggregations() = Op(v1::OP_SUM);
    v1::AggregateResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->AggregateDataset(&ctx, r, &resp).error_code(), grpc::StatusCode::NOT_FOUND) << name;
  }
  const std::vector<std::string> checksum = server->Lines("checksum does not match");
  ASSERT_EQ(checksum.size(), 1u) << server->Output();
  EXPECT_NE(checksum[0].find("'flipped'"), std::string::npos) << checksum[0];
  EXPECT_NE(checksum[0].find("[warning]"), std::string::npos) << checksum[0];
  const std::vector<std::string> short_file = server->Lines("cut short: ");
  ASSERT_FALSE(short_file.empty()) << server->Output();
  EXPECT_NE(short_file[0].find(cut), std::string::npos) << short_file[0];
  EXPECT_EQ(server->Lines("leftover.tally.tmp").size(), 1u) << server->Output();
  // Kept for a person to look at, never loaded again; the leftover is gone.
  EXPECT_FALSE(FileOf(dir_, "flipped", ".tally.corrupt").empty());
  EXPECT_FALSE(FileOf(dir_, "cut", ".tally.corrupt").empty());
  EXPECT_TRUE(FileOf(dir_, "leftover", ".tally.tmp").empty());
}

TEST_F(DurableDatasetTest, AnUploadAKillCutShortLeavesNothingBehind) {
  auto server = Start();
  ASSERT_TRUE(Put({"before", v1::DTYPE_UINT8, 1000, 0, RandomBytes(1000, 8)}).ok());
  grpc::ClientContext ctx;
  v1::PutDatasetResponse resp;
  auto writer = stub_->PutDataset(&ctx, &resp);
  v1::PutDatasetRequest header;
  header.mutable_header()->set_name("half");
  header.mutable_header()->mutable_spec()->set_dtype(v1::DTYPE_UINT8);
  header.mutable_header()->mutable_spec()->set_length(8 << 20);
  ASSERT_TRUE(writer->Write(header));
  v1::PutDatasetRequest chunk;
  chunk.set_chunk(RandomBytes(1 << 20, 9));
  ASSERT_TRUE(writer->Write(chunk));
  // The upload's file exists once its first chunk has been taken.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (FileOf(dir_, "half", ".tally.tmp").empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(FileOf(dir_, "half", ".tally.tmp").empty());
  server->Signal(SIGKILL);
  server->Wait();
  writer->WritesDone();
  EXPECT_FALSE(writer->Finish().ok());

  server = Start();
  ASSERT_TRUE(server->WaitFor("loaded 1 dataset(s)")) << server->Output();
  EXPECT_EQ(Listing().count("before"), 1u);
  EXPECT_EQ(Listing().count("half"), 0u);
  EXPECT_EQ(server->Lines("-half.tally.tmp").size(), 1u) << server->Output();
  EXPECT_TRUE(FileOf(dir_, "half", ".tally.tmp").empty());
}

TEST_F(DurableDatasetTest, DatasetsTheLimitsNoLongerFitAreSkippedNamingTheLimit) {
  {
    auto server = Start();
    for (const char* name : {"a", "b", "c"}) {
      ASSERT_TRUE(Put({name, v1::DTYPE_UINT8, 100'000, 0, RandomBytes(100'000, 10)}).ok());
    }
    server->Signal(SIGTERM);
    server->Wait();
  }
  for (const auto& [flag, loaded] : std::vector<std::pair<std::string, int>>{
           {"--max_datasets=2", 2}, {"--max_dataset_bytes=150000", 1}, {"--quota_datasets=1", 1}}) {
    auto server = Start({flag});
    ASSERT_TRUE(server->WaitFor("loaded " + std::to_string(loaded) + " dataset(s)")) << server->Output();
    EXPECT_EQ(static_cast<int>(Listing().size()), loaded) << flag;
    const std::string limit = flag.substr(0, flag.find('='));
    const std::vector<std::string> skipped = server->Lines("is not loaded");
    EXPECT_EQ(static_cast<int>(skipped.size()), 3 - loaded) << server->Output();
    // The oldest are loaded first.
    for (std::size_t i = 0; i < skipped.size(); ++i) {
      EXPECT_NE(skipped[i].find(limit), std::string::npos) << skipped[i];
      const std::string name = i + 1 == skipped.size() ? "c" : "b";
      EXPECT_NE(skipped[i].find("dataset '" + name + "'"), std::string::npos) << skipped[i];
    }
    server->Signal(SIGTERM);
    server->Wait();
  }
  // Their files were kept: a server with room serves all three again.
  auto server = Start();
  ASSERT_TRUE(server->WaitFor("loaded 3 dataset(s)")) << server->Output();
  EXPECT_EQ(Listing().size(), 3u);
}

TEST_F(DurableDatasetTest, ASecondServerCannotUseTheSameDirectory) {
  auto first = Start();
  ASSERT_TRUE(Put({"mine", v1::DTYPE_UINT8, 10, 0, RandomBytes(10, 11)}).ok());
  ServerProcess second(TALLY_SERVER_BINARY, {"--backend=cpu", "--dataset_dir=" + dir_});
  EXPECT_EQ(second.port(), 0);
  const int status = second.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  EXPECT_FALSE(second.Lines("in use by another tally-server").empty()) << second.Output();
  EXPECT_EQ(Listing().count("mine"), 1u);  // the first one's files are untouched
}

}  // namespace
}  // namespace tally::testing
