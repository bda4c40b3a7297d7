// Watches the streams in progress for clients that have gone quiet: every
// period it asks each watched stream to check its own progress, and a stream
// that finds its client idle, or too slow, ends itself. gRPC has no timer of
// its own for "no message for N seconds", and a client that opens a stream
// and sends nothing would otherwise keep it, and what it holds, forever.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

namespace tally {

class StreamWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // What a watched stream implements. Reference counted, so that a check
  // runs without the watchdog's lock (a check may end the call, and gRPC may
  // then run the stream's OnDone on the same thread) and still never on a
  // stream already deleted: the stream holds one reference for gRPC, and
  // drops it in OnDone after Remove(); a check holds another.
  class Watched {
   public:
    // Ends the stream if its client has been quiet or slow for too long.
    virtual void CheckProgress(Clock::time_point now) = 0;

    void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
    void Unref() {
      if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) Destroy();
    }

   protected:
    virtual ~Watched() = default;
    // Called once, when the last reference goes.
    virtual void Destroy() = 0;

   private:
    std::atomic<int> refs_{1};
  };

  // `period` 0: no thread, nothing is ever checked.
  explicit StreamWatchdog(std::chrono::milliseconds period);
  ~StreamWatchdog();  // every stream must have been removed
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  void Add(Watched* stream);
  // After this returns no new check of `stream` starts (one in progress may
  // still hold a reference).
  void Remove(Watched* stream);

 private:
  void Run();

  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::unordered_set<Watched*> streams_;
  std::thread thread_;
};

}  // namespace tally
