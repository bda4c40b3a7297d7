// tally-staging-copy-bench: the CUDA backend's one host copy in isolation.
// Each thread stands for one stream: it writes a 4 MiB "message" (as gRPC's
// receive does), copies it in 16 KiB pieces into 8 MiB pinned blocks from a
// shared 1 GiB pool, and sends each full block to the GPU with
// cudaMemcpyAsync, as CudaReduction does. Two ways to pick the next block:
//   oldest  the block released longest ago: the server's own PinnedPool
//   newest  the block released last whose copy to the GPU is done (its
//           lines likelier in the CPU's cache; faster here, but no better
//           through gRPC: docs/performance.md)
// Prints GB/s copied per thread count and way; no gRPC, no kernels.
//
//   tally-staging-copy-bench [SECONDS [THREADS...]]   (default 2; 1 2 4 8 16)
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/pinned_pool.h"

namespace {

constexpr std::size_t kPool = std::size_t{1} << 30;
constexpr std::size_t kBlock = std::size_t{8} << 20;
constexpr std::size_t kMessage = std::size_t{4} << 20;
constexpr std::size_t kPiece = 16 << 10;
constexpr int kDeviceSlots = 3;

#define CHECK(call)                                                                   \
  do {                                                                                \
    const cudaError_t err_ = (call);                                                  \
    if (err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                   cudaGetErrorString(err_));                                         \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

using tally::cuda::PinnedPool;
using Block = PinnedPool::Block;

// The way the server does not take: the newest released block whose copy
// is done, else the oldest. Same blocks and events as PinnedPool.
class NewestDonePool {
 public:
  explicit NewestDonePool(std::byte* base) {
    for (std::size_t i = 0; i < kPool / kBlock; ++i) {
      slots_.push_back({base + i * kBlock, nullptr});
      CHECK(cudaEventCreateWithFlags(&slots_.back().released, cudaEventDisableTiming));
      free_.push_back(static_cast<int>(i));
    }
  }
  ~NewestDonePool() {
    for (Slot& s : slots_) (void)cudaEventDestroy(s.released);
  }

  Block Acquire() {
    int index = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
        if (cudaEventQuery(slots_[*it].released) == cudaSuccess) {
          index = *it;
          free_.erase(std::next(it).base());
          break;
        }
      }
      if (index < 0) {
        index = free_.front();
        free_.pop_front();
      }
    }
    CHECK(cudaEventSynchronize(slots_[index].released));
    return Block{slots_[index].data, kBlock, index};
  }
  void Release(Block b, cudaStream_t stream) {
    CHECK(cudaEventRecord(slots_[b.index].released, stream));
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(b.index);
  }

 private:
  struct Slot {
    std::byte* data;
    cudaEvent_t released;
  };
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::deque<int> free_;
};

// The server's pool (oldest first), failing loudly.
Block Acquire(PinnedPool& pool) {
  absl::StatusOr<Block> b = pool.Acquire(std::chrono::milliseconds(2000));
  if (!b.ok()) {
    std::fprintf(stderr, "%s\n", b.status().ToString().c_str());
    std::exit(1);
  }
  return *b;
}
void Release(PinnedPool& pool, Block b, cudaStream_t stream) {
  if (absl::Status s = pool.Release(b, tally::cuda::StreamView(stream)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}
Block Acquire(NewestDonePool& pool) { return pool.Acquire(); }
void Release(NewestDonePool& pool, Block b, cudaStream_t stream) { pool.Release(b, stream); }

// One stream's loop until `stop`; returns bytes copied.
template <typename Pool>
std::size_t Stream(Pool& pool, const std::atomic<bool>& stop) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<void*> device(kDeviceSlots);
  for (void*& d : device) CHECK(cudaMalloc(&d, kBlock));
  std::vector<std::byte> message(kMessage);
  std::size_t copied = 0;
  Block block = Acquire(pool);
  std::size_t fill = 0;
  int chunk = 0;
  for (unsigned round = 0; !stop.load(std::memory_order_relaxed); ++round) {
    std::memset(message.data(), static_cast<int>(round), kMessage);  // the receive writes it
    for (std::size_t off = 0; off < kMessage; off += kPiece) {
      std::memcpy(block.data + fill, message.data() + off, kPiece);
      fill += kPiece;
      if (fill == kBlock) {
        CHECK(cudaMemcpyAsync(device[chunk % kDeviceSlots], block.data, kBlock,
                              cudaMemcpyHostToDevice, stream));
        Release(pool, block, stream);
        block = Acquire(pool);
        fill = 0;
        ++chunk;
      }
    }
    copied += kMessage;
  }
  CHECK(cudaStreamSynchronize(stream));
  Release(pool, block, stream);
  for (void* d : device) CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(stream));
  return copied;
}

// GB/s copied by `threads` streams sharing `pool` for `seconds`.
template <typename Pool>
double Run(Pool& pool, int threads, double seconds) {
  std::atomic<bool> stop{false};
  std::vector<std::size_t> bytes(threads);
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] { bytes[t] = Stream(pool, stop); });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& w : workers) w.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::size_t total = 0;
  for (std::size_t b : bytes) total += b;
  return static_cast<double>(total) / elapsed * 1e-9;
}

double RunOldest(std::byte* pinned, int threads, double seconds) {
  absl::StatusOr<std::unique_ptr<PinnedPool>> pool =
      PinnedPool::Create(std::span(pinned, kPool), kBlock, /*device=*/0);
  if (!pool.ok()) {
    std::fprintf(stderr, "%s\n", pool.status().ToString().c_str());
    std::exit(1);
  }
  return Run(**pool, threads, seconds);
}

double RunNewest(std::byte* pinned, int threads, double seconds) {
  NewestDonePool pool(pinned);
  return Run(pool, threads, seconds);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  std::vector<int> threads;
  for (int i = 2; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {1, 2, 4, 8, 16};
  void* pinned = nullptr;
  CHECK(cudaHostAlloc(&pinned, kPool, cudaHostAllocPortable));
  std::memset(pinned, 0, kPool);
  std::printf("| threads | oldest block GB/s | newest done block GB/s | newest / oldest |\n");
  std::printf("|---:|---:|---:|---:|\n");
  for (int t : threads) {
    // Each way twice, interleaved, so that drift shows.
    double oldest = 0, newest = 0;
    for (int rep = 0; rep < 2; ++rep) {
      oldest += RunOldest(static_cast<std::byte*>(pinned), t, seconds) / 2;
      newest += RunNewest(static_cast<std::byte*>(pinned), t, seconds) / 2;
    }
    std::printf("| %d | %.2f | %.2f | %.3f |\n", t, oldest, newest, newest / oldest);
    std::fflush(stdout);
  }
  CHECK(cudaFreeHost(pinned));
  return 0;
}
