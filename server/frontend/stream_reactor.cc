#include "server/frontend/stream_reactor.h"

#include "absl/strings/str_cat.h"
#include "server/frontend/status.h"

namespace tally {

ClientStreamReactor::ClientStreamReactor(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                                         grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
                                         RequestRecord record, StreamCaller caller, const absl::Status& refusal)
    : job_(std::move(job)),
      options_(options),
      context_(context),
      response_(response),
      record_(std::move(record)),
      caller_(std::move(caller)) {
  options_.watchdog->Add(this);
  std::unique_lock<std::mutex> lock(mu_);
  if (!refusal.ok()) {
    FailLocked(lock, refusal);
  } else {
    ReadLocked();
  }
}

void ClientStreamReactor::OnReadDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_) return;
  const Clock::time_point now = Clock::now();
  window_waited_ += now - window_mark_;
  read_since_.reset();
  if (!ok) {
    // The client closed its side (or the call broke): no more chunks.
    input_ended_ = true;
    return EndOfInputLocked(lock);
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
    // Nothing is reserved until the first chunk arrives; the rate is judged
    // from here.
    window_waited_ = Clock::duration::zero();
    window_bytes_ = 0;
    return ReadLocked();
  }
  if (is_header) {
    return FailLocked(lock, absl::InvalidArgumentError(
                                "header: a stream carries one header, in its first message; every "
                                "later message must be a chunk."));
  }
  received_bytes_ += chunk->size();
  window_bytes_ += chunk->size();
  record_.AddBytes(chunk->size());
  if (received_bytes_ > job_->declared_bytes()) {
    return FailLocked(lock, absl::InvalidArgumentError(absl::StrCat("chunk: the stream sent more than the ",
                                                                    job_->declared_bytes(), " bytes that ",
                                                                    job_->Declared(), " announced.")));
  }
  if (absl::Status s = CheckRateLocked(now, window_waited_); !s.ok()) return FailLocked(lock, s);
  if (!started_) return AdmitOnWorkerLocked(std::move(*chunk));
  absl::StatusOr<AdmissionController::Ticket> ticket = options_.admission->TryAdmit(chunk->size(), caller_.identity);
  if (!ticket.ok()) return AdmitOnWorkerLocked(std::move(*chunk));
  QueueLocked(std::move(*chunk), std::move(*ticket));
}

void ClientStreamReactor::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

void ClientStreamReactor::OnDone() {
  options_.watchdog->Remove(this);
  Unref();
}

void ClientStreamReactor::CheckProgress(Clock::time_point now) {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_ || !read_since_.has_value()) return;  // not waiting for the client
  if (options_.idle_timeout.count() > 0 && now - *read_since_ >= options_.idle_timeout) {
    return FailLocked(lock, absl::DeadlineExceededError(absl::StrCat(
                                "the stream sent no message for ", options_.idle_timeout.count(),
                                " ms (--stream_idle_timeout_ms); it was ended and what it held was freed.")));
  }
  if (absl::Status s = CheckRateLocked(now, window_waited_ + (now - window_mark_)); !s.ok()) {
    return FailLocked(lock, s);
  }
}

// Asks the client for its next message; the watchdog times the wait.
void ClientStreamReactor::ReadLocked() {
  read_since_ = window_mark_ = Clock::now();
  StartRead(&message_);
}

// Once the header has come, each rate window of waiting for the client must
// bring min_bytes_per_second; `waited` is the time waited in this window so
// far. A window that did is forgotten.
absl::Status ClientStreamReactor::CheckRateLocked(Clock::time_point now, Clock::duration waited) {
  if (!header_seen_ || options_.min_bytes_per_second == 0 || options_.rate_window.count() <= 0) {
    return absl::OkStatus();
  }
  if (waited < options_.rate_window) return absl::OkStatus();
  const double seconds = std::chrono::duration<double>(waited).count();
  if (static_cast<double>(window_bytes_) < static_cast<double>(options_.min_bytes_per_second) * seconds) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the stream sent ", window_bytes_, " bytes in ", absl::SixDigits(seconds), " s, below the minimum of ",
        options_.min_bytes_per_second,
        " bytes per second (--stream_min_bytes_per_second); it was ended and what it held was freed."));
  }
  window_waited_ = Clock::duration::zero();
  window_bytes_ = 0;
  window_mark_ = now;
  return absl::OkStatus();
}

// The chunk is queued for the job once admitted (and, for the first chunk,
// once the job has started): both may wait, so on a request worker, not on
// this gRPC thread. Reading pauses meanwhile.
void ClientStreamReactor::AdmitOnWorkerLocked(SlicedBytes chunk) {
  admitting_ = true;
  const bool first = !started_;
  auto held = std::make_shared<SlicedBytes>(std::move(chunk));
  options_.request_workers->Post([this, held, first] { AdmitAndQueue(std::move(*held), first); });
}

void ClientStreamReactor::AdmitAndQueue(SlicedBytes chunk, bool first) {
  const std::uint64_t results = first ? job_->result_bytes() : 0;
  absl::StatusOr<AdmissionController::Ticket> ticket =
      options_.admission->Admit(chunk.size() + results, caller_.identity);
  AdmissionController::Ticket held;
  if (ticket.ok() && results > 0) held = ticket->Split(results);
  absl::Status started;
  if (first) started = ticket.ok() ? job_->Start() : ticket.status();
  std::unique_lock<std::mutex> lock(mu_);
  admitting_ = false;
  if (!ticket.ok()) return FailLocked(lock, ticket.status());
  if (first) {
    if (!started.ok()) return FailLocked(lock, started);
    started_ = true;
    results_ = std::move(held);
  }
  if (done_ || cancelled_ || !error_.ok()) return FailLocked(lock, error_);
  QueueLocked(std::move(chunk), std::move(*ticket));
}

// Queues an admitted chunk, wakes the worker, and reads on unless the queue
// is full or the input has ended.
void ClientStreamReactor::QueueLocked(SlicedBytes chunk, AdmissionController::Ticket ticket) {
  queue_.push_back(Queued{std::move(chunk), std::move(ticket)});
  if (!draining_queue_) {
    draining_queue_ = true;
    options_.chunk_workers->Post([this] { Drain(); });
  }
  if (input_ended_) return;
  if (static_cast<int>(queue_.size()) < options_.max_queued_chunks) {
    ReadLocked();
  } else {
    read_paused_ = true;
  }
}

// Worker: feeds queued chunks to the job until the queue is empty.
void ClientStreamReactor::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!queue_.empty() && error_.ok() && !cancelled_) {
    Queued chunk = std::move(queue_.front());
    queue_.pop_front();
    if (read_paused_ && !input_ended_) {
      read_paused_ = false;
      ReadLocked();
    }
    lock.unlock();
    absl::Status s = job_->Consume(chunk.bytes);
    chunk = Queued();  // its bytes are consumed: their share of the budget goes back
    lock.lock();
    if (!s.ok() && error_.ok()) error_ = s;
  }
  draining_queue_ = false;
  queue_.clear();
  if (input_ended_ || !error_.ok() || cancelled_) FinishLocked(lock);
}

// The client has closed its side. An empty array has no chunk to start the
// job with: it starts now, with an empty one.
void ClientStreamReactor::EndOfInputLocked(std::unique_lock<std::mutex>& lock) {
  if (!started_ && !admitting_ && header_seen_ && error_.ok() && !cancelled_ && job_->declared_bytes() == 0) {
    return AdmitOnWorkerLocked(SlicedBytes());
  }
  if (job_->FinishMayWait() && started_ && !admitting_ && !draining_queue_ && error_.ok() && !cancelled_) {
    draining_queue_ = true;  // Drain, with nothing queued, finishes the call
    options_.chunk_workers->Post([this] { Drain(); });
    return;
  }
  FinishLocked(lock);
}

void ClientStreamReactor::FailLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status) {
  if (error_.ok()) error_ = status;
  FinishLocked(lock);
}

// Ends the call unless a worker is running (it finishes the call when it is
// done); the caller holds mu_.
void ClientStreamReactor::FinishLocked(std::unique_lock<std::mutex>& lock) {
  if (done_ || admitting_ || draining_queue_) return;
  done_ = true;
  read_since_.reset();
  absl::Status status = Outcome();
  if (status.ok()) status = job_->Finish(record_.Seconds(), response_);
  const std::uint64_t elements = status.ok() ? job_->elements() : 0;
  // What the job holds (a reduction, a lane, an unfinished upload) goes now,
  // and the caller's place under its stream quota with it.
  job_.reset();
  queue_.clear();
  results_ = AdmissionController::Ticket();
  caller_.stream.Release();
  lock.unlock();
  record_.Complete(status, elements);
  Finish(ToGrpcStatus(status));
}

absl::Status ClientStreamReactor::Outcome() const {
  if (cancelled_ || context_->IsCancelled()) {
    return absl::CancelledError("the client cancelled the stream, or its deadline passed.");
  }
  if (!error_.ok()) return error_;
  if (!header_seen_) return absl::InvalidArgumentError("header: the stream ended before its header.");
  if (received_bytes_ < job_->declared_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk: the stream ended early, after ", received_bytes_,
                                                   " of the ", job_->declared_bytes(), " bytes that ",
                                                   job_->Declared(), " announced."));
  }
  if (!started_) return absl::InternalError("the stream ended before its work started.");
  return absl::OkStatus();
}

}  // namespace tally
