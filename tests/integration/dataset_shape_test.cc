// Datasets keep their shape: an upload with a row length records it, its
// queries are cut into those rows unless they say otherwise, and
// ListDatasets and DescribeDataset report it.
#include <random>

#include "tests/integration/server_fixture.h"

namespace tally::testing {
namespace {

class DatasetShapeTest : public ServerFixture {
 protected:
  grpc::Status Put(const std::string& name, const std::string& bytes, std::uint64_t length,
                   std::uint64_t row_length, bool replace = false) {
    grpc::ClientContext ctx;
    v1::PutDatasetResponse resp;
    auto writer = stub_->PutDataset(&ctx, &resp);
    v1::PutDatasetRequest header;
    header.mutable_header()->set_name(name);
    header.mutable_header()->set_replace(replace);
    header.mutable_header()->mutable_spec()->set_dtype(v1::DTYPE_INT32);
    header.mutable_header()->mutable_spec()->set_length(length);
    header.mutable_header()->mutable_spec()->set_row_length(row_length);
    v1::PutDatasetRequest chunk;
    chunk.set_chunk(bytes);
    if (writer->Write(header)) writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  }

  static std::vector<v1::Aggregation> Ops() { return {Op(v1::OP_SUM), Op(v1::OP_ARGMAX), Op(v1::OP_MIN)}; }

  // The dataset's answer, serialized, with the rows it reports.
  grpc::Status Query(const v1::AggregateDatasetRequest& r, std::string* results, std::uint64_t* rows = nullptr) {
    v1::AggregateResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->AggregateDataset(&ctx, r, &resp);
    results->clear();
    for (const v1::AggregationResult& result : resp.results()) *results += result.SerializeAsString();
    if (rows != nullptr) *rows = resp.execution().rows();
    return s;
  }

  // AggregateStream's answer over the same bytes, cut into rows of `rows`.
  std::string Streamed(const std::string& bytes, std::uint64_t rows) {
    v1::AggregateResponse resp;
    std::vector<v1::AggregateStreamRequest> msgs = {Header(v1::DTYPE_INT32, bytes.size() / 4, Ops(), rows)};
    msgs.push_back(Chunk(bytes));
    EXPECT_TRUE(Stream(msgs, &resp).ok());
    std::string out;
    for (const v1::AggregationResult& result : resp.results()) out += result.SerializeAsString();
    return out;
  }

  static v1::AggregateDatasetRequest Request(const std::string& name) {
    v1::AggregateDatasetRequest r;
    r.set_name(name);
    for (const v1::Aggregation& op : Ops()) *r.add_aggregations() = op;
    return r;
  }
};

TEST_F(DatasetShapeTest, QueriesDefaultToTheRowsTheDatasetWasUploadedIn) {
  std::mt19937 rng(std::random_device{}());
  std::vector<std::int32_t> m(40 * 25);
  for (std::int32_t& x : m) x = static_cast<std::int32_t>(rng() % 2001) - 1000;
  const std::string bytes = Bytes(m);
  ASSERT_TRUE(Put("m", bytes, m.size(), 25).ok());

  grpc::ClientContext ctx;
  v1::DescribeDatasetRequest describe;
  describe.set_name("m");
  v1::DatasetInfo info;
  ASSERT_TRUE(stub_->DescribeDataset(&ctx, describe, &info).ok());
  EXPECT_EQ(info.row_length(), 25u);
  grpc::ClientContext list_ctx;
  v1::ListDatasetsResponse list;
  ASSERT_TRUE(stub_->ListDatasets(&list_ctx, v1::ListDatasetsRequest(), &list).ok());
  EXPECT_EQ(list.datasets(0).row_length(), 25u);

  std::string got;
  std::uint64_t rows = 0;
  ASSERT_TRUE(Query(Request("m"), &got, &rows).ok());
  EXPECT_EQ(rows, 40u);
  EXPECT_EQ(got, Streamed(bytes, 25));

  v1::AggregateDatasetRequest flat = Request("m");
  flat.set_row_length(0);  // one answer over every element
  ASSERT_TRUE(Query(flat, &got, &rows).ok());
  EXPECT_EQ(rows, 1u);
  EXPECT_EQ(got, Streamed(bytes, 0));

  v1::AggregateDatasetRequest fives = Request("m");
  fives.set_row_length(5);  // a query's own row length still goes
  ASSERT_TRUE(Query(fives, &got, &rows).ok());
  EXPECT_EQ(rows, 200u);
  EXPECT_EQ(got, Streamed(bytes, 5));

  v1::AggregateDatasetRequest whole_rows = Request("m");
  whole_rows.mutable_range()->set_begin(250);
  whole_rows.mutable_range()->set_end(500);
  ASSERT_TRUE(Query(whole_rows, &got, &rows).ok());
  EXPECT_EQ(rows, 10u);
  EXPECT_EQ(got, Streamed(bytes.substr(250 * 4, 250 * 4), 25));

  v1::AggregateDatasetRequest split_rows = Request("m");
  split_rows.mutable_range()->set_begin(10);
  split_rows.mutable_range()->set_end(60);
  const grpc::Status refused = Query(split_rows, &got);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("range"), std::string::npos) << refused.error_message();
  EXPECT_NE(refused.error_message().find("25 elements"), std::string::npos) << refused.error_message();

  v1::AggregateDatasetRequest segments = Request("m");
  const std::vector<std::int64_t> offsets{0, 300, 1000};
  segments.set_offsets(Bytes(offsets));
  ASSERT_TRUE(Query(segments, &got, &rows).ok());
  EXPECT_EQ(rows, 2u);  // the query's segments, not the dataset's rows

  // A replace with no rows: queries answer once again.
  ASSERT_TRUE(Put("m", bytes, m.size(), 0, /*replace=*/true).ok());
  ASSERT_TRUE(Query(Request("m"), &got, &rows).ok());
  EXPECT_EQ(rows, 1u);
}

TEST_F(DatasetShapeTest, ARowLengthThatDoesNotDivideTheLengthIsRefused) {
  const grpc::Status s = Put("bad", std::string(4000, '\0'), 1000, 7);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("header.spec.row_length"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("1000"), std::string::npos) << s.error_message();
  grpc::ClientContext ctx;
  v1::DescribeDatasetRequest describe;
  describe.set_name("bad");
  v1::DatasetInfo info;
  EXPECT_EQ(stub_->DescribeDataset(&ctx, describe, &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace tally::testing
