// ThreadPool: a task queue for helpers; items are claimed from a shared
// counter, so a helper that starts late simply finds nothing left to do.
#include "server/engine/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace tally::cpu {
namespace {

struct Job {
  const std::function<void(std::size_t, int)>* fn = nullptr;  // valid while items remain
  std::size_t items = 0;
  std::atomic<std::size_t> next{0};
  std::atomic<int> next_slot{0};
  std::mutex mu;
  std::condition_variable done_cv;
  std::size_t done = 0;  // guarded by mu

  void Run() {
    std::size_t finished = 0;
    int slot = -1;
    for (;;) {
      const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= items) break;
      if (slot < 0) slot = next_slot.fetch_add(1, std::memory_order_relaxed);
      (*fn)(i, slot);
      ++finished;
    }
    if (finished == 0) return;
    std::lock_guard<std::mutex> lock(mu);
    done += finished;
    if (done == items) done_cv.notify_all();
  }
};

}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int helpers = std::max(threads, 1) - 1;
  workers_.reserve(static_cast<std::size_t>(helpers));
  for (int i = 0; i < helpers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_;
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;  // stopping, and nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(std::size_t items, const std::function<void(std::size_t, int)>& fn) {
  if (items == 0) return;
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->items = items;
  std::size_t helpers = 0;
  if (items > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    // Only workers that are waiting, less the tasks already queued for
    // them: when every thread is busy with other requests, this one runs
    // on its own thread rather than queueing behind them.
    const std::size_t free = idle_ > tasks_.size() ? idle_ - tasks_.size() : 0;
    helpers = std::min(free, items - 1);
    for (std::size_t h = 0; h < helpers; ++h) tasks_.emplace_back([job] { job->Run(); });
  }
  if (helpers == 0) {
    for (std::size_t i = 0; i < items; ++i) fn(i, 0);
    return;
  }
  for (std::size_t h = 0; h < helpers; ++h) wake_.notify_one();
  job->Run();
  std::unique_lock<std::mutex> lock(job->mu);
  job->done_cv.wait(lock, [&] { return job->done == items; });
}

std::size_t RowParts(const ThreadPool* pool, std::uint64_t rows, std::uint64_t min_rows) {
  if (pool == nullptr) return 1;
  const std::uint64_t most = 4 * static_cast<std::uint64_t>(pool->participants());
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(rows / std::max<std::uint64_t>(min_rows, 1), 1, most));
}

void ForRowParts(ThreadPool* pool, std::uint64_t rows, std::size_t parts,
                 const std::function<void(std::size_t, int, std::uint64_t, std::uint64_t)>& fn) {
  const auto cut = [&](std::size_t p) { return rows * p / parts; };
  if (pool == nullptr || parts <= 1) {
    for (std::size_t p = 0; p < parts; ++p) fn(p, 0, cut(p), cut(p + 1));
    return;
  }
  pool->ParallelFor(parts, [&](std::size_t p, int slot) { fn(p, slot, cut(p), cut(p + 1)); });
}

}  // namespace tally::cpu
