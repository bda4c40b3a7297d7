// Hostile uploads against a full dataset budget with LRU eviction: uploads
// that never land (cancelled, cut short, refused) evict nothing, a replace
// needs room for one version, and only an upload that arrives whole evicts,
// the least recently queried first, each eviction logged at warning.
#include <string>
#include <vector>

#include "tests/integration/hostile_fixture.h"

namespace tally::testing {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kO = DatasetStore::kOverheadBytes;  // what each dataset is charged beyond its bytes

class HostileDatasetTest : public HostileClientTest {
 protected:
  static v1::PutDatasetRequest PutHeader(const std::string& name, std::uint64_t bytes, bool replace = false) {
    v1::PutDatasetRequest m;
    m.mutable_header()->set_name(name);
    m.mutable_header()->mutable_spec()->set_dtype(v1::DTYPE_UINT8);
    m.mutable_header()->mutable_spec()->set_length(bytes);
    m.mutable_header()->set_replace(replace);
    return m;
  }
  static v1::PutDatasetRequest PutChunk(std::string bytes) {
    v1::PutDatasetRequest m;
    m.set_chunk(std::move(bytes));
    return m;
  }

  // Uploads `name`, declaring `declared` bytes and sending `sent` of them.
  grpc::Status Put(const std::string& name, std::uint64_t declared, std::uint64_t sent, bool replace = false) {
    grpc::ClientContext ctx;
    v1::PutDatasetResponse resp;
    auto writer = stub_->PutDataset(&ctx, &resp);
    bool open = writer->Write(PutHeader(name, declared, replace));
    for (std::uint64_t at = 0; open && at < sent; at += kMiB) {
      open = writer->Write(PutChunk(std::string(std::min(kMiB, sent - at), '\1')));
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Query(const std::string& name) {
    v1::AggregateDatasetRequest r;
    r.set_name(name);
    *r.add_aggregations() = Op(v1::OP_SUM);
    v1::AggregateResponse resp;
    grpc::ClientContext ctx;
    return stub_->AggregateDataset(&ctx, r, &resp);
  }

  std::vector<std::string> Names() {
    v1::ListDatasetsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->ListDatasets(&ctx, v1::ListDatasetsRequest(), &resp).ok());
    std::vector<std::string> names;
    for (const v1::DatasetInfo& d : resp.datasets()) names.push_back(d.name());
    return names;
  }
};

TEST_F(HostileDatasetTest, UploadsThatNeverLandEvictNothing) {
  LogCapture& log = CaptureLog();
  ServerConfig config;
  config.datasets.max_bytes_per_place = 6 * kMiB + 6 * kO;  // six 1 MiB datasets
  config.datasets.evict_lru = true;
  Start(config);
  const std::vector<std::string> six{"d0", "d1", "d2", "d3", "d4", "d5"};
  for (const std::string& name : six) ASSERT_TRUE(Put(name, kMiB, kMiB).ok()) << name;
  ASSERT_EQ(Names(), six);

  // Declares the whole budget, sends 8 bytes and cancels.
  {
    grpc::ClientContext ctx;
    v1::PutDatasetResponse resp;
    auto writer = stub_->PutDataset(&ctx, &resp);
    ASSERT_TRUE(writer->Write(PutHeader("cancelled", 6 * kMiB)));
    ASSERT_TRUE(writer->Write(PutChunk(std::string(8, '\1'))));
    ASSERT_TRUE(MetricReaches("tally_dataset_resident_bytes", 12 * kMiB + 7 * kO)) << Metric("tally_dataset_resident_bytes");
    ctx.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_EQ(Names(), six);
  // The server lets go of an abandoned upload's bytes just after it answers.
  ASSERT_TRUE(MetricReaches("tally_dataset_resident_bytes", 6 * kMiB + 6 * kO)) << Metric("tally_dataset_resident_bytes");
  // Cut short: declares 4 MiB, sends 2 MiB and ends.
  EXPECT_EQ(Put("short", 4 * kMiB, 2 * kMiB).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Names(), six);
  ASSERT_TRUE(MetricReaches("tally_dataset_resident_bytes", 6 * kMiB + 6 * kO)) << Metric("tally_dataset_resident_bytes");

  // Refused while another upload holds the budget: neither evicts.
  {
    grpc::ClientContext ctx;
    v1::PutDatasetResponse resp;
    auto writer = stub_->PutDataset(&ctx, &resp);
    ASSERT_TRUE(writer->Write(PutHeader("holding", 6 * kMiB)));
    ASSERT_TRUE(writer->Write(PutChunk(std::string(8, '\1'))));
    ASSERT_TRUE(MetricReaches("tally_dataset_resident_bytes", 12 * kMiB + 7 * kO)) << Metric("tally_dataset_resident_bytes");
    const grpc::Status refused = Put("refused", 2 * kMiB, 2 * kMiB);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
    EXPECT_NE(refused.error_message().find("in uploads in progress"), std::string::npos) << refused.error_message();
    EXPECT_EQ(refused.error_message().find("still being read"), std::string::npos) << refused.error_message();
    ctx.TryCancel();
    writer->Finish();
  }
  EXPECT_EQ(Names(), six);
  ASSERT_TRUE(MetricReaches("tally_dataset_resident_bytes", 6 * kMiB + 6 * kO)) << Metric("tally_dataset_resident_bytes");
  EXPECT_EQ(Metric("tally_dataset_evictions_total"), 0);
  EXPECT_TRUE(log.Lines("evicted").empty());

  // A same-size replace at a full budget takes the old version's room.
  ASSERT_TRUE(Query("d0").ok());
  ASSERT_TRUE(Put("d1", kMiB, kMiB, /*replace=*/true).ok());
  EXPECT_EQ(Names(), six);
  EXPECT_EQ(Metric("tally_dataset_evictions_total"), 0);

  // An upload that arrives whole evicts, at its commit, the least recently
  // queried: d0 was queried and d1 replaced, so d2 and d3 go.
  ASSERT_TRUE(Put("new", 2 * kMiB, 2 * kMiB).ok());
  EXPECT_EQ(Names(), (std::vector<std::string>{"d0", "d1", "d4", "d5", "new"}));
  EXPECT_EQ(Metric("tally_dataset_evictions_total"), 2);
  for (const std::string name : {"d2", "d3"}) {
    const std::vector<std::string> lines = log.Lines("dataset '" + name + "' evicted", spdlog::level::warn);
    ASSERT_EQ(lines.size(), 1u) << name;
    EXPECT_NE(lines[0].find("to make room for the upload of 'new'"), std::string::npos) << lines[0];
  }
  EXPECT_TRUE(MetricReaches("tally_dataset_resident_bytes", 6 * kMiB + 5 * kO)) << Metric("tally_dataset_resident_bytes");
  EXPECT_EQ(hostile::WellBehavedClient(channel_, 4).failures, 0);
  ExpectNothingHeld();
}

TEST_F(HostileDatasetTest, ManyTinyDatasetsAreBoundedByCountAndOverhead) {
  // Under a 1 MiB budget, one-byte (and empty) datasets were free: 75,000
  // of them fit and took 338 MiB. Each is now charged what it costs.
  ServerConfig config;
  config.datasets.max_bytes_per_place = kMiB;
  config.quotas.dataset_bytes = kMiB / 2;
  config.quotas.datasets = 64;
  config.datasets.max_datasets = 300;
  Start(config);
  auto fill = [&](const std::string& prefix, int tries, grpc::Status* refusal) {
    int made = 0;
    for (int i = 0; i < tries; ++i) {
      const grpc::Status s = Put(prefix + std::to_string(i), i % 2, i % 2);  // empty and one-byte
      if (s.ok()) {
        ++made;
      } else {
        *refusal = s;
        break;
      }
    }
    return made;
  };
  // --quota_datasets first: 64 datasets of one identity.
  grpc::Status refusal;
  EXPECT_EQ(fill("q", 1000, &refusal), 64);
  EXPECT_EQ(refusal.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refusal.error_message().find("--quota_datasets"), std::string::npos) << refusal.error_message();
  // Then --quota_dataset_bytes: the overhead counts, and empty datasets
  // are not free.
  Start([&] {
    ServerConfig c = config;
    c.quotas.datasets = 0;
    return c;
  }());
  EXPECT_EQ(fill("b", 1000, &refusal), static_cast<int>(kMiB / 2 / (kO + 1)));
  EXPECT_NE(refusal.error_message().find("--quota_dataset_bytes"), std::string::npos) << refusal.error_message();
  // Then --max_dataset_bytes for everyone (no quotas), and --max_datasets.
  Start([&] {
    ServerConfig c = config;
    c.quotas = {};
    return c;
  }());
  const int under_budget = fill("m", 1000, &refusal);
  EXPECT_EQ(under_budget, static_cast<int>(kMiB / (kO + 1)));
  EXPECT_NE(refusal.error_message().find("--max_dataset_bytes"), std::string::npos) << refusal.error_message();
  Start([&] {
    ServerConfig c = config;
    c.quotas = {};
    c.datasets.max_bytes_per_place = 0;
    return c;
  }());
  EXPECT_EQ(fill("n", 1000, &refusal), 300);
  EXPECT_NE(refusal.error_message().find("--max_datasets=300"), std::string::npos) << refusal.error_message();
  EXPECT_EQ(hostile::WellBehavedClient(channel_, 4).failures, 0);
  ExpectNothingHeld();
}

}  // namespace
}  // namespace tally::testing
