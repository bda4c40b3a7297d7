// The client against an in-process Aggregator that answers with the host
// reference: unary and streaming calls must deliver the same bytes (the
// client hand-encodes the data field to avoid copies), errors must keep the
// server's code and message, and deadlines and progress must work.
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "tally/client/aggregations.h"
#include "tally/client/client.h"
#include "tally/client/random_data.h"
#include "tally/client/reference.h"
#include "tally/client/status.h"
#include "tally/client/wire.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally::client {
namespace {

// Checks what arrived and answers with ComputeReference.
class FakeAggregator final : public v1::Aggregator::Service {
 public:
  std::atomic<int> unary_calls{0};
  std::atomic<int> stream_calls{0};
  std::atomic<int> chunks{0};
  std::atomic<int> delay_ms{0};

  grpc::Status Aggregate(grpc::ServerContext*, const v1::AggregateRequest* request,
                         v1::AggregateResponse* response) override {
    ++unary_calls;
    return Answer(request->spec(), {request->aggregations().begin(), request->aggregations().end()},
                  request->data(), response);
  }

  grpc::Status AggregateStream(grpc::ServerContext*,
                               grpc::ServerReader<v1::AggregateStreamRequest>* reader,
                               v1::AggregateResponse* response) override {
    ++stream_calls;
    v1::AggregateStreamRequest message;
    if (!reader->Read(&message) || !message.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message must be the header");
    }
    const v1::AggregateStreamRequest::Header header = message.header();
    // Rejecting before reading the data, as a real server does for a bad
    // header, exercises the client's failed-write path.
    if (header.aggregations().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "aggregations: at least one");
    }
    std::string data;
    while (reader->Read(&message)) {
      if (!message.has_chunk()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "second header");
      }
      ++chunks;
      data += message.chunk();
    }
    return Answer(header.spec(), {header.aggregations().begin(), header.aggregations().end()},
                  data, response);
  }

 private:
  grpc::Status Answer(const v1::ArraySpec& spec, const std::vector<v1::Aggregation>& aggs,
                      const std::string& data, v1::AggregateResponse* response) {
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    const std::optional<ops::DType> dtype = FromWire(spec.dtype());
    if (!dtype || data.size() != spec.length() * ops::SizeOf(*dtype)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "length does not match the data");
    }
    const ArrayRef array{*dtype, reinterpret_cast<const std::byte*>(data.data()), spec.length(),
                         spec.row_length()};
    absl::StatusOr<v1::AggregateResponse> r = ComputeReference(array, aggs);
    if (!r.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(r.status().code()),
                          std::string(r.status().message()));
    }
    *response = *std::move(r);
    return grpc::Status::OK;
  }
};

class RoundTripTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    builder.SetMaxReceiveMessageSize(64 << 20);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(MakeChannel("127.0.0.1:" + std::to_string(port)));
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now()); }

  FakeAggregator service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

const char* const kAllOps = "sum,min,max,mean,count,sumsq,var:1,std,argmin,argmax,hist:16:-0.5:0.75";

TEST_F(RoundTripTest, UnaryAndStreamAgreeWithTheReferenceForEveryDtype) {
  const std::vector<v1::Aggregation> aggs = *ParseAggregations(kAllOps);
  for (ops::DType dtype : ops::kAllDTypes) {
    for (std::uint64_t length : {1u, 7u, 1000u, 50'001u}) {
      HostBuffer buffer(length * ops::SizeOf(dtype));
      FillRandom(dtype, length, buffer.data(), length);
      const ArrayRef array{dtype, buffer.data(), length, length % 7 == 0 ? 7u : 0u};
      const v1::AggregateResponse expected = *ComputeReference(array, aggs);

      CallOptions unary;
      unary.stream = StreamMode::kNever;
      CallOptions stream;
      stream.stream = StreamMode::kAlways;
      stream.chunk_bytes = 1001;  // chunks that split elements
      for (const CallOptions& o : {unary, stream}) {
        absl::StatusOr<v1::AggregateResponse> got = client_->Aggregate(array, aggs, o);
        ASSERT_TRUE(got.ok()) << NameOf(dtype) << " " << length << ": " << got.status();
        // The fake computes with the same reference, so any difference is a
        // byte that did not arrive intact.
        EXPECT_EQ(got->SerializeAsString(), expected.SerializeAsString())
            << NameOf(dtype) << " " << length << " stream=" << (o.stream == StreamMode::kAlways);
      }
    }
  }
}

TEST_F(RoundTripTest, EmptyArrayBothWays) {
  const ArrayRef empty{ops::DType::kFloat64, nullptr, 0, 0};
  for (StreamMode mode : {StreamMode::kNever, StreamMode::kAlways}) {
    CallOptions o;
    o.stream = mode;
    absl::StatusOr<v1::AggregateResponse> got = client_->Aggregate(empty, *ParseAggregations("count,sum"), o);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->results(0).uint64s().values(0), 0u);
  }
}

TEST_F(RoundTripTest, AutoModeStreamsAboveTheThreshold) {
  HostBuffer buffer(4096);
  FillRandom(ops::DType::kUInt8, 3, buffer.data(), 4096);
  CallOptions o;
  o.stream_threshold_bytes = 1024;
  o.chunk_bytes = 1000;
  const std::vector<v1::Aggregation> aggs = *ParseAggregations("sum");
  ASSERT_TRUE(client_->Aggregate({ops::DType::kUInt8, buffer.data(), 1024, 0}, aggs, o).ok());
  EXPECT_EQ(service_.unary_calls, 1);
  EXPECT_EQ(service_.stream_calls, 0);
  ASSERT_TRUE(client_->Aggregate({ops::DType::kUInt8, buffer.data(), 1025, 0}, aggs, o).ok());
  EXPECT_EQ(service_.stream_calls, 1);
  EXPECT_EQ(service_.chunks, 2);  // 1000 + 25 bytes
}

TEST_F(RoundTripTest, ProgressReportsEveryChunk) {
  const std::uint64_t n = 1 << 18;
  HostBuffer buffer(n * 4);
  FillRandom(ops::DType::kInt32, 5, buffer.data(), n);
  std::vector<std::uint64_t> seen;
  CallOptions o;
  o.stream = StreamMode::kAlways;
  o.chunk_bytes = 64 << 10;
  o.progress = [&](std::uint64_t sent, std::uint64_t total) {
    EXPECT_EQ(total, n * 4);
    seen.push_back(sent);
  };
  ASSERT_TRUE(client_->Aggregate({ops::DType::kInt32, buffer.data(), n, 0}, *ParseAggregations("max"), o).ok());
  ASSERT_EQ(seen.size(), 17u);  // 0, then after each of the 16 chunks
  EXPECT_EQ(seen.front(), 0u);
  EXPECT_EQ(seen.back(), n * 4);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

TEST_F(RoundTripTest, ServerErrorsKeepCodeAndMessage) {
  std::vector<float> x(10, 1.0f);
  const ArrayRef bad_rows{ops::DType::kFloat32, reinterpret_cast<const std::byte*>(x.data()), 10, 3};
  for (StreamMode mode : {StreamMode::kNever, StreamMode::kAlways}) {
    CallOptions o;
    o.stream = mode;
    const absl::StatusOr<v1::AggregateResponse> got = client_->Aggregate(bad_rows, *ParseAggregations("sum"), o);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), "row_length 3 does not divide length 10");
  }
}

TEST_F(RoundTripTest, EarlyRejectionOfALargeStreamDoesNotHang) {
  const std::uint64_t n = 16 << 20;
  HostBuffer buffer(n);
  FillRandom(ops::DType::kUInt8, 9, buffer.data(), n);
  CallOptions o;
  o.stream = StreamMode::kAlways;
  o.chunk_bytes = 64 << 10;
  o.timeout = absl::Seconds(30);
  const absl::StatusOr<v1::AggregateResponse> got =
      client_->Aggregate({ops::DType::kUInt8, buffer.data(), n, 0}, {}, o);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_EQ(got.status().message(), "aggregations: at least one");
}

TEST_F(RoundTripTest, DeadlineExceeded) {
  service_.delay_ms = 600;
  std::vector<double> x = {1, 2, 3};
  CallOptions o;
  o.timeout = absl::Milliseconds(50);
  const absl::StatusOr<v1::AggregateResponse> got = client_->Aggregate(
      {ops::DType::kFloat64, reinterpret_cast<const std::byte*>(x.data()), 3, 0},
      *ParseAggregations("sum"), o);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  service_.delay_ms = 0;
}

TEST_F(RoundTripTest, HealthCheck) {
  absl::StatusOr<ServingStatus> whole = client_->CheckHealth("", absl::Seconds(5));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, ServingStatus::kServing);
  EXPECT_EQ(ServingStatusName(*whole), "SERVING");
  // gRPC's default health service answers NOT_FOUND for services it never heard of.
  EXPECT_EQ(client_->CheckHealth("no.such.Service", absl::Seconds(5)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ClientOffline, UnreachableServerIsUnavailable) {
  // Port 1 on localhost: nothing listens there.
  Client client(MakeChannel("127.0.0.1:1"));
  std::vector<double> x = {1};
  const absl::StatusOr<v1::AggregateResponse> got = client.Aggregate(
      {ops::DType::kFloat64, reinterpret_cast<const std::byte*>(x.data()), 1, 0},
      *ParseAggregations("sum"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
}

TEST(ClientOffline, LengthWithoutDataIsRejectedLocally) {
  Client client(MakeChannel("127.0.0.1:1"));
  const absl::StatusOr<v1::AggregateResponse> got =
      client.Aggregate({ops::DType::kFloat64, nullptr, 5, 0}, *ParseAggregations("sum"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FromGrpcStatus, KeepsCodeMessageAndDetails) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  const absl::Status s = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too big: 65 MiB > 64 MiB", "\x08\x08"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "too big: 65 MiB > 64 MiB");
  ASSERT_TRUE(s.GetPayload(kGrpcErrorDetailsTypeUrl).has_value());
  EXPECT_EQ(std::string(*s.GetPayload(kGrpcErrorDetailsTypeUrl)), "\x08\x08");
  for (int code = 1; code <= 16; ++code) {
    EXPECT_EQ(static_cast<int>(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(code), "x")).code()), code);
  }
}

TEST(MethodNames, MatchTheService) {
  EXPECT_EQ(AggregateMethod(), "/tally.v1.Aggregator/Aggregate");
  EXPECT_EQ(AggregateStreamMethod(), "/tally.v1.Aggregator/AggregateStream");
}

}  // namespace
}  // namespace tally::client
