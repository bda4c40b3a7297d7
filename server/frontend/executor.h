// A fixed pool of worker threads for request work that must not run on
// gRPC's callback threads (reactions should not block).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tally {

class Executor {
 public:
  explicit Executor(int threads);
  ~Executor();  // runs every task already posted, then joins
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> task);

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tally
