// Streams given back for reuse (kept_streams.h): a stream given back is the
// next one taken on its device, still usable; past kMaxKeptStreams the
// rest are destroyed, not kept.
#include <gtest/gtest.h>

#include <vector>

#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/kept_streams.h"
#include "tests/gpu/engine_test_util.h"

namespace tally::cuda {
namespace {

TEST(KeptStreams, AStreamGivenBackIsTakenAgainAndStillRuns) {
  TALLY_REQUIRE_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t first = nullptr;
  {
    Stream s;
    ASSERT_EQ(Stream::Create(&s), cudaSuccess);
    first = s.get();
    int* d = nullptr;
    ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(int), s.get()), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync(d, s.get()), cudaSuccess);  // work still queued as it goes back
  }
  Stream again;
  ASSERT_EQ(Stream::Create(&again), cudaSuccess);
  EXPECT_EQ(again.get(), first);
  int host = 7;
  int* d = nullptr;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(int), again.get()), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, &host, sizeof host, cudaMemcpyHostToDevice, again.get()), cudaSuccess);
  host = 0;
  ASSERT_EQ(cudaMemcpyAsync(&host, d, sizeof host, cudaMemcpyDeviceToHost, again.get()), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(d, again.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(again.get()), cudaSuccess);
  EXPECT_EQ(host, 7);
}

TEST(KeptStreams, AtMostTheLimitAreKept) {
  TALLY_REQUIRE_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  // Whatever earlier tests left kept, then more than the limit given back.
  std::vector<cudaStream_t> taken;
  while (cudaStream_t s = TakeKeptStream()) taken.push_back(s);
  while (taken.size() < static_cast<std::size_t>(kMaxKeptStreams) + 5) {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    taken.push_back(s);
  }
  for (cudaStream_t s : taken) ASSERT_EQ(KeepOrDestroyStream(s), cudaSuccess);
  int kept = 0;
  while (cudaStream_t s = TakeKeptStream()) {
    ++kept;
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
  EXPECT_EQ(kept, kMaxKeptStreams);
}

}  // namespace
}  // namespace tally::cuda
