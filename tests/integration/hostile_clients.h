// Clients that misbehave on purpose, and one that behaves, for the
// hostile-client tests (hostile_test.cc) and the before/after measurement
// (hostile_bench.cc). Every attack is bounded: it stops when told to, or
// when its own count or time runs out, and never outlives its object.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally::hostile {

using namespace std::chrono_literals;

// A channel of its own (its own TCP connection), as a separate client has.
std::shared_ptr<grpc::Channel> NewConnection(const std::string& target);

// What a run of the well-behaved client saw.
struct ServedRun {
  std::vector<double> seconds;  // the latency of each successful request
  int failures = 0;
  std::map<grpc::StatusCode, int> codes;  // every request's final code
  std::string first_error;

  double Percentile(double p) const;  // 0 when nothing succeeded
  std::string Summary() const;        // "40 ok, 0 failed, p50 1.2 ms, p99 3.4 ms"
};

// A client that does what the README says: `requests` calls, one after the
// other, alternating a unary Aggregate of 256 KiB and an AggregateStream of
// 1 MiB in 256 KiB chunks, each checked against the sum it must give and
// given `deadline` to finish.
ServedRun WellBehavedClient(const std::shared_ptr<grpc::Channel>& channel, int requests,
                            std::chrono::milliseconds deadline = 30s);

// The final status of each attacking call, collected as they end.
class Outcomes {
 public:
  void Add(const grpc::Status& status);
  int count() const;
  int count(grpc::StatusCode code) const;
  // The message of one call that ended with `code` ("" if none did).
  std::string AnyMessage(grpc::StatusCode code) const;
  std::string Summary() const;  // "64 DEADLINE_EXCEEDED, 2 CANCELLED"

 private:
  mutable std::mutex mu_;
  std::map<grpc::StatusCode, int> codes_;
  std::map<grpc::StatusCode, std::string> messages_;
};

// `streams` AggregateStream calls, each on its own connection, that send a
// header for an array of `array_bytes` and then nothing (the attack in issue
// 18). If `trickle_every` is set, each then sends a 1-byte chunk that often
// instead. Stop() cancels the calls the server has not ended.
class SilentStreams {
 public:
  SilentStreams(const std::string& target, int streams, std::uint64_t array_bytes,
                std::chrono::milliseconds trickle_every = 0ms);
  ~SilentStreams();  // Stop()

  // Blocks until every header was sent (false after `limit`).
  bool WaitStarted(std::chrono::milliseconds limit = 10s);
  // Blocks until the server has ended every call (false after `limit`).
  bool WaitEnded(std::chrono::milliseconds limit);
  void Stop();
  const Outcomes& outcomes() const { return outcomes_; }

 private:
  void Run(int index);

  const std::string target_;
  const std::uint64_t array_bytes_;
  const std::chrono::milliseconds trickle_every_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::thread> threads_;
  std::atomic<int> started_{0};
  std::atomic<int> ended_{0};
  std::atomic<bool> stop_{false};
  Outcomes outcomes_;
};

// `count` connections that connect and then never call.
class IdleConnections {
 public:
  IdleConnections(const std::string& target, int count);
  // Blocks until all are connected; the number that are.
  int WaitConnected(std::chrono::milliseconds limit = 20s);
  // How many the server has closed (their channels went back to IDLE).
  int ClosedByServer();

 private:
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
};

// Every RPC the server serves, by full method name, with whether the client
// streams (the server's answers are read either way).
struct Method {
  const char* name;
  bool client_streams;
};
extern const Method kEveryMethod[6];

// Threads that call every method with bytes that are not, or are not quite,
// the method's request message: random bytes, valid requests with bytes
// flipped, cut short, or with a field of the wrong wire type. Runs until
// Stop() or `calls` calls in all.
class MalformedCalls {
 public:
  MalformedCalls(const std::string& target, int threads, int calls, std::uint64_t seed);
  ~MalformedCalls();  // Stop()
  void Stop();
  // Blocks until `n` calls have ended (false after `limit`).
  bool WaitCalls(int n, std::chrono::milliseconds limit = 30s) const;
  // Final codes by method.
  std::map<std::string, std::map<grpc::StatusCode, int>> Codes() const;
  int calls() const { return ended_.load(); }

 private:
  void Run(int thread, std::uint64_t seed);

  const std::string target_;
  const int limit_;
  std::atomic<int> done_{0};
  std::atomic<int> ended_{0};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::map<grpc::StatusCode, int>> codes_;
  std::vector<std::thread> threads_;
};

// Threads that start real requests and abandon them at random points:
// cancelled before, during or after the upload, short deadlines, streams
// closed early. Runs until Stop() or `calls` calls in all.
class RandomCancellations {
 public:
  RandomCancellations(const std::string& target, int threads, int calls, std::uint64_t seed);
  ~RandomCancellations();  // Stop()
  void Stop();
  // Blocks until `n` calls have ended (false after `limit`).
  bool WaitCalls(int n, std::chrono::milliseconds limit = 30s) const;
  const Outcomes& outcomes() const { return outcomes_; }

 private:
  void Run(std::uint64_t seed);

  const std::string target_;
  const int limit_;
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  Outcomes outcomes_;
  std::vector<std::thread> threads_;
};

}  // namespace tally::hostile
