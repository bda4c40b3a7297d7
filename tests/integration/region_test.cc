// Shared-memory regions over gRPC on the cpu backend: a host region's
// answers are bitwise those of AggregateStream on the same bytes, datasets
// upload from regions, every bad input gets its own status, a truncated
// object is refused without harming the server, and unregistering under
// queries lets them finish before the region is unmapped.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <chrono>
#include <thread>
#include <vector>
#include <utility>
#include <random>
#include <functional>

#include "tally/client/shared_memory.h"
#include "tests/integration/server_fixture.h"

namespace tally::testing {
namespace {

using client::SharedMemoryObject;

class RegionTest : public ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    regions_ = v1::SharedMemory::NewStub(channel_);
  }

  void Restart(ServerConfig config) {
    server_.reset();
    StartServer(config);
    regions_ = v1::SharedMemory::NewStub(channel_);
  }

  // A new shared-memory object holding `bytes` from byte `offset` on.
  static std::unique_ptr<SharedMemoryObject> Object(const std::string& bytes, std::uint64_t offset = 0) {
    auto o = SharedMemoryObject::Create(SharedMemoryObject::UniqueName("test"), offset + bytes.size());
    EXPECT_TRUE(o.ok()) << o.status();
    if (!o.ok()) return nullptr;
    std::memcpy((*o)->bytes().data() + offset, bytes.data(), bytes.size());
    return std::move(*o);
  }

  grpc::Status RegisterHost(const std::string& name, const std::string& shm_name, std::uint64_t offset,
                            std::uint64_t size, v1::RegionInfo* info = nullptr) {
    v1::RegisterHostRegionRequest r;
    r.set_name(name);
    r.set_shm_name(shm_name);
    r.set_offset(offset);
    r.set_byte_size(size);
    v1::RegionInfo ignored;
    grpc::ClientContext ctx;
    return regions_->RegisterHostRegion(&ctx, r, info ? info : &ignored);
  }

  grpc::Status Unregister(const std::string& name) {
    v1::UnregisterRegionRequest r;
    r.set_name(name);
    v1::RegionInfo info;
    grpc::ClientContext ctx;
    return regions_->UnregisterRegion(&ctx, r, &info);
  }

  static v1::AggregateRegionRequest RegionRequest(const std::string& region, std::uint64_t offset, v1::DType dtype,
                                                  std::uint64_t length, const std::vector<v1::Aggregation>& ops,
                                                  std::uint64_t rows = 0) {
    v1::AggregateRegionRequest r;
    r.set_region(region);
    r.set_offset(offset);
    r.mutable_spec()->set_dtype(dtype);
    r.mutable_spec()->set_length(length);
    r.mutable_spec()->set_row_length(rows);
    for (const auto& op : ops) *r.add_aggregations() = op;
    return r;
  }

  grpc::Status Query(const v1::AggregateRegionRequest& r, v1::AggregateResponse* resp) {
    grpc::ClientContext ctx;
    return regions_->AggregateRegion(&ctx, r, resp);
  }

  v1::ListRegionsResponse List() {
    v1::ListRegionsResponse list;
    grpc::ClientContext ctx;
    EXPECT_TRUE(regions_->ListRegions(&ctx, v1::ListRegionsRequest(), &list).ok());
    return list;
  }

  static std::vector<v1::Aggregation> AllOps() {
    return {Op(v1::OP_SUM),      Op(v1::OP_MIN),    Op(v1::OP_MAX),    Op(v1::OP_MEAN),
            Op(v1::OP_COUNT),    Op(v1::OP_VARIANCE), Op(v1::OP_ARGMIN), Op(v1::OP_ARGMAX),
            Op(v1::OP_SUM_SQUARES), Hist(64, -0.9, 0.8)};
  }

  // Whether the server (in this process) maps the shared-memory object
  // `shm_name`: read-only, where the test's own mapping is read-write.
  static bool ServerMaps(const std::string& shm_name) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find("/dev/shm" + shm_name) != std::string::npos && line.find(" r--s ") != std::string::npos) return true;
    }
    return false;
  }

  std::unique_ptr<v1::SharedMemory::Stub> regions_;
};

TEST_F(RegionTest, HostRegionAnswersAreBitwiseTheStreamedAnswers) {
  const std::vector<float> v = RandomFloats(200003, std::random_device{}());
  const std::string bytes = Bytes(v);
  // The region starts 1000 bytes into the object: not on a page boundary.
  auto object = Object(bytes, 1000);
  ASSERT_NE(object, nullptr);
  v1::RegionInfo info;
  ASSERT_TRUE(RegisterHost("r", object->name(), 1000, bytes.size(), &info).ok());
  EXPECT_EQ(info.kind(), v1::RegionInfo::KIND_HOST);
  EXPECT_EQ(info.place(), "host");
  EXPECT_EQ(info.byte_size(), bytes.size());
  EXPECT_TRUE(ServerMaps(object->name()));

  struct Case { std::uint64_t begin, end, rows; };
  for (const Case c : {Case{0, v.size(), 0}, Case{3, 3 + 1000 * 150, 1000}, Case{7, 7, 0}}) {
    SCOPED_TRACE(::testing::Message() << "elements [" << c.begin << ", " << c.end << ") rows " << c.rows);
    std::vector<v1::Aggregation> ops = AllOps();
    if (c.begin == c.end) ops = {Op(v1::OP_SUM), Op(v1::OP_COUNT), Hist(4, 0, 1)};
    v1::AggregateResponse got, want;
    const grpc::Status s = Query(RegionRequest("r", c.begin * 4, v1::DTYPE_FLOAT32, c.end - c.begin, ops, c.rows), &got);
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::vector<v1::AggregateStreamRequest> msgs = {Header(v1::DTYPE_FLOAT32, c.end - c.begin, ops, c.rows)};
    for (auto& m : Chunks(bytes.substr(c.begin * 4, (c.end - c.begin) * 4), 65536)) msgs.push_back(m);
    ASSERT_TRUE(Stream(msgs, &want).ok());
    ASSERT_EQ(got.results_size(), want.results_size());
    for (int i = 0; i < got.results_size(); ++i) {
      EXPECT_EQ(got.results(i).SerializeAsString(), want.results(i).SerializeAsString()) << "result " << i;
    }
    EXPECT_EQ(got.execution().elements(), c.end - c.begin);
  }
  const v1::ListRegionsResponse list = List();
  ASSERT_EQ(list.regions_size(), 1);
  EXPECT_EQ(list.regions(0).queries(), 3u);
  EXPECT_EQ(list.registered_bytes(), bytes.size());
  EXPECT_EQ(Metric("tally_region_bytes"), static_cast<double>(bytes.size()));
  ASSERT_TRUE(Unregister("r").ok());
  EXPECT_EQ(List().regions_size(), 0);
  EXPECT_EQ(Metric("tally_region_bytes"), 0);
  EXPECT_FALSE(ServerMaps(object->name()));
}

// GroupBy's columns read from regions answer what the same columns sent
// inline answer, bit for bit, alone or mixed with inline columns; bad
// region columns are refused naming the field.
TEST_F(RegionTest, GroupByReadsColumnsFromRegionsAsFromTheRequest) {
  const std::size_t rows = 50001;
  std::mt19937_64 rng(std::random_device{}());
  std::vector<std::int32_t> keys(rows);
  for (auto& k : keys) k = static_cast<std::int32_t>(rng() % 97) - 40;
  const std::vector<float> values = RandomFloats(rows, rng());
  const std::string key_bytes = Bytes(keys), value_bytes = Bytes(values);
  // Keys, then the values 4 bytes later: the values start mid-object.
  auto object = Object(key_bytes + std::string(4, '\0') + value_bytes);
  ASSERT_NE(object, nullptr);
  const std::uint64_t value_offset = key_bytes.size() + 4;
  ASSERT_TRUE(RegisterHost("table", object->name(), 0, value_offset + value_bytes.size()).ok());

  auto group_by = [&](bool keys_in_region, bool values_in_region, std::vector<v1::GroupByResponse>* pages) {
    v1::GroupByRequest r;
    v1::Column* k = r.add_columns();
    k->set_name("k");
    k->set_dtype(v1::DTYPE_INT32);
    if (keys_in_region) {
      k->mutable_region()->set_name("table");
      k->mutable_region()->set_length(rows);
    } else {
      k->set_data(key_bytes);
    }
    v1::Column* v = r.add_columns();
    v->set_name("v");
    v->set_dtype(v1::DTYPE_FLOAT32);
    if (values_in_region) {
      v->mutable_region()->set_name("table");
      v->mutable_region()->set_offset(value_offset);
      v->mutable_region()->set_length(rows);
    } else {
      v->set_data(value_bytes);
    }
    r.add_keys("k");
    for (const v1::Op op : {v1::OP_SUM, v1::OP_MIN, v1::OP_VARIANCE, v1::OP_ARGMAX, v1::OP_COUNT}) {
      v1::GroupAggregation* a = r.add_aggregations();
      a->set_column("v");
      *a->mutable_aggregation() = Op(op);
    }
    grpc::ClientContext ctx;
    auto reader = stub_->GroupBy(&ctx, r);
    for (v1::GroupByResponse page; reader->Read(&page);) pages->push_back(page);
    return reader->Finish();
  };
  std::vector<v1::GroupByResponse> inline_pages;
  ASSERT_TRUE(group_by(false, false, &inline_pages).ok());
  ASSERT_FALSE(inline_pages.empty());
  EXPECT_EQ(inline_pages[0].groups(), 97u);
  for (const auto& [in_keys, in_values] : {std::pair{true, true}, std::pair{false, true}, std::pair{true, false}}) {
    std::vector<v1::GroupByResponse> pages;
    const grpc::Status s = group_by(in_keys, in_values, &pages);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(pages.size(), inline_pages.size());
    for (std::size_t p = 0; p < pages.size(); ++p) {
      pages[p].clear_execution();
      v1::GroupByResponse want = inline_pages[p];
      want.clear_execution();
      EXPECT_EQ(pages[p].SerializeAsString(), want.SerializeAsString()) << "keys in region " << in_keys
                                                                         << ", values in region " << in_values;
    }
  }

  auto refused = [&](const std::function<void(v1::Column*)>& edit, grpc::StatusCode code, const std::string& why) {
    v1::GroupByRequest r;
    v1::Column* k = r.add_columns();
    k->set_name("k");
    k->set_dtype(v1::DTYPE_INT32);
    k->set_data(key_bytes);
    v1::Column* v = r.add_columns();
    v->set_name("v");
    v->set_dtype(v1::DTYPE_FLOAT32);
    v->mutable_region()->set_name("table");
    v->mutable_region()->set_offset(value_offset);
    v->mutable_region()->set_length(rows);
    edit(v);
    r.add_keys("k");
    v1::GroupAggregation* a = r.add_aggregations();
    a->set_column("v");
    *a->mutable_aggregation() = Op(v1::OP_SUM);
    grpc::ClientContext ctx;
    auto reader = stub_->GroupBy(&ctx, r);
    for (v1::GroupByResponse page; reader->Read(&page);) {
    }
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), code) << why << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(why), std::string::npos) << s.error_message();
  };
  refused([](v1::Column* v) { v->mutable_region()->set_name("nothing"); }, grpc::StatusCode::NOT_FOUND,
          "columns[1].region");
  refused([&](v1::Column* v) { v->mutable_region()->set_offset(value_offset + 2); }, grpc::StatusCode::INVALID_ARGUMENT,
          "columns[1].region.offset");
  refused([&](v1::Column* v) { v->mutable_region()->set_length(rows + 1); }, grpc::StatusCode::INVALID_ARGUMENT,
          "columns[1].region.length");
  refused([](v1::Column* v) { v->clear_dtype(); }, grpc::StatusCode::INVALID_ARGUMENT, "columns[1].dtype");
  refused([&](v1::Column* v) { v->set_data(value_bytes); }, grpc::StatusCode::INVALID_ARGUMENT,
          "give one of data, dataset and region");
  refused([&](v1::Column* v) { v->mutable_region()->set_length(rows - 1); }, grpc::StatusCode::INVALID_ARGUMENT,
          "every column must have the same length");
  // The server carries on, and the region was read by GroupBy only while it ran.
  std::vector<v1::GroupByResponse> again;
  EXPECT_TRUE(group_by(true, true, &again).ok());
  ASSERT_TRUE(Unregister("table").ok());
  // The last call lets the region go as its handler ends, which may be just
  // after this client has read its status: the mapping must go, soon.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ServerMaps(object->name()) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(ServerMaps(object->name())) << "still mapped 5 s after Unregister and the last call";
}

TEST_F(RegionTest, DatasetsUploadFromARegion) {
  const std::vector<float> v = RandomFloats(100000, 7);
  auto object = Object(Bytes(v));
  ASSERT_NE(object, nullptr);
  ASSERT_TRUE(RegisterHost("r", object->name(), 0, v.size() * 4).ok());
  v1::PutDatasetFromRegionRequest put;
  put.mutable_dataset()->set_name("d");
  put.mutable_dataset()->mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  put.mutable_dataset()->mutable_spec()->set_length(50000);
  put.set_region("r");
  put.set_offset(4 * 100);
  v1::PutDatasetResponse uploaded;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = regions_->PutDatasetFromRegion(&ctx, put, &uploaded);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(uploaded.dataset().length(), 50000u);
  // The dataset is a copy: the region can go, and the object change.
  ASSERT_TRUE(Unregister("r").ok());
  std::memset(object->bytes().data(), 0, object->size());
  v1::AggregateDatasetRequest q;
  q.set_name("d");
  for (const auto& op : AllOps()) *q.add_aggregations() = op;
  v1::AggregateResponse got, want;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->AggregateDataset(&ctx, q, &got).ok());
  }
  std::vector<v1::AggregateStreamRequest> msgs = {Header(v1::DTYPE_FLOAT32, 50000, AllOps())};
  msgs.push_back(Chunk(Bytes(v).substr(400, 50000 * 4)));
  ASSERT_TRUE(Stream(msgs, &want).ok());
  ASSERT_EQ(got.results_size(), want.results_size());
  for (int i = 0; i < got.results_size(); ++i) {
    EXPECT_EQ(got.results(i).SerializeAsString(), want.results(i).SerializeAsString()) << "result " << i;
  }
}

TEST_F(RegionTest, BadInputGetsItsOwnStatusAndTheServerCarriesOn) {
  const std::vector<float> v = RandomFloats(1024, 3);
  auto object = Object(Bytes(v));
  ASSERT_NE(object, nullptr);
  auto expect = [](const grpc::Status& s, grpc::StatusCode code, const std::string& says) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(says), std::string::npos) << s.error_message();
  };
  expect(RegisterHost("r", "/tally-no-such-object-" + std::to_string(getpid()), 0, 16), grpc::StatusCode::NOT_FOUND,
         "cannot open");
  expect(RegisterHost("r", "a/b", 0, 16), grpc::StatusCode::INVALID_ARGUMENT, "shm_name");
  expect(RegisterHost("r", "..", 0, 16), grpc::StatusCode::INVALID_ARGUMENT, "shm_name");
  expect(RegisterHost("r", object->name(), 0, 4097), grpc::StatusCode::INVALID_ARGUMENT, "past the end");
  expect(RegisterHost("r", object->name(), 4096, 1), grpc::StatusCode::INVALID_ARGUMENT, "past the end");
  expect(RegisterHost("", object->name(), 0, 16), grpc::StatusCode::INVALID_ARGUMENT, "name");
  ASSERT_TRUE(RegisterHost("r", object->name(), 0, 4096).ok());
  expect(RegisterHost("r", object->name(), 0, 16), grpc::StatusCode::ALREADY_EXISTS, "registered already");

  v1::AggregateResponse resp;
  expect(Query(RegionRequest("nope", 0, v1::DTYPE_FLOAT32, 4, {Op(v1::OP_SUM)}), &resp), grpc::StatusCode::NOT_FOUND,
         "no region");
  expect(Query(RegionRequest("r", 4, v1::DTYPE_FLOAT32, 1024, {Op(v1::OP_SUM)}), &resp),
         grpc::StatusCode::INVALID_ARGUMENT, "past the end");
  expect(Query(RegionRequest("r", 2, v1::DTYPE_FLOAT32, 4, {Op(v1::OP_SUM)}), &resp),
         grpc::StatusCode::INVALID_ARGUMENT, "multiple");
  expect(Query(RegionRequest("r", 0, v1::DTYPE_FLOAT32, 1024, {Op(v1::OP_SUM)}, 1000), &resp),
         grpc::StatusCode::INVALID_ARGUMENT, "row_length");
  expect(Query(RegionRequest("r", 0, v1::DTYPE_UNSPECIFIED, 4, {Op(v1::OP_SUM)}), &resp),
         grpc::StatusCode::INVALID_ARGUMENT, "dtype");
  v1::AggregateRegionRequest no_length = RegionRequest("r", 0, v1::DTYPE_FLOAT32, 4, {Op(v1::OP_SUM)});
  no_length.mutable_spec()->clear_length();
  expect(Query(no_length, &resp), grpc::StatusCode::INVALID_ARGUMENT, "spec.length");
  expect(Query(RegionRequest("r", 0, v1::DTYPE_FLOAT32, 4, {}), &resp), grpc::StatusCode::INVALID_ARGUMENT,
         "aggregation");

  v1::RegisterCudaRegionRequest cuda;
  cuda.set_name("c");
  cuda.set_ipc_handle(std::string(64, '\x01'));
  cuda.set_device(0);
  cuda.set_byte_size(16);
  v1::RegionInfo info;
  grpc::ClientContext ctx;
  expect(regions_->RegisterCudaRegion(&ctx, cuda, &info), grpc::StatusCode::FAILED_PRECONDITION,
         "host shared-memory region");
  expect(Unregister("nope"), grpc::StatusCode::NOT_FOUND, "no region");

  // After all that, the region still answers correctly.
  ASSERT_TRUE(Query(RegionRequest("r", 0, v1::DTYPE_FLOAT32, 1024, {Op(v1::OP_COUNT)}), &resp).ok());
  EXPECT_EQ(resp.results(0).uint64s().values(0), 1024u);
  EXPECT_EQ(List().regions_size(), 1);
}

TEST_F(RegionTest, RegisteredBytesAreBoundedByTheLimit) {
  ServerConfig config;
  config.max_region_bytes = 10000;
  Restart(config);
  auto object = Object(std::string(8192, '\0'));
  ASSERT_NE(object, nullptr);
  ASSERT_TRUE(RegisterHost("a", object->name(), 0, 6000).ok());
  const grpc::Status over = RegisterHost("b", object->name(), 0, 6000);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error_message().find("--max_region_bytes=10000"), std::string::npos) << over.error_message();
  ASSERT_TRUE(RegisterHost("b", object->name(), 0, 4000).ok());
  EXPECT_EQ(List().limit_bytes(), 10000u);
  ASSERT_TRUE(Unregister("a").ok());
  EXPECT_TRUE(RegisterHost("c", object->name(), 0, 6000).ok());

  // And the number of regions (each holds a descriptor and a mapping).
  ServerConfig few;
  few.max_regions = 2;
  Restart(few);
  ASSERT_TRUE(RegisterHost("a", object->name(), 0, 1).ok());
  ASSERT_TRUE(RegisterHost("b", object->name(), 0, 1).ok());
  const grpc::Status third = RegisterHost("c", object->name(), 0, 1);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(third.error_message().find("--max_regions=2"), std::string::npos) << third.error_message();
  ASSERT_TRUE(Unregister("a").ok());
  ASSERT_TRUE(RegisterHost("c", object->name(), 0, 1).ok());
}

TEST_F(RegionTest, ATruncatedObjectIsRefusedAndTheServerCarriesOn) {
  const std::vector<float> v = RandomFloats(1 << 20, 5);
  auto object = Object(Bytes(v));
  ASSERT_NE(object, nullptr);
  ASSERT_TRUE(RegisterHost("r", object->name(), 0, v.size() * 4).ok());
  const std::string shm = object->name();
  {
    const int fd = shm_open(shm.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    close(fd);
  }
  v1::AggregateResponse resp;
  const grpc::Status s = Query(RegionRequest("r", 0, v1::DTYPE_FLOAT32, v.size(), {Op(v1::OP_SUM)}), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("truncated"), std::string::npos) << s.error_message();
  // Every query of the region is refused now, even of bytes still inside
  // the object; and nothing else broke: other calls are served.
  EXPECT_EQ(Query(RegionRequest("r", 0, v1::DTYPE_FLOAT32, 16, {Op(v1::OP_SUM)}), &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  v1::AggregateRequest plain;
  plain.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  plain.set_data(Bytes(std::vector<float>{1, 2}));
  *plain.add_aggregations() = Op(v1::OP_SUM);
  ASSERT_TRUE(Unary(plain, &resp).ok());
  EXPECT_EQ(resp.results(0).doubles().values(0), 3.0);
  EXPECT_TRUE(Unregister("r").ok());
}

TEST_F(RegionTest, UnregisterUnderQueriesLetsThemFinishThenUnmaps) {
  const std::vector<float> v = RandomFloats(8 << 20, 11);  // 32 MiB: each query reads for a while
  auto object = Object(Bytes(v));
  ASSERT_NE(object, nullptr);
  ASSERT_TRUE(RegisterHost("r", object->name(), 0, v.size() * 4).ok());
  v1::AggregateResponse want;
  ASSERT_TRUE(Query(RegionRequest("r", 0, v1::DTYPE_FLOAT32, v.size(), {Op(v1::OP_SUM), Op(v1::OP_ARGMAX)}), &want).ok());

  // Four clients query until the name is gone; it goes while they run.
  std::atomic<int> answered{0}, gone{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        v1::AggregateResponse got;
        const grpc::Status s =
            Query(RegionRequest("r", 0, v1::DTYPE_FLOAT32, v.size(), {Op(v1::OP_SUM), Op(v1::OP_ARGMAX)}), &got);
        if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
          ++gone;
          return;
        }
        ASSERT_TRUE(s.ok()) << s.error_message();
        ++answered;
        if (got.results(0).SerializeAsString() != want.results(0).SerializeAsString() ||
            got.results(1).SerializeAsString() != want.results(1).SerializeAsString()) {
          ++wrong;
        }
      }
    });
  }
  while (Metric("tally_region_queries_total") < 9) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(Unregister("r").ok());
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(answered.load(), 4);
  EXPECT_EQ(gone.load(), 4);
  EXPECT_TRUE(MetricReaches("tally_region_bytes", 0));
  EXPECT_FALSE(ServerMaps(object->name()));
}

}  // namespace
}  // namespace tally::testing
