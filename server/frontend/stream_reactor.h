// The reactors of streaming calls whose first message is a header and
// whose later messages are chunks of bytes: AggregateStream and PutDataset
// (one array, answered in one message) and GroupByStream (a table's
// columns, answered in pages). gRPC threads deliver messages (OnReadDone),
// whose chunks are queued as they arrived, in gRPC's receive buffers; a
// worker feeds queued chunks to the call's StreamJob in order, so receiving
// chunk k overlaps with handling chunk k-1. At most max_queued_chunks chunks
// wait; beyond that reading pauses until the worker catches up.
//
// What a stream holds is charged to the bytes that actually arrive: nothing
// is taken at the header; the first chunk starts the job (a Reduction, and
// on the cuda backend a GPU lane; or an upload's memory); every chunk holds
// its own bytes of the in-flight budget from arrival until the job has
// consumed it, and a query's results theirs from its start to the end. So a
// client that sends a header and then nothing, or a byte
// now and then, holds no budget and no lane, and the watchdog ends such
// streams: while the server waits for a message, none may take longer than
// stream_idle_timeout, and the bytes must keep up stream_min_bytes_per_second
// over each stream_rate_window.
//
// The call is answered exactly once, and only when no worker task is running
// (workers touch the reactor, and OnDone() ends its life).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/frontend/admission.h"
#include "server/frontend/executor.h"
#include "server/frontend/identity_quota.h"
#include "server/frontend/raw_message.h"
#include "server/frontend/request_record.h"
#include "server/frontend/stream_watchdog.h"
#include "tally/rules/op.h"

namespace tally {

// A chunk message's bytes, in gRPC's receive buffers, and which part of the
// call's input they extend: the job's own numbering (GroupByStream's columns
// and their masks); 0 where the input is one array.
struct StreamChunk {
  SlicedBytes bytes;
  std::uint32_t part = 0;
};

// A stream message parsed with its chunk (bytes field `chunk_field`, a
// member of the message's oneof) left in gRPC's buffers; *is_header when
// the oneof holds anything else. The jobs' Parse.
template <typename Message>
absl::StatusOr<SlicedBytes> ParseStreamMessage(const grpc::ByteBuffer& raw, int chunk_field, Message* message,
                                               bool* is_header) {
  message->Clear();
  absl::StatusOr<SlicedBytes> chunk = ParseWithBytesInPlace(raw, chunk_field, message);
  *is_header = static_cast<int>(message->payload_case()) != chunk_field;
  return chunk;
}

// What one streaming call does with its messages.
class StreamJob {
 public:
  virtual ~StreamJob() = default;
  // Parses a message: the chunk's bytes in place; *is_header tells whether
  // it was the header instead (its fields are then kept by the job).
  // On the gRPC thread, one message at a time, in order.
  [[nodiscard]] virtual absl::StatusOr<StreamChunk> Parse(const grpc::ByteBuffer& raw, bool* is_header) = 0;
  // Checks the first message, just parsed, which must be the header; on the
  // gRPC thread: no waiting here.
  [[nodiscard]] virtual absl::Status TakeHeader() = 0;
  // The bytes the header announced, and how it said so, for messages.
  virtual std::uint64_t declared_bytes() const = 0;
  virtual std::string Declared() const = 0;
  // Bytes the job holds from its start until the call ends (a query's
  // results), admitted with the first chunk as one request, so that a call
  // larger than the budget or the caller's quota still runs alone, as a
  // unary one does.
  virtual std::uint64_t result_bytes() const { return 0; }
  // The ops asked for, for the call's record, when it ends.
  virtual std::vector<rules::OpKind> ops() const { return {}; }
  // On a request worker, when the first chunk has arrived (or the input
  // ended with an empty array): takes what the work needs (a Reduction, a
  // GPU lane, memory), waiting if need be.
  [[nodiscard]] virtual absl::Status Start() = 0;
  // On a chunk worker, one call at a time, in order.
  // On a chunk worker, one call at a time, in order. (The chunk that starts
  // an empty input has no message: an empty chunk of part 0.)
  [[nodiscard]] virtual absl::Status Consume(const StreamChunk& chunk) = 0;
  // Every declared byte arrived: the serialized response (a paged answer's
  // first message).
  [[nodiscard]] virtual absl::Status Finish(double server_seconds, grpc::ByteBuffer* response) = 0;
  // A paged answer's next message after Finish's: false once there is none.
  [[nodiscard]] virtual absl::StatusOr<bool> NextMessage(grpc::ByteBuffer* /*message*/) { return false; }
  // Elements the call processed, for its record, once finished.
  virtual std::uint64_t elements() const { return 0; }
  // Whether each chunk's bytes stay held once consumed (copied into memory
  // the job keeps until the call ends): their share of the in-flight
  // budget is then kept with them, not given back.
  virtual bool KeepsChunkBytes() const { return false; }
  // Whether Finish() may wait (for memory, or for the disk): it then runs
  // on a chunk worker, never on the gRPC thread that saw the input end.
  virtual bool FinishMayWait() const { return false; }
};

struct StreamReactorOptions {
  Executor* request_workers = nullptr;
  Executor* chunk_workers = nullptr;
  AdmissionController* admission = nullptr;
  StreamWatchdog* watchdog = nullptr;
  int max_queued_chunks = 2;
  std::chrono::milliseconds idle_timeout{0};  // 0: never
  std::uint64_t min_bytes_per_second = 0;     // 0: no minimum
  std::chrono::milliseconds rate_window{0};
};

// Who a stream acts for: its identity, charged for its chunks' bytes, and
// its place under the identity's stream quota, held until the call ends.
struct StreamCaller {
  std::string identity;
  IdentityQuota::Charge stream;
};

// The reading half of a streaming call, whichever way it is answered: the
// reactors below pass gRPC's callbacks on to it.
class StreamReading : public StreamWatchdog::Watched {
 public:
  using Clock = StreamWatchdog::Clock;

  void CheckProgress(Clock::time_point now) override;

 protected:
  StreamReading(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                grpc::CallbackServerContext* context, RequestRecord record, StreamCaller caller);
  ~StreamReading() override = default;

  // Called at the end of the reactor's constructor (it calls the virtual
  // methods below): `refusal`, when not OK, ends the call at once (the
  // server is draining, the caller did not authenticate, or is over its
  // stream quota); otherwise the first read starts.
  void Begin(const absl::Status& refusal);

  // gRPC's callbacks, passed on by the reactor.
  void ReadDone(bool ok);
  void Cancelled();
  void Done();

  // The reactor's StartRead.
  virtual void StartReading(grpc::ByteBuffer* message) = 0;
  // The input is over (or the call failed) and no worker runs: `status` is
  // OK when every declared byte arrived and the job may finish. Called
  // once, without mu_; the reactor answers, then calls EndCall.
  virtual void Answer(absl::Status status) = 0;
  // Its Finish.
  virtual void FinishCall(const grpc::Status& status) = 0;

  StreamJob& job() { return *job_; }
  // From the call's arrival, as answers report it.
  double Seconds() const { return record_.Seconds(); }
  // Frees what the call holds (the job, its budget, its place under the
  // stream quota), records its outcome and finishes it.
  void EndCall(const absl::Status& status);

 private:
  // A received chunk, with its share of the in-flight budget.
  struct Queued {
    StreamChunk chunk;
    AdmissionController::Ticket ticket;
  };

  void ReadLocked();
  absl::Status CheckRateLocked(Clock::time_point now, Clock::duration waited);
  void AdmitOnWorkerLocked(StreamChunk chunk);
  void AdmitAndQueue(StreamChunk chunk, bool first);
  void QueueLocked(StreamChunk chunk, AdmissionController::Ticket ticket);
  void Drain();
  void EndOfInputLocked(std::unique_lock<std::mutex>& lock);
  void FailLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status);
  void FinishLocked(std::unique_lock<std::mutex>& lock);
  absl::Status Outcome() const;

  std::unique_ptr<StreamJob> job_;
  const StreamReactorOptions options_;
  grpc::CallbackServerContext* context_;
  RequestRecord record_;
  StreamCaller caller_;
  AdmissionController::Ticket results_;  // the job's result_bytes, from its start until the call ends
  std::vector<AdmissionController::Ticket> kept_;  // consumed chunks' shares, where the job keeps their bytes
  grpc::ByteBuffer message_;  // the read in flight writes here

  std::mutex mu_;
  std::deque<Queued> queue_;
  std::uint64_t received_bytes_ = 0;
  absl::Status error_;
  bool header_seen_ = false;
  bool started_ = false;          // the job's Start() succeeded
  bool admitting_ = false;        // AdmitAndQueue is posted or running
  bool draining_queue_ = false;   // Drain is posted or running
  bool read_paused_ = false;
  bool input_ended_ = false;
  bool cancelled_ = false;
  bool done_ = false;
  // The watchdog's view: since when a read has waited for the client, and
  // the current rate window's waiting time (up to window_mark_) and bytes.
  std::optional<Clock::time_point> read_since_;
  Clock::time_point window_mark_;
  Clock::duration window_waited_{};
  std::uint64_t window_bytes_ = 0;
};

// gRPC's reactor `Base` reading a stream through StreamReading: its
// callbacks passed on, its StartRead and Finish lent.
template <typename Base>
class StreamReactorOf : public Base, public StreamReading {
 public:
  StreamReactorOf(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                  grpc::CallbackServerContext* context, RequestRecord record, StreamCaller caller)
      : StreamReading(std::move(job), options, context, std::move(record), std::move(caller)) {}

  void OnReadDone(bool ok) override { ReadDone(ok); }
  void OnCancel() override { Cancelled(); }
  void OnDone() override { Done(); }

 private:
  void Destroy() override { delete this; }
  void StartReading(grpc::ByteBuffer* message) override { this->StartRead(message); }
  void FinishCall(const grpc::Status& status) override { this->Finish(status); }
};

// A client-streaming call answered in one message (AggregateStream,
// PutDataset).
class ClientStreamReactor final : public StreamReactorOf<grpc::ServerReadReactor<grpc::ByteBuffer>> {
 public:
  ClientStreamReactor(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                      grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
                      RequestRecord record, StreamCaller caller, const absl::Status& refusal);

 private:
  void Answer(absl::Status status) override;

  grpc::ByteBuffer* response_;
};

// A streaming call answered in pages once its input is over
// (GroupByStream): the job's Finish gives the first message, NextMessage
// the others, each written once the one before it has been.
class PagedStreamReactor final
    : public StreamReactorOf<grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>> {
 public:
  PagedStreamReactor(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                     grpc::CallbackServerContext* context, RequestRecord record, StreamCaller caller,
                     const absl::Status& refusal);

  void OnWriteDone(bool ok) override;

 private:
  void Answer(absl::Status status) override;

  grpc::ByteBuffer page_;  // the write in flight reads it
};

}  // namespace tally
