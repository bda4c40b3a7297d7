// Resident datasets over gRPC on the cpu backend: the answers equal
// AggregateStream's on the same bytes (bitwise: the cpu backend cuts host
// bytes at fixed places however they arrive), and every bad input gets its
// own status, leaving nothing behind.
#include <thread>

#include "tests/integration/server_fixture.h"

namespace tally::testing {
namespace {

class DatasetTest : public ServerFixture {
 protected:
  static v1::PutDatasetRequest PutHeader(const std::string& name, v1::DType dtype, std::uint64_t length,
                                         bool replace = false, double ttl = 0) {
    v1::PutDatasetRequest m;
    auto* h = m.mutable_header();
    h->set_name(name);
    h->mutable_spec()->set_dtype(dtype);
    h->mutable_spec()->set_length(length);
    h->set_replace(replace);
    h->set_ttl_seconds(ttl);
    return m;
  }
  static v1::PutDatasetRequest PutChunk(std::string bytes) {
    v1::PutDatasetRequest m;
    m.set_chunk(std::move(bytes));
    return m;
  }

  grpc::Status Put(const v1::PutDatasetRequest& header, const std::string& bytes, std::size_t chunk,
                   v1::PutDatasetResponse* resp) {
    grpc::ClientContext ctx;
    auto writer = stub_->PutDataset(&ctx, resp);
    bool open = writer->Write(header);
    for (std::size_t at = 0; open && at < bytes.size(); at += chunk) open = writer->Write(PutChunk(bytes.substr(at, chunk)));
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Query(const v1::AggregateDatasetRequest& req, v1::AggregateResponse* resp) {
    grpc::ClientContext ctx;
    return stub_->AggregateDataset(&ctx, req, resp);
  }

  static v1::AggregateDatasetRequest Request(const std::string& name, const std::vector<v1::Aggregation>& ops) {
    v1::AggregateDatasetRequest r;
    r.set_name(name);
    for (const auto& op : ops) *r.add_aggregations() = op;
    return r;
  }

  std::vector<v1::Aggregation> AllOps() {
    return {Op(v1::OP_SUM), Op(v1::OP_MIN),      Op(v1::OP_MAX),    Op(v1::OP_MEAN),   Op(v1::OP_COUNT),
            Op(v1::OP_SUM_SQUARES), Op(v1::OP_VARIANCE), Op(v1::OP_ARGMIN), Op(v1::OP_ARGMAX), Hist(64, -0.9, 0.8)};
  }
};

TEST_F(DatasetTest, QueriesEqualTheStreamedAnswerOnRangesAndRows) {
  const std::vector<float> v = RandomFloats(300007, std::random_device{}());
  const std::string bytes = Bytes(v);
  v1::PutDatasetResponse put;
  ASSERT_TRUE(Put(PutHeader("data", v1::DTYPE_FLOAT32, v.size()), bytes, 65537, &put).ok());
  EXPECT_EQ(put.dataset().name(), "data");
  EXPECT_EQ(put.dataset().bytes(), bytes.size());
  EXPECT_EQ(put.dataset().place(), "host");

  struct Case { std::uint64_t begin, end, rows; };
  for (const Case c : {Case{0, v.size(), 0}, Case{17, 250017, 1000}, Case{5, 5 + 3 * 7, 7}, Case{9, 9, 0}}) {
    SCOPED_TRACE(::testing::Message() << "range [" << c.begin << ", " << c.end << ") rows " << c.rows);
    std::vector<v1::Aggregation> ops = AllOps();
    if (c.begin == c.end) ops = {Op(v1::OP_SUM), Op(v1::OP_COUNT), Hist(4, 0, 1)};
    v1::AggregateDatasetRequest req = Request("data", ops);
    req.mutable_range()->set_begin(c.begin);
    req.mutable_range()->set_end(c.end);
    req.set_row_length(c.rows);
    v1::AggregateResponse got, want;
    ASSERT_TRUE(Query(req, &got).ok());
    const std::string part = bytes.substr(c.begin * 4, (c.end - c.begin) * 4);
    std::vector<v1::AggregateStreamRequest> msgs = {Header(v1::DTYPE_FLOAT32, c.end - c.begin, ops, c.rows)};
    for (auto& m : Chunks(part, 4099)) msgs.push_back(m);
    ASSERT_TRUE(Stream(msgs, &want).ok());
    ASSERT_EQ(got.results_size(), want.results_size());
    for (int i = 0; i < got.results_size(); ++i) {
      EXPECT_EQ(got.results(i).SerializeAsString(), want.results(i).SerializeAsString()) << "result " << i;
    }
    EXPECT_EQ(got.execution().elements(), c.end - c.begin);
  }
}

TEST_F(DatasetTest, ListDescribeDelete) {
  v1::PutDatasetResponse put;
  const std::vector<float> v = RandomFloats(1000, 1);
  ASSERT_TRUE(Put(PutHeader("b", v1::DTYPE_FLOAT32, v.size(), false, 3600), Bytes(v), 1000, &put).ok());
  ASSERT_TRUE(Put(PutHeader("a", v1::DTYPE_FLOAT32, v.size()), Bytes(v), 1000, &put).ok());
  grpc::ClientContext c1;
  v1::ListDatasetsResponse list;
  ASSERT_TRUE(stub_->ListDatasets(&c1, v1::ListDatasetsRequest(), &list).ok());
  ASSERT_EQ(list.datasets_size(), 2);
  EXPECT_EQ(list.datasets(0).name(), "a");
  EXPECT_EQ(list.datasets(1).name(), "b");
  EXPECT_GT(list.datasets(1).expires_unix_seconds(), list.datasets(1).created_unix_seconds() + 3599);
  ASSERT_EQ(list.places_size(), 1);
  EXPECT_EQ(list.places(0).bytes(), 8000u + 2 * DatasetStore::kOverheadBytes);  // two datasets
  grpc::ClientContext c2;
  v1::DescribeDatasetRequest d;
  d.set_name("a");
  v1::DatasetInfo info;
  ASSERT_TRUE(stub_->DescribeDataset(&c2, d, &info).ok());
  EXPECT_EQ(info.length(), 1000u);
  grpc::ClientContext c3;
  v1::DeleteDatasetRequest del;
  del.set_name("a");
  v1::DeleteDatasetResponse gone;
  ASSERT_TRUE(stub_->DeleteDataset(&c3, del, &gone).ok());
  grpc::ClientContext c4;
  EXPECT_EQ(stub_->DeleteDataset(&c4, del, &gone).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::AggregateResponse r;
  EXPECT_EQ(Query(Request("a", {Op(v1::OP_SUM)}), &r).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(DatasetTest, BadInputGetsItsOwnStatusAndLeavesNothing) {
  const std::vector<float> v = RandomFloats(1000, 2);
  const std::string bytes = Bytes(v);
  v1::PutDatasetResponse put;
  struct Case { const char* what; grpc::Status st; grpc::StatusCode code; const char* says; };
  std::vector<Case> cases = {
      {"ends early", Put(PutHeader("x", v1::DTYPE_FLOAT32, 1000), bytes.substr(0, 3000), 1000, &put),
       grpc::StatusCode::INVALID_ARGUMENT, "ended early"},
      {"too many bytes", Put(PutHeader("x", v1::DTYPE_FLOAT32, 999), bytes, 1000, &put),
       grpc::StatusCode::INVALID_ARGUMENT, "more than"},
      {"empty name", Put(PutHeader("", v1::DTYPE_FLOAT32, 1000), bytes, 1000, &put),
       grpc::StatusCode::INVALID_ARGUMENT, "header.name"},
      {"long name", Put(PutHeader(std::string(300, 'n'), v1::DTYPE_FLOAT32, 1000), bytes, 1000, &put),
       grpc::StatusCode::INVALID_ARGUMENT, "256"},
      {"unprintable name", Put(PutHeader("a\nb", v1::DTYPE_FLOAT32, 1000), bytes, 1000, &put),
       grpc::StatusCode::INVALID_ARGUMENT, "printable"},
      {"no dtype", Put(PutHeader("x", v1::DTYPE_UNSPECIFIED, 1000), bytes, 1000, &put),
       grpc::StatusCode::INVALID_ARGUMENT, "dtype"},
      {"negative ttl", Put(PutHeader("x", v1::DTYPE_FLOAT32, 1000, false, -1), bytes, 1000, &put),
       grpc::StatusCode::INVALID_ARGUMENT, "ttl_seconds"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.st.error_code(), c.code) << c.what << ": " << c.st.error_message();
    EXPECT_NE(c.st.error_message().find(c.says), std::string::npos) << c.what << ": " << c.st.error_message();
  }
  grpc::ClientContext lc;
  v1::ListDatasetsResponse list;
  ASSERT_TRUE(stub_->ListDatasets(&lc, v1::ListDatasetsRequest(), &list).ok());
  EXPECT_EQ(list.datasets_size(), 0);

  ASSERT_TRUE(Put(PutHeader("x", v1::DTYPE_FLOAT32, 1000), bytes, 1000, &put).ok());
  grpc::Status again = Put(PutHeader("x", v1::DTYPE_FLOAT32, 1000), bytes, 1000, &put);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::ALREADY_EXISTS) << again.error_message();
  v1::AggregateResponse r;
  v1::AggregateDatasetRequest out_of_range = Request("x", {Op(v1::OP_SUM)});
  out_of_range.mutable_range()->set_begin(10);
  out_of_range.mutable_range()->set_end(1001);
  grpc::Status st = Query(out_of_range, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("range"), std::string::npos) << st.error_message();
  v1::AggregateDatasetRequest rows = Request("x", {Op(v1::OP_SUM)});
  rows.set_row_length(7);
  st = Query(rows, &r);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("row_length"), std::string::npos) << st.error_message();
  EXPECT_EQ(Query(Request("x", {}), &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Query(Request("x", {Op(v1::OP_SUM)}), &r).ok());  // the server carries on
}

TEST_F(DatasetTest, ReplaceUnderConcurrentQueriesNeverMixesVersions) {
  // Version k is k everywhere: every query must see one constant array.
  const std::uint64_t n = 200000;
  auto constant = [&](int k) { return Bytes(std::vector<std::int32_t>(n, k)); };
  v1::PutDatasetResponse put;
  ASSERT_TRUE(Put(PutHeader("v", v1::DTYPE_INT32, n), constant(0), 65536, &put).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, ok{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        v1::AggregateResponse r;
        if (!Query(Request("v", {Op(v1::OP_MIN), Op(v1::OP_MAX)}), &r).ok()) {
          ++bad;
          continue;
        }
        if (r.results(0).int64s().values(0) != r.results(1).int64s().values(0)) ++bad;
        ++ok;
      }
    });
  }
  for (int k = 1; k <= 8; ++k) {
    v1::PutDatasetResponse p;
    ASSERT_TRUE(Put(PutHeader("v", v1::DTYPE_INT32, n, true), constant(k), 65536, &p).ok());
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(ok.load(), 0);
  v1::AggregateResponse r;
  ASSERT_TRUE(Query(Request("v", {Op(v1::OP_MAX)}), &r).ok());
  EXPECT_EQ(r.results(0).int64s().values(0), 8);
}

}  // namespace
}  // namespace tally::testing
