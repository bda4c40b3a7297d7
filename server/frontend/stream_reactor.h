// The reactor of a client-streaming call whose first message is a header and
// whose later messages are chunks of an array's bytes (AggregateStream,
// PutDataset). gRPC threads deliver messages (OnReadDone), whose chunks are
// queued as they arrived, in gRPC's receive buffers; a worker feeds queued
// chunks to the call's StreamJob in order, so receiving chunk k overlaps with
// handling chunk k-1. At most max_queued_chunks chunks wait; beyond that
// reading pauses until the worker catches up. Finish() is called exactly
// once, and only when no worker task is running, because OnDone() deletes
// the reactor.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "server/frontend/executor.h"
#include "server/frontend/raw_message.h"
#include "server/frontend/request_record.h"
#include "tally/ops/op.h"

namespace tally {

// What one streaming call does with its messages.
class StreamJob {
 public:
  virtual ~StreamJob() = default;
  // Parses a message: the chunk's bytes in place; *is_header tells whether
  // it was the header instead (its fields are then kept by the job).
  [[nodiscard]] virtual absl::StatusOr<SlicedBytes> Parse(const grpc::ByteBuffer& raw, bool* is_header) = 0;
  // Checks the first message, just parsed, which must be the header; on the
  // gRPC thread: no waiting here.
  [[nodiscard]] virtual absl::Status TakeHeader() = 0;
  // The bytes the header announced, and how it said so, for messages.
  virtual std::uint64_t declared_bytes() const = 0;
  virtual std::string Declared() const = 0;
  virtual std::vector<ops::OpKind> ops() const { return {}; }
  // On a request worker, after the header: waits for what the work needs
  // (admission, a GPU lane, memory). Chunks are read once it succeeded.
  [[nodiscard]] virtual absl::Status Start() = 0;
  // On a chunk worker, one call at a time, in order.
  [[nodiscard]] virtual absl::Status Consume(const SlicedBytes& chunk) = 0;
  // Every declared byte arrived: the serialized response.
  [[nodiscard]] virtual absl::Status Finish(double server_seconds, grpc::ByteBuffer* response) = 0;
  // Elements the call processed, for its record, once finished.
  virtual std::uint64_t elements() const { return 0; }
};

struct StreamReactorOptions {
  Executor* request_workers = nullptr;
  Executor* chunk_workers = nullptr;
  int max_queued_chunks = 2;
};

class ClientStreamReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  // `refusal`, when not OK, ends the call at once (the server is draining).
  ClientStreamReactor(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                      grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
                      RequestRecord record, const absl::Status& refusal);

  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  void StartJob();
  void Drain();
  void FailLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status);
  void FinishLocked(std::unique_lock<std::mutex>& lock);
  absl::Status Outcome() const;

  std::unique_ptr<StreamJob> job_;
  const StreamReactorOptions options_;
  grpc::CallbackServerContext* context_;
  grpc::ByteBuffer* response_;
  RequestRecord record_;
  grpc::ByteBuffer message_;  // the read in flight writes here

  std::mutex mu_;
  std::deque<SlicedBytes> queue_;
  std::uint64_t received_bytes_ = 0;
  absl::Status error_;
  bool header_seen_ = false;
  bool started_ = false;
  bool worker_active_ = false;
  bool read_paused_ = false;
  bool input_ended_ = false;
  bool cancelled_ = false;
  bool done_ = false;
};

}  // namespace tally
