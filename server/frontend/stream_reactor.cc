#include "server/frontend/stream_reactor.h"

#include "absl/strings/str_cat.h"
#include "server/frontend/status.h"

namespace tally {

ClientStreamReactor::ClientStreamReactor(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                                         grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
                                         RequestRecord record, const absl::Status& refusal)
    : job_(std::move(job)), options_(options), context_(context), response_(response), record_(std::move(record)) {
  if (!refusal.ok()) {
    done_ = true;
    record_.Complete(refusal, 0);
    Finish(ToGrpcStatus(refusal));
    return;
  }
  StartRead(&message_);
}

void ClientStreamReactor::OnReadDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_) return;
  if (!ok) {
    // The client closed its side (or the call broke): no more chunks.
    input_ended_ = true;
    if (!worker_active_) FinishLocked(lock);
    return;
  }
  bool is_header = false;
  absl::StatusOr<SlicedBytes> chunk = job_->Parse(message_, &is_header);
  // The chunk holds its own references to the receive buffers.
  message_.Clear();
  if (!chunk.ok()) return FailLocked(lock, chunk.status());
  if (!header_seen_) {
    // The job says what its header should have held when this is not one.
    header_seen_ = true;
    if (absl::Status s = job_->TakeHeader(); !s.ok()) return FailLocked(lock, s);
    record_.SetOps(job_->ops());
    // Admission and the backend may wait (for room, for a GPU lane): on a
    // request worker, not on this gRPC thread. The first chunk is read once
    // the job is ready.
    worker_active_ = true;
    options_.request_workers->Post([this] { StartJob(); });
    return;
  }
  if (is_header) {
    return FailLocked(lock, absl::InvalidArgumentError(
                                "header: a stream carries one header, in its first message; every "
                                "later message must be a chunk."));
  }
  received_bytes_ += chunk->size();
  record_.AddBytes(chunk->size());
  if (received_bytes_ > job_->declared_bytes()) {
    return FailLocked(lock, absl::InvalidArgumentError(absl::StrCat("chunk: the stream sent more than the ",
                                                                    job_->declared_bytes(), " bytes that ",
                                                                    job_->Declared(), " announced.")));
  }
  queue_.push_back(std::move(*chunk));
  if (!worker_active_) {
    worker_active_ = true;
    options_.chunk_workers->Post([this] { Drain(); });
  }
  if (static_cast<int>(queue_.size()) < options_.max_queued_chunks) {
    StartRead(&message_);
  } else {
    read_paused_ = true;
  }
}

void ClientStreamReactor::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

// Request worker: the job's admission and resources, waiting if need be,
// then the first chunk is read. The job's header is not written after
// TakeHeader(), so Start() reads it without the lock.
void ClientStreamReactor::StartJob() {
  absl::Status s = job_->Start();
  std::unique_lock<std::mutex> lock(mu_);
  worker_active_ = false;
  if (!s.ok()) return FailLocked(lock, s);
  started_ = true;
  if (cancelled_) return FinishLocked(lock);
  StartRead(&message_);
}

// Worker: feeds queued chunks to the job until the queue is empty.
void ClientStreamReactor::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!queue_.empty() && error_.ok() && !cancelled_) {
    SlicedBytes chunk = std::move(queue_.front());
    queue_.pop_front();
    if (read_paused_ && !input_ended_) {
      read_paused_ = false;
      StartRead(&message_);
    }
    lock.unlock();
    absl::Status s = job_->Consume(chunk);
    lock.lock();
    if (!s.ok() && error_.ok()) error_ = s;
  }
  worker_active_ = false;
  queue_.clear();
  if (input_ended_ || !error_.ok() || cancelled_) FinishLocked(lock);
}

void ClientStreamReactor::FailLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status) {
  if (error_.ok()) error_ = status;
  if (!worker_active_) FinishLocked(lock);
}

// Ends the call; the caller holds mu_ and no worker is running.
void ClientStreamReactor::FinishLocked(std::unique_lock<std::mutex>& lock) {
  if (done_) return;
  done_ = true;
  absl::Status status = Outcome();
  if (status.ok()) status = job_->Finish(record_.Seconds(), response_);
  const std::uint64_t elements = status.ok() ? job_->elements() : 0;
  // What the job holds (a reduction, a lane, an unfinished upload) goes now.
  job_.reset();
  lock.unlock();
  record_.Complete(status, elements);
  Finish(ToGrpcStatus(status));
}

absl::Status ClientStreamReactor::Outcome() const {
  if (cancelled_ || context_->IsCancelled()) {
    return absl::CancelledError("the client cancelled the stream, or its deadline passed.");
  }
  if (!error_.ok()) return error_;
  if (!header_seen_) {
    return absl::InvalidArgumentError("header: the stream ended before its header.");
  }
  if (!started_) return absl::InternalError("the stream ended before its work started.");
  if (received_bytes_ < job_->declared_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk: the stream ended early, after ", received_bytes_,
                                                   " of the ", job_->declared_bytes(), " bytes that ",
                                                   job_->Declared(), " announced."));
  }
  return absl::OkStatus();
}

}  // namespace tally
