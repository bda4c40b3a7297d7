#include "tests/integration/hostile_clients.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/support/sync_stream.h"

namespace tally::hostile {
namespace {

using Clock = std::chrono::steady_clock;
using Rng = std::mt19937_64;

const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "?";
}

std::string CodesSummary(const std::map<grpc::StatusCode, int>& codes) {
  std::string out;
  for (const auto& [code, n] : codes) absl::StrAppend(&out, out.empty() ? "" : ", ", n, " ", CodeName(code));
  return out.empty() ? "none" : out;
}

void SetDeadline(grpc::ClientContext& ctx, std::chrono::milliseconds d) {
  ctx.set_deadline(std::chrono::system_clock::now() + d);
}

v1::Aggregation Sum() {
  v1::Aggregation a;
  a.set_op(v1::OP_SUM);
  return a;
}

v1::AggregateStreamRequest Header(v1::DType dtype, std::uint64_t length) {
  v1::AggregateStreamRequest m;
  m.mutable_header()->mutable_spec()->set_dtype(dtype);
  m.mutable_header()->mutable_spec()->set_length(length);
  *m.mutable_header()->add_aggregations() = Sum();
  return m;
}

v1::AggregateStreamRequest Chunk(std::string bytes) {
  v1::AggregateStreamRequest m;
  m.set_chunk(std::move(bytes));
  return m;
}

// int32 values whose sum is exact in any order.
std::vector<std::int32_t> RandomInts(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(-1000, 1000);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::string Bytes(const std::vector<std::int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int32_t));
}

std::int64_t SumOf(const std::vector<std::int32_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

// Sends `header`, then `data` in chunks of `chunk` bytes, with at most
// `chunks` chunks, then half-closes; the call's status.
grpc::Status Upload(v1::Aggregator::Stub& stub, grpc::ClientContext& ctx, const v1::AggregateStreamRequest& header,
                    const std::string& data, std::size_t chunk, std::size_t chunks, v1::AggregateResponse* resp) {
  auto writer = stub.AggregateStream(&ctx, resp);
  bool open = writer->Write(header);
  for (std::size_t at = 0, n = 0; open && at < data.size() && n < chunks; at += chunk, ++n) {
    open = writer->Write(Chunk(data.substr(at, chunk)));
  }
  writer->WritesDone();
  return writer->Finish();
}

// Polls `done` until it holds (true) or `limit` has passed (false).
template <typename Done>
bool WaitUntil(Done&& done, std::chrono::milliseconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

grpc::internal::RpcMethod AsBidi(const char* name) {
  // Every kind of call is the same on the wire; reading and writing raw
  // messages as on a bidirectional stream reaches any method.
  return grpc::internal::RpcMethod(name, grpc::internal::RpcMethod::BIDI_STREAMING);
}

}  // namespace

std::shared_ptr<grpc::Channel> NewConnection(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

double ServedRun::Percentile(double p) const {
  if (seconds.empty()) return 0;
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

std::string ServedRun::Summary() const {
  std::string s = absl::StrFormat("%d ok, %d failed (%s), p50 %.1f ms, p99 %.1f ms, max %.1f ms",
                                  static_cast<int>(seconds.size()), failures, CodesSummary(codes),
                                  Percentile(50) * 1e3, Percentile(99) * 1e3, Percentile(100) * 1e3);
  if (!first_error.empty()) absl::StrAppend(&s, "; first error: ", first_error);
  return s;
}

ServedRun WellBehavedClient(const std::shared_ptr<grpc::Channel>& channel, int requests,
                            std::chrono::milliseconds deadline) {
  auto stub = v1::Aggregator::NewStub(channel);
  const std::vector<std::int32_t> small = RandomInts(64 << 10, 1);
  const std::vector<std::int32_t> large = RandomInts(256 << 10, 2);
  v1::AggregateRequest unary;
  unary.mutable_spec()->set_dtype(v1::DTYPE_INT32);
  unary.set_data(Bytes(small));
  *unary.add_aggregations() = Sum();
  const std::string large_bytes = Bytes(large);

  ServedRun run;
  for (int i = 0; i < requests; ++i) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, deadline);
    v1::AggregateResponse resp;
    const Clock::time_point start = Clock::now();
    std::int64_t expected = 0;
    grpc::Status status;
    if (i % 2 == 0) {
      expected = SumOf(small);
      status = stub->Aggregate(&ctx, unary, &resp);
    } else {
      expected = SumOf(large);
      status = Upload(*stub, ctx, Header(v1::DTYPE_INT32, large.size()), large_bytes, 256 << 10, SIZE_MAX, &resp);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (status.ok() && (resp.results_size() != 1 || resp.results(0).int64s().values_size() != 1 ||
                        resp.results(0).int64s().values(0) != expected)) {
      status = grpc::Status(grpc::StatusCode::DATA_LOSS, "a wrong sum: " + resp.ShortDebugString());
    }
    ++run.codes[status.error_code()];
    if (status.ok()) {
      run.seconds.push_back(seconds);
    } else {
      ++run.failures;
      if (run.first_error.empty()) {
        run.first_error = absl::StrCat(CodeName(status.error_code()), ": ", status.error_message());
      }
    }
  }
  return run;
}

void Outcomes::Add(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++codes_[status.error_code()];
  messages_.emplace(status.error_code(), status.error_message());
}

int Outcomes::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [code, c] : codes_) n += c;
  return n;
}

int Outcomes::count(grpc::StatusCode code) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = codes_.find(code);
  return it == codes_.end() ? 0 : it->second;
}

std::string Outcomes::AnyMessage(grpc::StatusCode code) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = messages_.find(code);
  return it == messages_.end() ? "" : it->second;
}

std::string Outcomes::Summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CodesSummary(codes_);
}

SilentStreams::SilentStreams(const std::string& target, int streams, std::uint64_t array_bytes,
                             std::chrono::milliseconds trickle_every)
    : target_(target), array_bytes_(array_bytes), trickle_every_(trickle_every) {
  for (int i = 0; i < streams; ++i) {
    contexts_.push_back(std::make_unique<grpc::ClientContext>());
    contexts_.back()->set_wait_for_ready(true);  // a connection that fails at first is tried again
  }
  for (int i = 0; i < streams; ++i) threads_.emplace_back([this, i] { Run(i); });
}

SilentStreams::~SilentStreams() { Stop(); }

void SilentStreams::Run(int index) {
  auto channel = NewConnection(target_);
  grpc::ClientContext& ctx = *contexts_[index];
  // A client-streaming call driven as a bidirectional one: Read() waits for
  // the server's answer without half-closing, which Finish() would do.
  std::unique_ptr<grpc::ClientReaderWriter<v1::AggregateStreamRequest, v1::AggregateResponse>> call(
      grpc::internal::ClientReaderWriterFactory<v1::AggregateStreamRequest, v1::AggregateResponse>::Create(
          channel.get(), AsBidi("/tally.v1.Aggregator/AggregateStream"), &ctx));
  bool open = call->Write(Header(v1::DTYPE_FLOAT32, array_bytes_ / sizeof(float)));
  started_.fetch_add(1);
  // Reading is how the client learns that the server ended the call:
  // writes may still be taken after it has.
  std::atomic<bool> ended{false};
  std::thread reader([&] {
    v1::AggregateResponse resp;
    while (call->Read(&resp)) {
    }
    ended.store(true);
  });
  if (trickle_every_.count() > 0) {
    const v1::AggregateStreamRequest byte = Chunk(std::string(1, '\x42'));
    while (open && !stop_.load() && !ended.load()) {
      std::this_thread::sleep_for(trickle_every_);
      open = call->Write(byte);
    }
  }
  reader.join();  // until the server ends the call, or Stop() cancels it
  outcomes_.Add(call->Finish());
  ended_.fetch_add(1);
}

bool SilentStreams::WaitStarted(std::chrono::milliseconds limit) {
  return WaitUntil([&] { return started_.load() == static_cast<int>(threads_.size()); }, limit);
}

bool SilentStreams::WaitEnded(std::chrono::milliseconds limit) {
  return WaitUntil([&] { return ended_.load() == static_cast<int>(threads_.size()); }, limit);
}

void SilentStreams::Stop() {
  stop_.store(true);
  for (auto& ctx : contexts_) ctx->TryCancel();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

IdleConnections::IdleConnections(const std::string& target, int count) {
  for (int i = 0; i < count; ++i) channels_.push_back(NewConnection(target));
}

int IdleConnections::WaitConnected(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::system_clock::now() + limit;
  int connected = 0;
  for (auto& channel : channels_) connected += channel->WaitForConnected(deadline);
  return connected;
}

int IdleConnections::ClosedByServer() {
  int closed = 0;
  for (auto& channel : channels_) closed += channel->GetState(false) == GRPC_CHANNEL_IDLE;
  return closed;
}

const Method kEveryMethod[6] = {
    {"/tally.v1.Aggregator/Aggregate", false},
    {"/tally.v1.Aggregator/AggregateStream", true},
    {"/grpc.health.v1.Health/Check", false},
    {"/grpc.health.v1.Health/Watch", false},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", true},
    {"/tally.v1.Aggregator/GroupByStream", true},
};

namespace {

// A valid request of each method in kEveryMethod, serialized.
std::string ValidRequest(int method, Rng& rng) {
  switch (method) {
    case 0: {
      v1::AggregateRequest r;
      r.mutable_spec()->set_dtype(v1::DTYPE_INT32);
      r.set_data(Bytes(RandomInts(16, rng())));
      *r.add_aggregations() = Sum();
      return r.SerializeAsString();
    }
    case 1:
      return rng() % 2 ? Header(v1::DTYPE_INT32, 16).SerializeAsString()
                       : Chunk(Bytes(RandomInts(4, rng()))).SerializeAsString();
    case 2:
    case 3:
      return std::string("\x0a\x13tally.v1.Aggregator", 21);  // HealthCheckRequest{service}
    case 4:
      return std::string("\x3a\x00", 2);  // ServerReflectionRequest{list_services: ""}
    default: {
      // A header of a 4-row table of an int32 key and a float32 value, or
      // a chunk of one of them.
      v1::GroupByStreamRequest m;
      if (rng() % 2) {
        v1::GroupByRequest& r = *m.mutable_header()->mutable_request();
        for (const auto& [name, dtype] : {std::pair{"k", v1::DTYPE_INT32}, std::pair{"v", v1::DTYPE_FLOAT32}}) {
          v1::Column* c = r.add_columns();
          c->set_name(name);
          c->set_dtype(dtype);
        }
        r.add_keys("k");
        v1::GroupAggregation* a = r.add_aggregations();
        a->set_column("v");
        *a->mutable_aggregation() = Sum();
        m.mutable_header()->set_rows(4);
      } else {
        m.set_column(static_cast<std::uint32_t>(rng() % 2));
        m.set_chunk(Bytes(RandomInts(4, rng())));
      }
      return m.SerializeAsString();
    }
  }
}

// Bytes that are not quite `method`'s request message.
std::string Malformed(int method, Rng& rng) {
  std::string m = ValidRequest(method, rng);
  switch (rng() % 5) {
    case 0: {  // noise
      m.resize(rng() % 512);
      for (char& c : m) c = static_cast<char>(rng());
      break;
    }
    case 1:  // flipped bytes
      for (int i = 1 + static_cast<int>(rng() % 4); i > 0 && !m.empty(); --i) m[rng() % m.size()] ^= 1 << (rng() % 8);
      break;
    case 2:  // cut short
      m.resize(m.empty() ? 0 : rng() % m.size());
      break;
    case 3:  // field 1 as a varint that never ends
      m += std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 12);
      break;
    default:  // a length past the end
      m += std::string("\x12\xff\xff\xff\x07", 5);
      break;
  }
  return m;
}

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

MalformedCalls::MalformedCalls(const std::string& target, int threads, int calls, std::uint64_t seed)
    : target_(target), limit_(calls) {
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t, seed] { Run(t, seed + t); });
}

MalformedCalls::~MalformedCalls() { Stop(); }

void MalformedCalls::Stop() {
  stop_.store(true);
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::map<std::string, std::map<grpc::StatusCode, int>> MalformedCalls::Codes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return codes_;
}

void MalformedCalls::Run(int thread, std::uint64_t seed) {
  Rng rng(seed);
  auto channel = NewConnection(target_);
  for (int i = thread; !stop_.load() && done_.fetch_add(1) < limit_; ++i) {
    const int method = i % static_cast<int>(std::size(kEveryMethod));
    const Method& m = kEveryMethod[method];
    grpc::ClientContext ctx;
    // Watch answers a valid request forever: every call gets a deadline.
    SetDeadline(ctx, 2s);
    grpc::Status status;
    if (!m.client_streams && method != 3) {
      grpc::ByteBuffer request = ToBuffer(Malformed(method, rng)), response;
      status = grpc::internal::BlockingUnaryCall(channel.get(), grpc::internal::RpcMethod(m.name, grpc::internal::RpcMethod::NORMAL_RPC),
                                                 &ctx, request, &response);
    } else {
      std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> call(
          grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
              channel.get(), AsBidi(m.name), &ctx));
      const int messages = m.client_streams ? 1 + static_cast<int>(rng() % 3) : 1;
      for (int k = 0; k < messages; ++k) {
        // A stream of the service's own kind: sometimes a valid first
        // message, so that the malformed one comes later.
        const std::string bytes = k == 0 && rng() % 2 ? ValidRequest(method, rng) : Malformed(method, rng);
        if (!call->Write(ToBuffer(bytes))) break;
      }
      call->WritesDone();
      grpc::ByteBuffer response;
      // Watch answers a request it could parse, then watches forever.
      if (method == 3 && call->Read(&response)) ctx.TryCancel();
      while (call->Read(&response)) {
      }
      status = call->Finish();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++codes_[m.name][status.error_code()];
    ended_.fetch_add(1);
  }
}

bool MalformedCalls::WaitCalls(int n, std::chrono::milliseconds limit) const {
  return WaitUntil([&] { return ended_.load() >= n; }, limit);
}

bool RandomCancellations::WaitCalls(int n, std::chrono::milliseconds limit) const {
  return WaitUntil([&] { return outcomes_.count() >= n; }, limit);
}

RandomCancellations::RandomCancellations(const std::string& target, int threads, int calls, std::uint64_t seed)
    : target_(target), limit_(calls) {
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t, seed] { Run(seed + t); });
}

RandomCancellations::~RandomCancellations() { Stop(); }

void RandomCancellations::Stop() {
  stop_.store(true);
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void RandomCancellations::Run(std::uint64_t seed) {
  Rng rng(seed);
  auto stub = v1::Aggregator::NewStub(NewConnection(target_));
  const std::vector<std::int32_t> values = RandomInts(1 << 20, seed);  // 4 MiB
  const std::string data = Bytes(values);
  constexpr std::size_t kChunk = 256 << 10;
  const std::size_t chunks = data.size() / kChunk;
  v1::AggregateRequest unary;
  unary.mutable_spec()->set_dtype(v1::DTYPE_INT32);
  unary.set_data(data.substr(0, 1 << 20));
  *unary.add_aggregations() = Sum();
  const v1::AggregateStreamRequest header = Header(v1::DTYPE_INT32, values.size());

  while (!stop_.load() && done_.fetch_add(1) < limit_) {
    grpc::ClientContext ctx;
    v1::AggregateResponse resp;
    grpc::Status status;
    switch (rng() % 5) {
      case 0:  // a unary call whose deadline may pass at any point
        SetDeadline(ctx, std::chrono::milliseconds(rng() % 8));
        status = stub->Aggregate(&ctx, unary, &resp);
        break;
      case 1: {  // a stream cancelled after a random number of chunks
        auto writer = stub->AggregateStream(&ctx, &resp);
        bool open = writer->Write(header);
        const std::size_t stop_after = rng() % (chunks + 1);
        for (std::size_t k = 0; open && k < stop_after; ++k) open = writer->Write(Chunk(data.substr(k * kChunk, kChunk)));
        ctx.TryCancel();
        status = writer->Finish();
        break;
      }
      case 2:  // a stream whose deadline passes during the upload, or not
        SetDeadline(ctx, std::chrono::milliseconds(1 + rng() % 40));
        status = Upload(*stub, ctx, header, data, kChunk, SIZE_MAX, &resp);
        break;
      case 3:  // a stream closed before all its chunks were sent
        status = Upload(*stub, ctx, header, data, kChunk, rng() % chunks, &resp);
        break;
      default: {  // cancelled from another thread while the call is on its way
        std::thread canceller([&ctx, delay = std::chrono::microseconds(rng() % 3000)] {
          std::this_thread::sleep_for(delay);
          ctx.TryCancel();
        });
        status = Upload(*stub, ctx, header, data, kChunk, SIZE_MAX, &resp);
        canceller.join();
        break;
      }
    }
    outcomes_.Add(status);
  }
}

}  // namespace tally::hostile
