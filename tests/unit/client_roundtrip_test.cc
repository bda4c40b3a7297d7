// The client against an in-process Aggregator that answers with the host
// reference: unary and streaming calls must deliver the same bytes (the
// client hand-encodes the data field to avoid copies), errors must keep the
// server's code and message, and deadlines and progress must work. The
// dataset calls go to a map of uploaded bytes.
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
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
  std::atomic<int> put_chunks{0};
  // The last upload's header, for checking what the client put in it.
  v1::PutDatasetRequest::Header last_put;
  int list_pages = 0;  // ListDatasets calls

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

  grpc::Status PutDataset(grpc::ServerContext*, grpc::ServerReader<v1::PutDatasetRequest>* reader,
                          v1::PutDatasetResponse* response) override {
    v1::PutDatasetRequest message;
    if (!reader->Read(&message) || !message.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "header first");
    }
    const v1::PutDatasetRequest::Header header = message.header();
    std::string data;
    while (reader->Read(&message)) {
      if (!message.has_chunk()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "second header");
      ++put_chunks;
      data += message.chunk();
    }
    const std::optional<rules::DType> dtype = FromWire(header.spec().dtype());
    if (!dtype || data.size() != header.spec().length() * rules::SizeOf(*dtype)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "length does not match the data");
    }
    std::lock_guard lock(mu_);
    last_put = header;
    if (datasets_.contains(header.name()) && !header.replace()) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "dataset '" + header.name() + "' exists");
    }
    Stored& d = datasets_[header.name()];
    d.spec = header.spec();
    d.data = std::move(data);
    d.info.set_name(header.name());
    d.info.set_dtype(header.spec().dtype());
    d.info.set_length(header.spec().length());
    d.info.set_bytes(d.data.size());
    d.info.set_place("host");
    d.info.set_version(++version_);
    *response->mutable_dataset() = d.info;
    return grpc::Status::OK;
  }

  grpc::Status AggregateDataset(grpc::ServerContext*, const v1::AggregateDatasetRequest* request,
                                v1::AggregateResponse* response) override {
    std::lock_guard lock(mu_);
    const auto it = datasets_.find(request->name());
    if (it == datasets_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no dataset " + request->name());
    const Stored& d = it->second;
    std::uint64_t begin = 0, end = d.spec.length();
    if (request->has_range()) {
      begin = request->range().begin();
      end = request->range().end();
      if (begin > end || end > d.spec.length()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "range outside the dataset");
      }
    }
    const std::uint64_t size = rules::SizeOf(*FromWire(d.spec.dtype()));
    v1::ArraySpec spec = d.spec;
    spec.set_length(end - begin);
    spec.set_row_length(request->row_length());
    return Answer(spec, {request->aggregations().begin(), request->aggregations().end()},
                  d.data.substr(begin * size, (end - begin) * size), response);
  }

  // Pages of two by default, as the server's are of a thousand: the client
  // must follow them.
  grpc::Status ListDatasets(grpc::ServerContext*, const v1::ListDatasetsRequest* request,
                            v1::ListDatasetsResponse* response) override {
    std::lock_guard lock(mu_);
    ++list_pages;
    const int size = request->page_size() != 0 ? static_cast<int>(request->page_size()) : 2;
    auto it = request->page_token().empty() ? datasets_.begin() : datasets_.upper_bound(request->page_token());
    for (; it != datasets_.end() && response->datasets_size() < size; ++it) *response->add_datasets() = it->second.info;
    if (it != datasets_.end()) response->set_next_page_token(response->datasets().rbegin()->name());
    response->add_places()->set_place("host");
    return grpc::Status::OK;
  }

  grpc::Status DescribeDataset(grpc::ServerContext*, const v1::DescribeDatasetRequest* request,
                               v1::DatasetInfo* response) override {
    std::lock_guard lock(mu_);
    const auto it = datasets_.find(request->name());
    if (it == datasets_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no dataset " + request->name());
    *response = it->second.info;
    return grpc::Status::OK;
  }

  grpc::Status DeleteDataset(grpc::ServerContext*, const v1::DeleteDatasetRequest* request,
                             v1::DeleteDatasetResponse* response) override {
    std::lock_guard lock(mu_);
    const auto it = datasets_.find(request->name());
    if (it == datasets_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no dataset " + request->name());
    *response->mutable_dataset() = it->second.info;
    datasets_.erase(it);
    return grpc::Status::OK;
  }

 private:
  struct Stored {
    v1::ArraySpec spec;
    std::string data;
    v1::DatasetInfo info;
  };
  std::mutex mu_;
  std::map<std::string, Stored> datasets_;
  std::uint64_t version_ = 0;

  grpc::Status Answer(const v1::ArraySpec& spec, const std::vector<v1::Aggregation>& aggs,
                      const std::string& data, v1::AggregateResponse* response) {
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    const std::optional<rules::DType> dtype = FromWire(spec.dtype());
    if (!dtype || data.size() != spec.length() * rules::SizeOf(*dtype)) {
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
  for (rules::DType dtype : rules::kAllDTypes) {
    for (std::uint64_t length : {1u, 7u, 1000u, 50'001u}) {
      HostBuffer buffer(length * rules::SizeOf(dtype));
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
  const ArrayRef empty{rules::DType::kFloat64, nullptr, 0, 0};
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
  FillRandom(rules::DType::kUInt8, 3, buffer.data(), 4096);
  CallOptions o;
  o.stream_threshold_bytes = 1024;
  o.chunk_bytes = 1000;
  const std::vector<v1::Aggregation> aggs = *ParseAggregations("sum");
  ASSERT_TRUE(client_->Aggregate({rules::DType::kUInt8, buffer.data(), 1024, 0}, aggs, o).ok());
  EXPECT_EQ(service_.unary_calls, 1);
  EXPECT_EQ(service_.stream_calls, 0);
  ASSERT_TRUE(client_->Aggregate({rules::DType::kUInt8, buffer.data(), 1025, 0}, aggs, o).ok());
  EXPECT_EQ(service_.stream_calls, 1);
  EXPECT_EQ(service_.chunks, 2);  // 1000 + 25 bytes
}

TEST_F(RoundTripTest, ProgressReportsEveryChunk) {
  const std::uint64_t n = 1 << 18;
  HostBuffer buffer(n * 4);
  FillRandom(rules::DType::kInt32, 5, buffer.data(), n);
  std::vector<std::uint64_t> seen;
  CallOptions o;
  o.stream = StreamMode::kAlways;
  o.chunk_bytes = 64 << 10;
  o.progress = [&](std::uint64_t sent, std::uint64_t total) {
    EXPECT_EQ(total, n * 4);
    seen.push_back(sent);
  };
  ASSERT_TRUE(client_->Aggregate({rules::DType::kInt32, buffer.data(), n, 0}, *ParseAggregations("max"), o).ok());
  ASSERT_EQ(seen.size(), 17u);  // 0, then after each of the 16 chunks
  EXPECT_EQ(seen.front(), 0u);
  EXPECT_EQ(seen.back(), n * 4);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

TEST_F(RoundTripTest, ServerErrorsKeepCodeAndMessage) {
  std::vector<float> x(10, 1.0f);
  const ArrayRef bad_rows{rules::DType::kFloat32, reinterpret_cast<const std::byte*>(x.data()), 10, 3};
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
  FillRandom(rules::DType::kUInt8, 9, buffer.data(), n);
  CallOptions o;
  o.stream = StreamMode::kAlways;
  o.chunk_bytes = 64 << 10;
  o.timeout = absl::Seconds(30);
  const absl::StatusOr<v1::AggregateResponse> got =
      client_->Aggregate({rules::DType::kUInt8, buffer.data(), n, 0}, {}, o);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_EQ(got.status().message(), "aggregations: at least one");
}

TEST_F(RoundTripTest, DeadlineExceeded) {
  service_.delay_ms = 600;
  std::vector<double> x = {1, 2, 3};
  CallOptions o;
  o.timeout = absl::Milliseconds(50);
  const absl::StatusOr<v1::AggregateResponse> got = client_->Aggregate(
      {rules::DType::kFloat64, reinterpret_cast<const std::byte*>(x.data()), 3, 0},
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

TEST_F(RoundTripTest, PutDatasetDeliversTheBytesAndTheHeader) {
  const std::vector<v1::Aggregation> aggs = *ParseAggregations(kAllOps);
  for (rules::DType dtype : rules::kAllDTypes) {
    const std::uint64_t length = 30'008;  // 2728 rows of 11
    HostBuffer buffer(length * rules::SizeOf(dtype));
    FillRandom(dtype, 17, buffer.data(), length);
    // The array's rows are the dataset's shape: they are sent.
    const ArrayRef array{dtype, buffer.data(), length, 11};
    PutOptions put;
    put.replace = true;
    put.ttl = absl::Milliseconds(2500);
    put.chunk_bytes = 1001;  // chunks that split elements
    const absl::StatusOr<v1::PutDatasetResponse> stored = client_->PutDataset("x", array, put);
    ASSERT_TRUE(stored.ok()) << NameOf(dtype) << ": " << stored.status();
    EXPECT_EQ(stored->dataset().length(), length);
    EXPECT_EQ(service_.last_put.name(), "x");
    EXPECT_EQ(service_.last_put.spec().row_length(), 11u);
    EXPECT_TRUE(service_.last_put.replace());
    EXPECT_EQ(service_.last_put.ttl_seconds(), 2.5);

    // The whole dataset, and a range in rows: the fake answers with the
    // reference on the bytes it stored, so equality means they arrived intact.
    const ArrayRef whole{dtype, buffer.data(), length, 0};
    absl::StatusOr<v1::AggregateResponse> got = client_->AggregateDataset("x", std::nullopt, 0, aggs);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->SerializeAsString(), ComputeReference(whole, aggs)->SerializeAsString()) << NameOf(dtype);
    const ArrayRef part{dtype, buffer.data() + 1000 * rules::SizeOf(dtype), 7000, 700};
    got = client_->AggregateDataset("x", ElementRange{1000, 8000}, 700, aggs);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->SerializeAsString(), ComputeReference(part, aggs)->SerializeAsString()) << NameOf(dtype);
  }
  EXPECT_EQ(service_.put_chunks, [] {
    int chunks = 0;
    for (rules::DType d : rules::kAllDTypes) chunks += (30'008 * rules::SizeOf(d) + 1000) / 1001;
    return chunks;
  }());
}

TEST_F(RoundTripTest, ListDatasetsFollowsEveryPage) {
  std::vector<std::int32_t> x = {3, 1, 4};
  const ArrayRef array{rules::DType::kInt32, reinterpret_cast<const std::byte*>(x.data()), 3, 0};
  for (const char* name : {"e", "a", "d", "b", "c"}) ASSERT_TRUE(client_->PutDataset(name, array).ok());
  const absl::StatusOr<v1::ListDatasetsResponse> list = client_->ListDatasets(absl::Seconds(5));
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<std::string> names;
  for (const v1::DatasetInfo& d : list->datasets()) names.push_back(d.name());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(service_.list_pages, 3);
  EXPECT_TRUE(list->next_page_token().empty());
  ASSERT_EQ(list->places_size(), 1);  // once, not once per page
  const absl::StatusOr<v1::ListDatasetsResponse> page = client_->ListDatasetsPage(3, "a", absl::Seconds(5));
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->datasets_size(), 3);
  EXPECT_EQ(page->datasets(0).name(), "b");
  EXPECT_EQ(page->next_page_token(), "d");
}

TEST_F(RoundTripTest, DatasetCallsListDescribeDeleteAndKeepErrors) {
  std::vector<std::int32_t> x = {3, 1, 4, 1, 5};
  const ArrayRef array{rules::DType::kInt32, reinterpret_cast<const std::byte*>(x.data()), 5, 0};
  ASSERT_TRUE(client_->PutDataset("pi", array).ok());
  EXPECT_FALSE(service_.last_put.replace());
  EXPECT_EQ(service_.last_put.ttl_seconds(), 0.0);
  const absl::Status again = client_->PutDataset("pi", array).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.message(), "dataset 'pi' exists");

  const absl::StatusOr<v1::ListDatasetsResponse> list = client_->ListDatasets(absl::Seconds(5));
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->datasets_size(), 1);
  EXPECT_EQ(list->datasets(0).name(), "pi");
  EXPECT_EQ(list->places(0).place(), "host");
  const absl::StatusOr<v1::DatasetInfo> info = client_->DescribeDataset("pi");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->length(), 5u);
  EXPECT_EQ(info->dtype(), v1::DTYPE_INT32);

  const absl::Status range = client_->AggregateDataset("pi", ElementRange{2, 9}, 0, *ParseAggregations("sum")).status();
  EXPECT_EQ(range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(range.message(), "range outside the dataset");

  const absl::StatusOr<v1::DatasetInfo> removed = client_->DeleteDataset("pi");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->name(), "pi");
  for (const absl::Status& s : {client_->DeleteDataset("pi").status(), client_->DescribeDataset("pi").status(),
                                client_->AggregateDataset("pi", std::nullopt, 0, *ParseAggregations("sum")).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_EQ(s.message(), "no dataset pi");
  }
}

TEST_F(RoundTripTest, PutDatasetRejectsABadTtlOrChunkLocally) {
  std::vector<double> x = {1};
  const ArrayRef array{rules::DType::kFloat64, reinterpret_cast<const std::byte*>(x.data()), 1, 0};
  PutOptions negative;
  negative.ttl = absl::Seconds(-1);
  EXPECT_EQ(client_->PutDataset("x", array, negative).status().code(), absl::StatusCode::kInvalidArgument);
  PutOptions no_chunk;
  no_chunk.chunk_bytes = 0;
  EXPECT_EQ(client_->PutDataset("x", array, no_chunk).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.put_chunks, 0);
}

TEST(ClientOffline, UnreachableServerIsUnavailable) {
  // Port 1 on localhost: nothing listens there.
  Client client(MakeChannel("127.0.0.1:1"));
  std::vector<double> x = {1};
  const absl::StatusOr<v1::AggregateResponse> got = client.Aggregate(
      {rules::DType::kFloat64, reinterpret_cast<const std::byte*>(x.data()), 1, 0},
      *ParseAggregations("sum"));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
}

TEST(ClientOffline, LengthWithoutDataIsRejectedLocally) {
  Client client(MakeChannel("127.0.0.1:1"));
  const absl::StatusOr<v1::AggregateResponse> got =
      client.Aggregate({rules::DType::kFloat64, nullptr, 5, 0}, *ParseAggregations("sum"));
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
  EXPECT_EQ(PutDatasetMethod(), "/tally.v1.Aggregator/PutDataset");
  EXPECT_EQ(AggregateDatasetMethod(), "/tally.v1.Aggregator/AggregateDataset");
  EXPECT_EQ(ListDatasetsMethod(), "/tally.v1.Aggregator/ListDatasets");
  EXPECT_EQ(DescribeDatasetMethod(), "/tally.v1.Aggregator/DescribeDataset");
  EXPECT_EQ(DeleteDatasetMethod(), "/tally.v1.Aggregator/DeleteDataset");
}

}  // namespace
}  // namespace tally::client
