// Clients that make the server refuse the same call over and over (queries
// of a region whose object they truncated, calls during a drain, a CUDA
// region on a cpu server, names that are not UTF-8) must not flood the
// log: one line per cause per interval, never at error level.
#include <thread>
#include <vector>

#include "tests/integration/hostile_fixture.h"

namespace tally::testing {
namespace {

using namespace std::chrono_literals;

class HostileLoggingTest : public HostileClientTest {
 protected:
  // `calls` calls of `call` from `threads` threads; how many ended `code`.
  template <typename Call>
  static int Repeat(int threads, int calls, grpc::StatusCode code, Call call) {
    std::atomic<int> matched{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        for (int i = 0; i < calls / threads; ++i) matched += call().error_code() == code;
      });
    }
    for (std::thread& t : pool) t.join();
    return matched.load();
  }
};

TEST_F(HostileLoggingTest, RepeatedRefusalsAreLoggedOncePerCauseAndNeverAsErrors) {
  LogCapture& log = CaptureLog();
  Start(ServerConfig{});
  auto regions = v1::SharedMemory::NewStub(channel_);

  // Queries of a region whose object was truncated under it.
  ShmObject object("tally-log-test-" + std::to_string(getpid()), 1 << 20);
  ASSERT_TRUE(object.ok());
  {
    v1::RegisterHostRegionRequest r;
    r.set_name("shrunk");
    r.set_shm_name(object.name());
    r.set_byte_size(1 << 20);
    v1::RegionInfo info;
    grpc::ClientContext ctx;
    ASSERT_TRUE(regions->RegisterHostRegion(&ctx, r, &info).ok());
  }
  ASSERT_TRUE(object.Truncate(4096));
  v1::AggregateRegionRequest query;
  query.set_region("shrunk");
  query.mutable_spec()->set_dtype(v1::DTYPE_UINT8);
  query.mutable_spec()->set_length(1 << 20);
  *query.add_aggregations() = Op(v1::OP_SUM);
  EXPECT_EQ(Repeat(3, 3000, grpc::StatusCode::FAILED_PRECONDITION, [&] {
              v1::AggregateResponse resp;
              grpc::ClientContext ctx;
              return regions->AggregateRegion(&ctx, query, &resp);
            }),
            3000);
  EXPECT_EQ(log.Lines("truncated").size(), 1u);

  // A CUDA region on a cpu server.
  std::atomic<int> n{0};
  EXPECT_EQ(Repeat(2, 500, grpc::StatusCode::FAILED_PRECONDITION, [&] {
              v1::RegisterCudaRegionRequest r;
              r.set_name("gpu-" + std::to_string(n++));
              r.set_ipc_handle(std::string(64, '\0'));
              r.set_byte_size(4096);
              v1::RegionInfo info;
              grpc::ClientContext ctx;
              return regions->RegisterCudaRegion(&ctx, r, &info);
            }),
            500);
  EXPECT_EQ(log.Lines("RegisterCudaRegion").size(), 1u);

  // Names that are not UTF-8 (and so not a proto3 string).
  auto describe = [&] {
    v1::DescribeDatasetRequest r;
    r.set_name("\xff\xfe");
    v1::DatasetInfo info;
    grpc::ClientContext ctx;
    return stub_->DescribeDataset(&ctx, r, &info);
  };
  const grpc::StatusCode not_utf8 = describe().error_code();
  EXPECT_NE(not_utf8, grpc::StatusCode::OK);
  EXPECT_EQ(Repeat(2, 500, not_utf8, describe), 500);
  EXPECT_LE(log.Lines("invalid UTF-8 data when parsing").size(), 1u);

  // Calls during a drain, which an idle stream keeps going.
  grpc::ClientContext stream_ctx;
  v1::AggregateResponse stream_resp;
  auto stream = stub_->AggregateStream(&stream_ctx, &stream_resp);
  ASSERT_TRUE(stream->Write(Header(v1::DTYPE_INT32, 1, {Op(v1::OP_SUM)})));
  ASSERT_TRUE(MetricReaches("tally_requests_in_flight", 1));
  auto aggregate = [&] {
    v1::AggregateRequest r;
    r.mutable_spec()->set_dtype(v1::DTYPE_INT32);
    r.set_data(std::string(16, '\1'));
    *r.add_aggregations() = Op(v1::OP_SUM);
    v1::AggregateResponse resp;
    grpc::ClientContext ctx;
    return stub_->Aggregate(&ctx, r, &resp);
  };
  std::thread drain([&] { server_->Drain(10s); });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (aggregate().error_code() != grpc::StatusCode::UNAVAILABLE && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(Repeat(2, 500, grpc::StatusCode::UNAVAILABLE, aggregate), 500);
  stream_ctx.TryCancel();
  stream->Finish();
  drain.join();
  EXPECT_LE(log.Lines("UNAVAILABLE").size(), 1u);

  // 4,500 refusals in all: a handful of lines, none of them an error.
  for (const std::string& line : log.Lines("", spdlog::level::err)) ADD_FAILURE() << "logged as an error: " << line;
  EXPECT_LE(log.Lines("").size(), 20u);
}

}  // namespace
}  // namespace tally::testing
