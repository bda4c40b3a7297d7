// A small persistent thread pool shared by every request on a CPU backend.
// ParallelFor hands items out one at a time; the calling thread works too, so
// a request always makes progress even when the workers are busy with others.
// Only idle workers are asked to help: under load each request keeps to its
// own thread (no hand-offs, no wake-ups), alone it spreads over all of them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tally::cpu {

class ThreadPool {
 public:
  // `threads` participants per ParallelFor: the caller and threads - 1
  // workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Most participants in one ParallelFor: slots passed to `fn` are below it.
  int participants() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(item, slot) for every item in [0, items), in any order and on
  // any participant, and returns when all calls have returned. `slot` is the
  // participant's number, unique within this call, for per-thread scratch.
  void ParallelFor(std::size_t items, const std::function<void(std::size_t, int)>& fn);

 private:
  void WorkerLoop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::size_t idle_ = 0;  // workers waiting for a task (guarded by mu_)
};

// Rows [0, rows) cut into contiguous parts for a pool: up to four per
// participant (for balance when some are busy), each of at least
// `min_rows` rows; one part without a pool.
std::size_t RowParts(const ThreadPool* pool, std::uint64_t rows, std::uint64_t min_rows);

// Calls fn(part, slot, begin, end) for each of `parts` contiguous parts of
// [0, rows): on `pool`'s idle participants (slot: the participant, below
// participants()), or one after the other on this thread (slot 0) without
// a pool.
void ForRowParts(ThreadPool* pool, std::uint64_t rows, std::size_t parts,
                 const std::function<void(std::size_t, int, std::uint64_t, std::uint64_t)>& fn);

}  // namespace tally::cpu
