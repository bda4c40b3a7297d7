#include "server/frontend/stream_reactor.h"

#include "absl/strings/str_cat.h"
#include "server/frontend/status.h"

namespace tally {

StreamReading::StreamReading(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                             grpc::CallbackServerContext* context, RequestRecord record, StreamCaller caller)
    : job_(std::move(job)),
      options_(options),
      context_(context),
      record_(std::move(record)),
      caller_(std::move(caller)) {}

void StreamReading::Begin(const absl::Status& refusal) {
  options_.watchdog->Add(this);
  std::unique_lock<std::mutex> lock(mu_);
  if (!refusal.ok()) {
    FailLocked(lock, refusal);
  } else {
    ReadLocked();
  }
}

ClientStreamReactor::ClientStreamReactor(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                                         grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
                                         RequestRecord record, StreamCaller caller, const absl::Status& refusal)
    : StreamReactorOf(std::move(job), options, context, std::move(record), std::move(caller)), response_(response) {
  Begin(refusal);
}

void ClientStreamReactor::Answer(absl::Status status) {
  if (status.ok()) status = job().Finish(Seconds(), response_);
  EndCall(status);
}

PagedStreamReactor::PagedStreamReactor(std::unique_ptr<StreamJob> job, const StreamReactorOptions& options,
                                       grpc::CallbackServerContext* context, RequestRecord record,
                                       StreamCaller caller, const absl::Status& refusal)
    : StreamReactorOf(std::move(job), options, context, std::move(record), std::move(caller)) {
  Begin(refusal);
}

void PagedStreamReactor::Answer(absl::Status status) {
  if (status.ok()) status = job().Finish(Seconds(), &page_);
  if (!status.ok()) return EndCall(status);
  StartWrite(&page_);
}

void PagedStreamReactor::OnWriteDone(bool ok) {
  if (!ok) return EndCall(absl::CancelledError("the client stopped reading the answer."));
  page_.Clear();
  absl::StatusOr<bool> more = job().NextMessage(&page_);
  if (more.ok() && *more) return StartWrite(&page_);
  EndCall(more.status());
}

void StreamReading::ReadDone(bool ok) {
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
  absl::StatusOr<StreamChunk> chunk = job_->Parse(message_, &is_header);
  // The chunk holds its own references to the receive buffers.
  message_.Clear();
  if (!chunk.ok()) return FailLocked(lock, chunk.status());
  if (!header_seen_) {
    // The job says what its header should have held when this is not one.
    header_seen_ = true;
    if (absl::Status s = job_->TakeHeader(); !s.ok()) return FailLocked(lock, s);
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
  const std::uint64_t size = chunk->bytes.size();
  received_bytes_ += size;
  window_bytes_ += size;
  record_.AddBytes(size);
  if (received_bytes_ > job_->declared_bytes()) {
    return FailLocked(lock, absl::InvalidArgumentError(absl::StrCat("chunk: the stream sent more than the ",
                                                                    job_->declared_bytes(), " bytes that ",
                                                                    job_->Declared(), " announced.")));
  }
  if (absl::Status s = CheckRateLocked(now, window_waited_); !s.ok()) return FailLocked(lock, s);
  if (!started_) return AdmitOnWorkerLocked(std::move(*chunk));
  absl::StatusOr<AdmissionController::Ticket> ticket = options_.admission->TryAdmit(size, caller_.identity);
  if (!ticket.ok()) return AdmitOnWorkerLocked(std::move(*chunk));
  QueueLocked(std::move(*chunk), std::move(*ticket));
}

void StreamReading::Cancelled() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

void StreamReading::Done() {
  options_.watchdog->Remove(this);
  Unref();
}

void StreamReading::CheckProgress(Clock::time_point now) {
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
void StreamReading::ReadLocked() {
  read_since_ = window_mark_ = Clock::now();
  StartReading(&message_);
}

// Once the header has come, each rate window of waiting for the client must
// bring min_bytes_per_second; `waited` is the time waited in this window so
// far. A window that did is forgotten.
absl::Status StreamReading::CheckRateLocked(Clock::time_point now, Clock::duration waited) {
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
void StreamReading::AdmitOnWorkerLocked(StreamChunk chunk) {
  admitting_ = true;
  const bool first = !started_;
  auto held = std::make_shared<StreamChunk>(std::move(chunk));
  options_.request_workers->Post([this, held, first] { AdmitAndQueue(std::move(*held), first); });
}

void StreamReading::AdmitAndQueue(StreamChunk chunk, bool first) {
  const std::uint64_t results = first ? job_->result_bytes() : 0;
  absl::StatusOr<AdmissionController::Ticket> ticket =
      options_.admission->Admit(chunk.bytes.size() + results, caller_.identity);
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
void StreamReading::QueueLocked(StreamChunk chunk, AdmissionController::Ticket ticket) {
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
void StreamReading::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!queue_.empty() && error_.ok() && !cancelled_) {
    Queued chunk = std::move(queue_.front());
    queue_.pop_front();
    if (read_paused_ && !input_ended_) {
      read_paused_ = false;
      ReadLocked();
    }
    lock.unlock();
    absl::Status s = job_->Consume(chunk.chunk);
    // Its bytes are consumed: their share of the budget goes back, unless
    // the job keeps a copy of them.
    AdmissionController::Ticket share = std::move(chunk.ticket);
    chunk = Queued();
    if (!job_->KeepsChunkBytes()) share = AdmissionController::Ticket();
    lock.lock();
    if (share.bytes() > 0) kept_.push_back(std::move(share));
    if (!s.ok() && error_.ok()) error_ = s;
  }
  draining_queue_ = false;
  queue_.clear();
  if (input_ended_ || !error_.ok() || cancelled_) FinishLocked(lock);
}

// The client has closed its side. An empty array has no chunk to start the
// job with: it starts now, with an empty one.
void StreamReading::EndOfInputLocked(std::unique_lock<std::mutex>& lock) {
  if (!started_ && !admitting_ && header_seen_ && error_.ok() && !cancelled_ && job_->declared_bytes() == 0) {
    return AdmitOnWorkerLocked(StreamChunk());
  }
  if (job_->FinishMayWait() && started_ && !admitting_ && !draining_queue_ && error_.ok() && !cancelled_) {
    draining_queue_ = true;  // Drain, with nothing queued, finishes the call
    options_.chunk_workers->Post([this] { Drain(); });
    return;
  }
  FinishLocked(lock);
}

void StreamReading::FailLocked(std::unique_lock<std::mutex>& lock, const absl::Status& status) {
  if (error_.ok()) error_ = status;
  FinishLocked(lock);
}

// Ends the call unless a worker is running (it finishes the call when it is
// done); the caller holds mu_.
// Ends the input unless a worker is running (it finishes the call when it
// is done), and has the reactor answer; the caller holds mu_, which is
// released. Once done_ is set nothing else touches the job, so the answer
// (which may group a whole table) runs without the lock the watchdog takes.
void StreamReading::FinishLocked(std::unique_lock<std::mutex>& lock) {
  if (done_ || admitting_ || draining_queue_) return;
  done_ = true;
  read_since_.reset();
  const absl::Status status = Outcome();
  queue_.clear();
  lock.unlock();
  Answer(status);
}

void StreamReading::EndCall(const absl::Status& status) {
  const std::uint64_t elements = status.ok() ? job_->elements() : 0;
  record_.SetOps(job_->ops());
  // What the job holds (a reduction, a lane, an unfinished upload, a
  // table) goes now, and the caller's place under its stream quota with it.
  job_.reset();
  results_ = AdmissionController::Ticket();
  kept_.clear();
  caller_.stream.Release();
  record_.Complete(status, elements);
  FinishCall(ToGrpcStatus(status));
}

absl::Status StreamReading::Outcome() const {
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
