// Every kind of bad input gets the right code and a message naming the
// field, and the server goes on answering correctly afterwards.
#include <cmath>
#include <limits>

#include "grpcpp/generic/generic_stub.h"
#include "server_fixture.h"

namespace tally::testing {
namespace {

struct BadUnary {
  const char* name;
  std::function<void(v1::AggregateRequest&)> spoil;
  grpc::StatusCode code;
  const char* says;  // a piece of the message that names the field
};

v1::AggregateRequest GoodRequest() {
  v1::AggregateRequest req;
  req.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  req.set_data(Bytes(std::vector<float>{1.0f, 2.0f, 3.5f, -4.0f}));
  *req.add_aggregations() = Op(v1::OP_SUM);
  *req.add_aggregations() = Op(v1::OP_MAX);
  return req;
}

class BadInputTest : public ServerFixture {
 protected:
  // The server still answers a good request, correctly.
  void ExpectStillServing() {
    v1::AggregateResponse resp;
    grpc::Status st = Unary(GoodRequest(), &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.results(0).doubles().values(0), 2.5);
    EXPECT_EQ(resp.results(1).doubles().values(0), 3.5);
  }

  // The call was refused as INVALID_ARGUMENT with a message containing `says`.
  static void ExpectRefusedSaying(const grpc::Status& st, const std::string& says) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find(says), std::string::npos) << st.error_message();
  }

  // Sends `messages` byte for byte, with no protobuf in between, on one call
  // of `method` and returns its status; `response` gets the answer's bytes.
  grpc::Status RawCall(const std::string& method, const std::vector<std::string>& messages, std::string* response) {
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    grpc::ClientContext ctx;
    void* tag = nullptr;
    bool ok = false;
    auto next = [&] { return cq.Next(&tag, &ok) && ok; };
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, method, &cq);
    call->StartCall(nullptr);
    if (next()) {
      for (const std::string& m : messages) {
        grpc::Slice slice(m);
        call->Write(grpc::ByteBuffer(&slice, 1), nullptr);
        if (!next()) break;  // the server already answered
      }
      call->WritesDone(nullptr);
      next();
      grpc::ByteBuffer answer;
      call->Read(&answer, nullptr);
      if (next()) {
        std::vector<grpc::Slice> slices;
        EXPECT_TRUE(answer.Dump(&slices).ok());
        for (const grpc::Slice& s : slices) response->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    grpc::Status status;
    call->Finish(&status, nullptr);
    next();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }
};

constexpr char kAggregate[] = "/tally.v1.Aggregator/Aggregate";
constexpr char kAggregateStream[] = "/tally.v1.Aggregator/AggregateStream";

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

const BadUnary kBadUnary[] = {
    {"bytes not whole elements", [](auto& r) { r.mutable_data()->append("xy"); },
     grpc::StatusCode::INVALID_ARGUMENT, "not a whole number of float32 elements"},
    {"length disagrees", [](auto& r) { r.mutable_spec()->set_length(5); },
     grpc::StatusCode::INVALID_ARGUMENT, "spec.length"},
    {"no dtype", [](auto& r) { r.mutable_spec()->set_dtype(v1::DTYPE_UNSPECIFIED); },
     grpc::StatusCode::INVALID_ARGUMENT, "spec.dtype"},
    {"unknown dtype", [](auto& r) { r.mutable_spec()->set_dtype(static_cast<v1::DType>(42)); },
     grpc::StatusCode::INVALID_ARGUMENT, "unknown dtype 42"},
    {"unknown op", [](auto& r) { r.mutable_aggregations(1)->set_op(static_cast<v1::Op>(99)); },
     grpc::StatusCode::INVALID_ARGUMENT, "aggregations[1].op: unknown op 99"},
    {"no op", [](auto& r) { r.mutable_aggregations(0)->set_op(v1::OP_UNSPECIFIED); },
     grpc::StatusCode::INVALID_ARGUMENT, "aggregations[0].op"},
    {"no aggregations", [](auto& r) { r.clear_aggregations(); },
     grpc::StatusCode::INVALID_ARGUMENT, "at least one aggregation"},
    {"histogram with 0 bins", [](auto& r) { *r.add_aggregations() = Hist(0, 0, 1); },
     grpc::StatusCode::INVALID_ARGUMENT, "histogram.bins must be 1 to 65536"},
    {"histogram with too many bins", [](auto& r) { *r.add_aggregations() = Hist(65537, 0, 1); },
     grpc::StatusCode::INVALID_ARGUMENT, "histogram.bins must be 1 to 65536, got 65537"},
    {"histogram lo == hi", [](auto& r) { *r.add_aggregations() = Hist(8, 1, 1); },
     grpc::StatusCode::INVALID_ARGUMENT, "histogram.lo must be less than histogram.hi"},
    {"histogram lo > hi", [](auto& r) { *r.add_aggregations() = Hist(8, 2, 1); },
     grpc::StatusCode::INVALID_ARGUMENT, "histogram.lo must be less than histogram.hi"},
    {"histogram NaN edge", [](auto& r) { *r.add_aggregations() = Hist(8, kNan, 1); },
     grpc::StatusCode::INVALID_ARGUMENT, "must be finite"},
    {"histogram infinite edge", [](auto& r) { *r.add_aggregations() = Hist(8, 0, kInf); },
     grpc::StatusCode::INVALID_ARGUMENT, "must be finite"},
    {"negative ddof",
     [](auto& r) {
       v1::Aggregation a = Op(v1::OP_VARIANCE);
       a.set_ddof(-1);
       *r.add_aggregations() = a;
     },
     grpc::StatusCode::INVALID_ARGUMENT, "ddof must be finite and >= 0"},
    {"row length does not divide", [](auto& r) { r.mutable_spec()->set_row_length(3); },
     grpc::StatusCode::INVALID_ARGUMENT, "spec.row_length: 3 does not divide the array length 4"},
    {"min of empty array",
     [](auto& r) {
       r.clear_data();
       *r.add_aggregations() = Op(v1::OP_MIN);
     },
     grpc::StatusCode::INVALID_ARGUMENT, "the array is empty"},
    {"argmax of empty array",
     [](auto& r) {
       r.clear_data();
       r.clear_aggregations();
       *r.add_aggregations() = Op(v1::OP_ARGMAX);
     },
     grpc::StatusCode::INVALID_ARGUMENT, "empty array has no argmax"},
    {"result too large",
     [](auto& r) {
       r.set_data(std::string(4 * 4096, '\0'));
       r.mutable_spec()->set_row_length(1);
       *r.add_aggregations() = Hist(65536, 0, 1);
     },
     grpc::StatusCode::RESOURCE_EXHAUSTED, "result values per response"},
};

TEST_F(BadInputTest, UnaryRequestsAreRejectedWithTheFieldNamed) {
  for (const BadUnary& bad : kBadUnary) {
    SCOPED_TRACE(bad.name);
    v1::AggregateRequest req = GoodRequest();
    bad.spoil(req);
    v1::AggregateResponse resp;
    grpc::Status st = Unary(req, &resp);
    EXPECT_EQ(st.error_code(), bad.code) << st.error_message();
    EXPECT_NE(st.error_message().find(bad.says), std::string::npos) << st.error_message();
    ExpectStillServing();
  }
}

TEST_F(BadInputTest, EmptyArrayHasSumZeroCountZeroMeanNan) {
  v1::AggregateRequest req = GoodRequest();
  req.clear_data();
  req.clear_aggregations();
  for (v1::Op op : {v1::OP_SUM, v1::OP_COUNT, v1::OP_MEAN}) *req.add_aggregations() = Op(op);
  v1::AggregateResponse resp;
  ASSERT_TRUE(Unary(req, &resp).ok());
  EXPECT_EQ(resp.results(0).doubles().values(0), 0.0);
  EXPECT_EQ(resp.results(1).uint64s().values(0), 0u);
  EXPECT_TRUE(std::isnan(resp.results(2).doubles().values(0)));
}

TEST_F(BadInputTest, OversizedUnaryIsToldToStream) {
  ServerConfig config;
  config.service.max_unary_bytes = 1 << 20;
  server_.reset();
  StartServer(config);
  v1::AggregateRequest req = GoodRequest();
  req.set_data(Bytes(RandomFloats((1 << 18) + 1, 5)));
  v1::AggregateResponse resp;
  grpc::Status st = Unary(req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("AggregateStream"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("1048576"), std::string::npos) << st.error_message();
  ExpectStillServing();
}

struct BadStream {
  const char* name;
  std::vector<v1::AggregateStreamRequest> messages;
  const char* says;
};

TEST_F(BadInputTest, MalformedStreamsAreRejected) {
  const std::string data = Bytes(std::vector<float>{1, 2, 3, 4});
  const auto header = Header(v1::DTYPE_FLOAT32, 4, {Op(v1::OP_SUM)});
  auto no_length = header;
  no_length.mutable_header()->mutable_spec()->clear_length();
  const std::vector<BadStream> cases = {
      {"chunk before header", {Chunk(data)}, "first message of AggregateStream must be the header"},
      {"second header", {header, Chunk(data.substr(0, 8)), header, Chunk(data.substr(8))}, "one header"},
      {"ends early", {header, Chunk(data.substr(0, 10))}, "ended early, after 10 of the 16 bytes"},
      {"ends inside an element", {header, Chunk(data.substr(0, 15))}, "ended early"},
      {"too many bytes", {header, Chunk(data), Chunk("abcd")}, "more than the 16 bytes"},
      {"no header at all", {}, "ended before its header"},
      {"length missing", {no_length, Chunk(data)}, "header.spec.length"},
      {"bad op in header", {Header(v1::DTYPE_FLOAT32, 4, {Hist(0, 0, 1)}), Chunk(data)}, "histogram.bins"},
  };
  for (const BadStream& bad : cases) {
    SCOPED_TRACE(bad.name);
    v1::AggregateResponse resp;
    grpc::Status st = Stream(bad.messages, &resp);
    ExpectRefusedSaying(st, bad.says);
    ExpectStillServing();
  }
  // And a good stream still works.
  v1::AggregateResponse resp;
  ASSERT_TRUE(Stream({header, Chunk(data.substr(0, 3)), Chunk(data.substr(3))}, &resp).ok());
  EXPECT_EQ(resp.results(0).doubles().values(0), 10.0);
}

TEST_F(BadInputTest, BytesThatAreNotAMessageAreRejected) {
  std::string resp;
  grpc::Status st = RawCall(kAggregate, {std::string("\x12\x05" "abc")}, &resp);
  ExpectRefusedSaying(st, "tally.v1.AggregateRequest: not a valid protobuf message: at byte 2, field 2 "
                          "(data) needs 5 bytes, but only 3 are left");
  ExpectStillServing();

  const std::string header = Header(v1::DTYPE_FLOAT32, 4, {Op(v1::OP_SUM)}).SerializeAsString();
  st = RawCall(kAggregateStream, {header, std::string("\x12\x80")}, &resp);
  ExpectRefusedSaying(st, "tally.v1.AggregateStreamRequest: not a valid protobuf message: at byte 1, the "
                          "message ends inside the length of field 2 (chunk)");
  ExpectStillServing();
}

// The server reads messages as protobuf would: of two data fields in one
// request the last counts, and a message whose chunk follows its header is a
// chunk.
TEST_F(BadInputTest, RepeatedFieldsCountAsInProtobuf) {
  v1::AggregateRequest later;
  later.set_data(Bytes(std::vector<float>{10.0f, 20.0f}));
  std::string resp;
  grpc::Status st = RawCall(kAggregate, {GoodRequest().SerializeAsString() + later.SerializeAsString()}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::AggregateResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(resp));
  EXPECT_EQ(parsed.execution().elements(), 2u);
  EXPECT_EQ(parsed.results(0).doubles().values(0), 30.0);
  EXPECT_EQ(parsed.results(1).doubles().values(0), 20.0);

  const std::string header = Header(v1::DTYPE_FLOAT32, 2, {Op(v1::OP_SUM)}).SerializeAsString();
  const std::string chunk = Chunk(Bytes(std::vector<float>{1.5f, 2.0f})).SerializeAsString();
  st = RawCall(kAggregateStream, {header + chunk}, &resp);
  ExpectRefusedSaying(st, "must be the header");
  resp.clear();
  st = RawCall(kAggregateStream, {chunk + header, chunk}, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_TRUE(parsed.ParseFromString(resp));
  EXPECT_EQ(parsed.results(0).doubles().values(0), 3.5);
}

}  // namespace
}  // namespace tally::testing
