// Deadlines, cancellation and draining: the server stops work it no longer
// owes anyone, and finishes what it does owe before it exits.
#include <chrono>
#include <future>
#include <numeric>
#include <thread>

#include "server_fixture.h"

namespace tally::testing {
namespace {

using namespace std::chrono_literals;

TEST_F(ServerFixture, StreamPastItsDeadlineIsStoppedAndTheServerCarriesOn) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 300ms);
  v1::AggregateResponse resp;
  auto writer = stub_->AggregateStream(&ctx, &resp);
  ASSERT_TRUE(writer->Write(Header(v1::DTYPE_FLOAT32, 1 << 20, {Op(v1::OP_SUM)})));
  ASSERT_TRUE(writer->Write(Chunk(Bytes(RandomFloats(1024, 1)))));
  std::this_thread::sleep_for(600ms);  // the rest never comes in time
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

  v1::AggregateRequest req;
  req.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  req.set_data(Bytes(std::vector<float>{1, 2}));
  *req.add_aggregations() = Op(v1::OP_SUM);
  v1::AggregateResponse ok;
  ASSERT_TRUE(Unary(req, &ok).ok());
  EXPECT_EQ(ok.results(0).doubles().values(0), 3.0);
}

TEST_F(ServerFixture, CancelledStreamFreesTheServer) {
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    v1::AggregateResponse resp;
    auto writer = stub_->AggregateStream(&ctx, &resp);
    ASSERT_TRUE(writer->Write(Header(v1::DTYPE_FLOAT32, 1 << 24, {Op(v1::OP_SUM)})));
    writer->Write(Chunk(Bytes(RandomFloats(1 << 16, i))));
    ctx.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  v1::AggregateResponse resp;
  const std::string data = Bytes(std::vector<float>{5, 6});
  ASSERT_TRUE(Stream({Header(v1::DTYPE_FLOAT32, 2, {Op(v1::OP_SUM)}), Chunk(data)}, &resp).ok());
  EXPECT_EQ(resp.results(0).doubles().values(0), 11.0);
}

TEST_F(ServerFixture, DrainFinishesCallsInFlightAndRefusesNewOnes) {
  grpc::ClientContext ctx;
  v1::AggregateResponse resp;
  auto writer = stub_->AggregateStream(&ctx, &resp);
  const std::vector<float> x = RandomFloats(1 << 16, 9);
  ASSERT_TRUE(writer->Write(Header(v1::DTYPE_FLOAT32, x.size(), {Op(v1::OP_COUNT)})));
  ASSERT_TRUE(writer->Write(Chunk(Bytes(x).substr(0, 1000))));
  // Write() returning says only that the client took the bytes: the drain
  // must begin once the server holds the call, or there is nothing to wait for.
  ASSERT_TRUE(MetricReaches("tally_requests_in_flight", 1));

  auto drained = std::async(std::launch::async, [this] { server_->Drain(5s); });
  std::this_thread::sleep_for(200ms);  // the drain has begun

  // A new call is refused while the old one is still open.
  {
    grpc::ClientContext c2;
    c2.set_deadline(std::chrono::system_clock::now() + 2s);
    v1::AggregateRequest req;
    req.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
    req.set_data(Bytes(std::vector<float>{1}));
    *req.add_aggregations() = Op(v1::OP_SUM);
    v1::AggregateResponse r2;
    EXPECT_FALSE(stub_->Aggregate(&c2, req, &r2).ok());
  }
  // The call in flight completes normally.
  ASSERT_TRUE(writer->Write(Chunk(Bytes(x).substr(1000))));
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.results(0).uint64s().values(0), x.size());
  drained.get();
}

TEST_F(ServerFixture, OverTheInFlightBudgetARequestWaitsThenIsRefused) {
  ServerConfig config;
  config.service.max_inflight_bytes = 1 << 20;
  config.service.admission_wait = 200ms;
  server_.reset();
  StartServer(config);

  // A stream whose one large chunk holds the whole budget from its arrival
  // until the backend has worked through it, which 64 histograms of 65536
  // bins make take a while; and its results (16 bytes a value, each
  // histogram's counts and its three out-of-range counters) until it ends.
  const std::vector<float> x = RandomFloats(4 << 20, 4);
  const std::vector<v1::Aggregation> heavy(64, Hist(65536, -1, 1));
  grpc::ClientContext ctx;
  v1::AggregateResponse streamed;
  auto writer = stub_->AggregateStream(&ctx, &streamed);
  ASSERT_TRUE(writer->Write(Header(v1::DTYPE_FLOAT32, x.size(), heavy)));
  ASSERT_TRUE(writer->Write(Chunk(Bytes(x))));
  ASSERT_TRUE(MetricReaches("tally_in_flight_bytes", 4.0 * x.size() + 64.0 * (65536 + 3) * 16));

  v1::AggregateRequest req;
  req.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  req.set_data(Bytes(RandomFloats(1024, 5)));
  *req.add_aggregations() = Op(v1::OP_COUNT);
  v1::AggregateResponse resp;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status refused = Unary(req, &resp);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max_inflight_bytes"), std::string::npos) << refused.error_message();
  EXPECT_GE(waited, 150ms);  // it waited for room before giving up

  // Once the chunk is reduced and the call answered, its bytes are free again.
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  const v1::Histogram& h = streamed.results(63).histograms().histograms(0);
  EXPECT_EQ(std::accumulate(h.counts().begin(), h.counts().end(), std::uint64_t{0}) + h.below() + h.above(),
            x.size());
  EXPECT_TRUE(MetricReaches("tally_in_flight_bytes", 0));
  ASSERT_TRUE(Unary(req, &resp).ok());
  EXPECT_EQ(resp.results(0).uint64s().values(0), 1024u);
}

TEST_F(ServerFixture, AStreamTakesNothingUntilItsFirstChunk) {
  // Empty arrays have no chunk to start the backend with: it starts at the end.
  v1::AggregateResponse resp;
  ASSERT_TRUE(Stream({Header(v1::DTYPE_INT32, 0, {Op(v1::OP_SUM), Op(v1::OP_COUNT)})}, &resp).ok());
  EXPECT_EQ(resp.results(0).int64s().values(0), 0);
  EXPECT_EQ(resp.results(1).uint64s().values(0), 0u);
  ASSERT_TRUE(Stream({Header(v1::DTYPE_INT32, 0, {Op(v1::OP_COUNT)}), Chunk("")}, &resp).ok());
  EXPECT_EQ(resp.results(0).uint64s().values(0), 0u);
  // Empty chunks before, between and after the data change nothing.
  const std::string data = Bytes(std::vector<std::int32_t>{4, -9, 30});
  ASSERT_TRUE(Stream({Header(v1::DTYPE_INT32, 3, {Op(v1::OP_SUM)}), Chunk(""), Chunk(data.substr(0, 5)), Chunk(""),
                      Chunk(data.substr(5)), Chunk("")},
                     &resp)
                  .ok());
  EXPECT_EQ(resp.results(0).int64s().values(0), 25);

  // A stream with its header and nothing more holds no bytes.
  grpc::ClientContext ctx;
  auto writer = stub_->AggregateStream(&ctx, &resp);
  ASSERT_TRUE(writer->Write(Header(v1::DTYPE_FLOAT32, std::uint64_t{1} << 28, {Op(v1::OP_SUM)})));
  ASSERT_TRUE(MetricReaches("tally_requests_in_flight", 1));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Metric("tally_in_flight_bytes"), 0);
  ctx.TryCancel();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(ServerFixture, AStreamThatGoesQuietIsEndedAndWhatItHeldFreed) {
  ServerConfig config;
  config.service.stream_idle_timeout = 400ms;
  server_.reset();
  StartServer(config);

  // Pauses shorter than the timeout are fine.
  const std::vector<float> x = RandomFloats(1 << 16, 6);
  const std::string bytes = Bytes(x);
  {
    grpc::ClientContext ctx;
    v1::AggregateResponse resp;
    auto writer = stub_->AggregateStream(&ctx, &resp);
    ASSERT_TRUE(writer->Write(Header(v1::DTYPE_FLOAT32, x.size(), {Op(v1::OP_COUNT)})));
    for (const auto& chunk : Chunks(bytes, bytes.size() / 4)) {
      std::this_thread::sleep_for(150ms);
      ASSERT_TRUE(writer->Write(chunk));
    }
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
    EXPECT_EQ(resp.results(0).uint64s().values(0), x.size());
  }
  // A stream that stops halfway is ended, with a message that says why.
  grpc::ClientContext ctx;
  v1::AggregateResponse resp;
  auto writer = stub_->AggregateStream(&ctx, &resp);
  ASSERT_TRUE(writer->Write(Header(v1::DTYPE_FLOAT32, x.size(), {Op(v1::OP_SUM)})));
  ASSERT_TRUE(writer->Write(Chunk(bytes.substr(0, bytes.size() / 2))));
  ASSERT_TRUE(MetricReaches("tally_requests_in_flight", 1));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(MetricReaches("tally_requests_in_flight", 0, 5s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_EQ(Metric("tally_in_flight_bytes"), 0);
  grpc::Status ended = writer->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(ended.error_message().find("no message for 400 ms (--stream_idle_timeout_ms)"), std::string::npos)
      << ended.error_message();
}

}  // namespace
}  // namespace tally::testing
