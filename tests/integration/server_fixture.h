// Starts a real tally server in-process on a free loopback port, with a raw
// stub to drive it: tests can send exactly the messages they mean to,
// malformed ones included.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "server/frontend/server.h"
#include "server/metrics/metrics.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally::testing {

inline v1::Aggregation Op(v1::Op op) {
  v1::Aggregation a;
  a.set_op(op);
  return a;
}

inline v1::Aggregation Hist(std::uint32_t bins, double lo, double hi) {
  v1::Aggregation a = Op(v1::OP_HISTOGRAM);
  a.mutable_histogram()->set_bins(bins);
  a.mutable_histogram()->set_lo(lo);
  a.mutable_histogram()->set_hi(hi);
  return a;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

inline std::vector<float> RandomFloats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class ServerFixture : public ::testing::Test {
 protected:
  void StartServer(ServerConfig config = {}) {
    config.listen = "127.0.0.1:0";
    if (config.backend.kind == "auto") config.backend.kind = "cpu";
    if (config.threads == 0) config.threads = 2;
    auto server = TallyServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Aggregator::NewStub(channel_);
  }
  void SetUp() override { StartServer(); }

  grpc::Status Unary(const v1::AggregateRequest& req, v1::AggregateResponse* resp) {
    grpc::ClientContext ctx;
    return stub_->Aggregate(&ctx, req, resp);
  }

  // Sends `messages` on one AggregateStream call and returns its status.
  grpc::Status Stream(const std::vector<v1::AggregateStreamRequest>& messages, v1::AggregateResponse* resp) {
    grpc::ClientContext ctx;
    auto writer = stub_->AggregateStream(&ctx, resp);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;  // the server already answered
    }
    writer->WritesDone();
    return writer->Finish();
  }

  static v1::AggregateStreamRequest Header(v1::DType dtype, std::uint64_t length,
                                           const std::vector<v1::Aggregation>& ops,
                                           std::uint64_t row_length = 0) {
    v1::AggregateStreamRequest m;
    auto* h = m.mutable_header();
    h->mutable_spec()->set_dtype(dtype);
    h->mutable_spec()->set_length(length);
    h->mutable_spec()->set_row_length(row_length);
    for (const auto& op : ops) *h->add_aggregations() = op;
    return m;
  }
  static v1::AggregateStreamRequest Chunk(std::string bytes) {
    v1::AggregateStreamRequest m;
    m.set_chunk(std::move(bytes));
    return m;
  }

  // The bytes split into chunks of `chunk` bytes (the last one shorter).
  static std::vector<v1::AggregateStreamRequest> Chunks(const std::string& bytes, std::size_t chunk) {
    std::vector<v1::AggregateStreamRequest> out;
    for (std::size_t at = 0; at < bytes.size(); at += chunk) out.push_back(Chunk(bytes.substr(at, chunk)));
    return out;
  }

  // A gauge or counter of the server's metrics, e.g. "tally_in_flight_bytes",
  // summed over its samples (all label values); -1 when there is none.
  double Metric(const std::string& name) const {
    const std::string text = server_->metrics()->Scrape();
    double sum = -1;
    for (std::size_t at = 0; (at = text.find(name, at)) != std::string::npos;) {
      const bool line_start = at == 0 || text[at - 1] == '\n';
      const char next = at + name.size() < text.size() ? text[at + name.size()] : '\0';
      at += name.size();
      if (!line_start || (next != ' ' && next != '{')) continue;
      const std::size_t value = next == '{' ? text.find("} ", at) + 1 : at;
      sum = std::max(sum, 0.0) + std::stod(text.substr(value + 1, text.find('\n', value) - value - 1));
    }
    return sum;
  }

  // Waits up to `limit` for `metric` to read `value`; true if it did.
  bool MetricReaches(const std::string& metric, double value,
                     std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (Metric(metric) != value) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  std::unique_ptr<TallyServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Aggregator::Stub> stub_;
};

}  // namespace tally::testing
