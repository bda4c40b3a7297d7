// Which lanes of which places (GPUs) are free, handed out with a bounded
// wait. The cuda backend's DevicePool keeps its lanes here; it is plain C++
// so that the waiting itself is tested on machines without a GPU.
//
// A waiter may ask for a lane of one place (a dataset shard's GPU) or of
// any place. Each place has its own condition variable: a lane given back
// wakes a waiter that can take it. (With one condition variable for every
// place and notify_one, a lane returned on GPU 0 could wake a waiter for
// GPU 1, which went back to sleep, while the waiter for GPU 0 slept on
// until its wait ran out: sharded queries under load failed after
// --cuda_lane_wait_ms with lanes free.)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace tally {

class LaneSlots {
 public:
  // `lanes[p]` lanes at place p.
  explicit LaneSlots(const std::vector<int>& lanes);

  enum class Outcome {
    kGot,       // place and lane are set
    kBusy,      // every lane that would do stayed busy for the whole wait
    kLost,      // every place that would do is lost
  };
  struct Taken {
    Outcome outcome = Outcome::kBusy;
    int place = -1;
    int lane = -1;
    double waited_seconds = 0.0;
  };
  // A free lane of `place` (>= 0) or of any place (-1: the one with the
  // most free lanes, round robin among equals), waiting up to `wait`.
  [[nodiscard]] Taken Take(int place, std::chrono::milliseconds wait);
  // Gives a lane back; a lost place keeps it unused.
  void Give(int place, int lane);
  // No lane of `place` is handed out again; waiters re-check.
  void MarkLost(int place);
  bool lost(int place) const;

 private:
  struct Place {
    std::vector<int> free;
    bool lost = false;
    std::unique_ptr<std::condition_variable> returned = std::make_unique<std::condition_variable>();
  };

  mutable std::mutex mutex_;
  std::vector<Place> places_;
  std::condition_variable any_returned_;  // waiters for any place
  std::size_t next_ = 0;                  // round robin among equally free places
};

}  // namespace tally
