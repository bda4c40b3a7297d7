// End-to-end tests of the gRPC front end over loopback: answers, the unary
// and streaming paths agreeing bit for bit, health and reflection.
#include <cmath>
#include <thread>

#include "google/protobuf/util/message_differencer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server_fixture.h"

namespace tally::testing {
namespace {

using google::protobuf::util::MessageDifferencer;

std::vector<v1::Aggregation> ManyOps() {
  v1::Aggregation var = Op(v1::OP_VARIANCE);
  var.set_ddof(1);
  return {Op(v1::OP_SUM),    Op(v1::OP_MIN),    Op(v1::OP_MAX),    Op(v1::OP_MEAN),
          Op(v1::OP_COUNT),  Op(v1::OP_SUM_SQUARES), var,          Op(v1::OP_STDDEV),
          Op(v1::OP_ARGMIN), Op(v1::OP_ARGMAX), Hist(64, -1, 1)};
}

v1::AggregateRequest UnaryRequest(v1::DType dtype, std::string data, const std::vector<v1::Aggregation>& ops,
                                  std::uint64_t row_length = 0) {
  v1::AggregateRequest req;
  req.mutable_spec()->set_dtype(dtype);
  req.mutable_spec()->set_row_length(row_length);
  req.set_data(std::move(data));
  for (const auto& op : ops) *req.add_aggregations() = op;
  return req;
}

// Results only: the execution block holds timings, which differ per call.
void ExpectSameResults(const v1::AggregateResponse& a, const v1::AggregateResponse& b) {
  ASSERT_EQ(a.results_size(), b.results_size());
  for (int i = 0; i < a.results_size(); ++i) {
    // Bitwise: compare serialized bytes (NaN != NaN under ==).
    EXPECT_EQ(a.results(i).SerializeAsString(), b.results(i).SerializeAsString())
        << "result " << i << ":\n" << a.results(i).DebugString() << "vs\n" << b.results(i).DebugString();
  }
}

TEST_F(ServerFixture, UnaryAnswersKnownValues) {
  const std::vector<double> x = {3.0, -1.5, 2.0, -1.5, 7.25, 0.5};
  v1::AggregateResponse resp;
  ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_FLOAT64, Bytes(x),
                                 {Op(v1::OP_SUM), Op(v1::OP_MIN), Op(v1::OP_ARGMIN), Op(v1::OP_ARGMAX),
                                  Op(v1::OP_COUNT), Op(v1::OP_MEAN), Hist(4, -2, 8)}),
                    &resp)
                  .ok());
  ASSERT_EQ(resp.results_size(), 7);
  EXPECT_EQ(resp.results(0).doubles().values(0), 9.75);
  EXPECT_EQ(resp.results(1).doubles().values(0), -1.5);
  EXPECT_EQ(resp.results(2).int64s().values(0), 1);  // first of the tied minima
  EXPECT_EQ(resp.results(3).int64s().values(0), 4);
  EXPECT_EQ(resp.results(4).uint64s().values(0), 6u);
  EXPECT_DOUBLE_EQ(resp.results(5).doubles().values(0), 9.75 / 6);
  const v1::Histogram& h = resp.results(6).histograms().histograms(0);  // edges -2, 0.5, 3, 5.5, 8
  ASSERT_EQ(h.counts_size(), 4);
  EXPECT_EQ(h.counts(0), 2u);
  EXPECT_EQ(h.counts(1), 2u);  // 0.5 sits on an edge: it opens bin 1
  EXPECT_EQ(h.counts(2), 1u);  // 3.0 likewise opens bin 2
  EXPECT_EQ(h.counts(3), 1u);
  EXPECT_EQ(resp.execution().elements(), 6u);
  EXPECT_EQ(resp.execution().bytes(), 48u);
  EXPECT_EQ(resp.execution().backend(), "cpu");
  EXPECT_FALSE(resp.execution().device().empty());
  EXPECT_GE(resp.execution().server_seconds(), 0.0);
}

TEST_F(ServerFixture, StreamMatchesUnaryBitForBitWhateverTheChunking) {
  const std::vector<float> x = RandomFloats(100003, 7);
  const std::string bytes = Bytes(x);
  v1::AggregateResponse unary;
  ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_FLOAT32, bytes, ManyOps()), &unary).ok());
  // Chunks that split elements (1, 7 bytes), small, and large.
  for (std::size_t chunk : {std::size_t{1} << 20, std::size_t{4096}, std::size_t{7}, std::size_t{1}}) {
    if (chunk == 1) {
      // One byte per message is slow; a prefix is enough to cover splitting.
      std::vector<float> small(x.begin(), x.begin() + 3001);
      v1::AggregateResponse u, s;
      ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_FLOAT32, Bytes(small), ManyOps()), &u).ok());
      auto msgs = Chunks(Bytes(small), 1);
      msgs.insert(msgs.begin(), Header(v1::DTYPE_FLOAT32, small.size(), ManyOps()));
      grpc::Status st = Stream(msgs, &s);
      ASSERT_TRUE(st.ok()) << st.error_message();
      ExpectSameResults(u, s);
      continue;
    }
    auto msgs = Chunks(bytes, chunk);
    msgs.insert(msgs.begin(), Header(v1::DTYPE_FLOAT32, x.size(), ManyOps()));
    v1::AggregateResponse streamed;
    grpc::Status st = Stream(msgs, &streamed);
    ASSERT_TRUE(st.ok()) << "chunk " << chunk << ": " << st.error_message();
    ExpectSameResults(unary, streamed);
  }
}

TEST_F(ServerFixture, SameRequestGivesTheSameAnswerEveryTime) {
  const std::string bytes = Bytes(RandomFloats(1 << 20, 11));
  v1::AggregateResponse first;
  ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_FLOAT32, bytes, ManyOps()), &first).ok());
  for (int i = 0; i < 5; ++i) {
    v1::AggregateResponse again;
    ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_FLOAT32, bytes, ManyOps()), &again).ok());
    ExpectSameResults(first, again);
  }
}

TEST_F(ServerFixture, SegmentedRowsOverTheWire) {
  std::vector<std::int32_t> x(6 * 5);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::int32_t>((i * 7919) % 23) - 11;
  v1::AggregateResponse resp;
  ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_INT32, Bytes(x), {Op(v1::OP_SUM), Op(v1::OP_ARGMAX)}, 5), &resp).ok());
  ASSERT_EQ(resp.results(0).int64s().values_size(), 6);
  for (int r = 0; r < 6; ++r) {
    std::int64_t sum = 0;
    int arg = 0;
    for (int c = 0; c < 5; ++c) {
      sum += x[r * 5 + c];
      if (x[r * 5 + c] > x[r * 5 + arg]) arg = c;
    }
    EXPECT_EQ(resp.results(0).int64s().values(r), sum) << "row " << r;
    EXPECT_EQ(resp.results(1).int64s().values(r), arg) << "row " << r;
  }
  EXPECT_EQ(resp.execution().rows(), 6u);
}

TEST_F(ServerFixture, LargeStreamPausesReadingAndStillAgrees) {
  // 48 MiB in 1 MiB chunks: more chunks than the server queues, so reading
  // pauses and resumes many times.
  const std::vector<float> x = RandomFloats(std::size_t{12} << 20, 3);
  const std::string bytes = Bytes(x);
  v1::AggregateResponse unary, streamed;
  ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_FLOAT32, bytes, ManyOps()), &unary).ok());
  auto msgs = Chunks(bytes, 1 << 20);
  msgs.insert(msgs.begin(), Header(v1::DTYPE_FLOAT32, x.size(), ManyOps()));
  ASSERT_TRUE(Stream(msgs, &streamed).ok());
  ExpectSameResults(unary, streamed);
  EXPECT_EQ(streamed.execution().bytes(), bytes.size());
}

TEST_F(ServerFixture, HealthServiceSaysServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "tally.v1.Aggregator"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
}

TEST_F(ServerFixture, NullBackendAnswersWithTheRightShape) {
  ServerConfig config;
  config.backend.kind = "null";
  server_.reset();
  StartServer(config);
  v1::AggregateResponse resp;
  ASSERT_TRUE(Unary(UnaryRequest(v1::DTYPE_FLOAT32, Bytes(RandomFloats(64, 1)),
                                 {Op(v1::OP_SUM), Op(v1::OP_ARGMAX), Hist(16, 0, 1)}, 16),
                    &resp)
                  .ok());
  EXPECT_EQ(resp.execution().backend(), "null");
  EXPECT_EQ(resp.results(0).doubles().values_size(), 4);
  EXPECT_EQ(resp.results(1).int64s().values_size(), 4);
  ASSERT_EQ(resp.results(2).histograms().histograms_size(), 4);
  EXPECT_EQ(resp.results(2).histograms().histograms(0).counts_size(), 16);
}

}  // namespace
}  // namespace tally::testing
