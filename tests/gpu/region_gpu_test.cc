// Shared-memory regions through a real server on the cuda backend: a host
// region is registered with CUDA (pinned) and gives bitwise AggregateStream's
// answers; a CUDA IPC region exported by another process is reduced in place
// and gives Aggregate's answers (exact for integers, extremes, indices and
// histograms; floats to rounding); bad handles, sizes and devices are
// refused and the server carries on. The exporting process is this binary
// run again with --export-ipc (a process cannot open its own IPC handle).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "tally/client/shared_memory.h"
#include "tests/gpu/engine_test_util.h"
#include "tests/integration/server_fixture.h"

namespace tally::testing {
namespace {

std::vector<float> Floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.1f, 0.5f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// --export-ipc N SEED: N floats of Floats(N, SEED) in GPU 0's memory; prints
// the handle's 64 bytes as hex and waits for stdin to close.
int ExportIpc(std::size_t n, std::uint64_t seed) {
  const std::vector<float> v = Floats(n, seed);
  void* d = nullptr;
  cudaIpcMemHandle_t h;
  if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&d, n * sizeof(float)) != cudaSuccess ||
      cudaMemcpy(d, v.data(), n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaIpcGetMemHandle(&h, d) != cudaSuccess) {
    std::fprintf(stderr, "exporter: %s\n", cudaGetErrorName(cudaGetLastError()));
    return 1;
  }
  const auto* b = reinterpret_cast<const unsigned char*>(&h);
  for (std::size_t i = 0; i < sizeof h; ++i) std::printf("%02x", b[i]);
  std::printf("\n");
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  cudaFree(d);
  return 0;
}

// The exporter, run as a child: its handle, and its stdin to close.
class Exporter {
 public:
  Exporter(std::size_t n, std::uint64_t seed) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      const std::string ns = std::to_string(n), ss = std::to_string(seed);
      execl("/proc/self/exe", "exporter", "--export-ipc", ns.c_str(), ss.c_str(), nullptr);
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    stdin_ = to_child[1];
    std::string hex;
    char c;
    while (read(from_child[0], &c, 1) == 1 && c != '\n') hex += c;
    close(from_child[0]);
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) handle_ += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  ~Exporter() {
    if (stdin_ >= 0) close(stdin_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  const std::string& handle() const { return handle_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  std::string handle_;
};

class RegionGpuTest : public ServerFixture {
 protected:
  void SetUp() override {
    TALLY_REQUIRE_GPU();
    ServerConfig config;
    config.backend = engine_test::TestOptions();
    StartServer(config);
    regions_ = v1::SharedMemory::NewStub(channel_);
  }

  grpc::Status RegisterCuda(const std::string& name, const std::string& handle, int device, std::uint64_t bytes,
                            v1::RegionInfo* info) {
    v1::RegisterCudaRegionRequest r;
    r.set_name(name);
    r.set_ipc_handle(handle);
    r.set_device(device);
    r.set_byte_size(bytes);
    grpc::ClientContext ctx;
    return regions_->RegisterCudaRegion(&ctx, r, info);
  }

  grpc::Status Query(const std::string& region, std::uint64_t n, const std::vector<v1::Aggregation>& ops,
                     std::uint64_t rows, v1::AggregateResponse* resp) {
    v1::AggregateRegionRequest r;
    r.set_region(region);
    r.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
    r.mutable_spec()->set_length(n);
    r.mutable_spec()->set_row_length(rows);
    for (const auto& op : ops) *r.add_aggregations() = op;
    grpc::ClientContext ctx;
    return regions_->AggregateRegion(&ctx, r, resp);
  }

  v1::AggregateResponse Streamed(const std::vector<float>& v, const std::vector<v1::Aggregation>& ops,
                                 std::uint64_t rows) {
    std::vector<v1::AggregateStreamRequest> msgs = {Header(v1::DTYPE_FLOAT32, v.size(), ops, rows)};
    for (auto& m : Chunks(Bytes(v), 1 << 20)) msgs.push_back(m);
    v1::AggregateResponse want;
    EXPECT_TRUE(Stream(msgs, &want).ok());
    return want;
  }

  static std::vector<v1::Aggregation> Ops() {
    return {Op(v1::OP_SUM),   Op(v1::OP_MIN),    Op(v1::OP_MAX),      Op(v1::OP_MEAN),
            Op(v1::OP_COUNT), Op(v1::OP_VARIANCE), Op(v1::OP_ARGMIN), Op(v1::OP_ARGMAX),
            Hist(256, -1, 1)};
  }

  // Floats to rounding (float64 accumulations in another order), the rest exactly.
  static void ExpectSame(const v1::AggregateResponse& got, const v1::AggregateResponse& want) {
    ASSERT_EQ(got.results_size(), want.results_size());
    for (int i = 0; i < got.results_size(); ++i) {
      const v1::AggregationResult& g = got.results(i);
      const v1::AggregationResult& w = want.results(i);
      if (!g.has_doubles() || g.aggregation().op() == v1::OP_MIN || g.aggregation().op() == v1::OP_MAX) {
        EXPECT_EQ(g.SerializeAsString(), w.SerializeAsString()) << "result " << i;
        continue;
      }
      ASSERT_EQ(g.doubles().values_size(), w.doubles().values_size());
      for (int k = 0; k < g.doubles().values_size(); ++k) {
        EXPECT_NEAR(g.doubles().values(k), w.doubles().values(k), 1e-12 * std::fabs(w.doubles().values(k)) + 1e-300)
            << "result " << i << " row " << k;
      }
    }
  }

  std::unique_ptr<v1::SharedMemory::Stub> regions_;
};

TEST_F(RegionGpuTest, HostRegionIsPinnedAndGivesBitwiseTheStreamedAnswer) {
  // Not a whole number of the tests' 64 KiB chunks: the last one is short.
  const std::vector<float> v = Floats((3 << 20) / 4 + 12345, 17);
  auto object = client::SharedMemoryObject::Create(client::SharedMemoryObject::UniqueName("gpu"), v.size() * 4);
  ASSERT_TRUE(object.ok()) << object.status();
  std::memcpy((*object)->bytes().data(), v.data(), v.size() * 4);
  v1::RegisterHostRegionRequest r;
  r.set_name("h");
  r.set_shm_name((*object)->name());
  r.set_byte_size(v.size() * 4);
  v1::RegionInfo info;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = regions_->RegisterHostRegion(&ctx, r, &info);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(info.place(), "pinned host");
  for (const std::uint64_t rows : {std::uint64_t{0}, std::uint64_t{4099}}) {
    SCOPED_TRACE(rows);
    const std::uint64_t n = rows == 0 ? v.size() : v.size() / rows * rows;
    const std::vector<float> part(v.begin(), v.begin() + static_cast<long>(n));
    v1::AggregateResponse got;
    const grpc::Status s = Query("h", n, Ops(), rows, &got);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(got.execution().backend(), "cuda");
    const v1::AggregateResponse want = Streamed(part, Ops(), rows);
    ASSERT_EQ(got.results_size(), want.results_size());
    for (int i = 0; i < got.results_size(); ++i) {
      EXPECT_EQ(got.results(i).SerializeAsString(), want.results(i).SerializeAsString()) << "result " << i;
    }
  }
}

TEST_F(RegionGpuTest, CudaIpcRegionIsReducedInPlaceWithAggregatesAnswer) {
  const std::size_t n = (16 << 20) / 4 + 777;
  Exporter exporter(n, 23);
  ASSERT_EQ(exporter.handle().size(), sizeof(cudaIpcMemHandle_t)) << "the exporter did not start";
  v1::RegionInfo info;
  const grpc::Status reg = RegisterCuda("c", exporter.handle(), 0, n * 4, &info);
  ASSERT_TRUE(reg.ok()) << reg.error_message();
  EXPECT_EQ(info.place(), "cuda:0");
  const std::vector<float> v = Floats(n, 23);
  for (const std::uint64_t rows : {std::uint64_t{0}, std::uint64_t{1000}}) {
    SCOPED_TRACE(rows);
    const std::uint64_t m = rows == 0 ? n : n / rows * rows;
    v1::AggregateResponse got;
    const grpc::Status s = Query("c", m, Ops(), rows, &got);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(got.execution().backend(), "cuda");
    ExpectSame(got, Streamed(std::vector<float>(v.begin(), v.begin() + static_cast<long>(m)), Ops(), rows));
  }
  // A dataset uploaded from the region holds the same bytes.
  v1::PutDatasetFromRegionRequest put;
  put.mutable_dataset()->set_name("from-ipc");
  put.mutable_dataset()->mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  put.mutable_dataset()->mutable_spec()->set_length(n);
  put.set_region("c");
  v1::PutDatasetResponse uploaded;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = regions_->PutDatasetFromRegion(&ctx, put, &uploaded);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  v1::AggregateDatasetRequest q;
  q.set_name("from-ipc");
  for (const auto& op : Ops()) *q.add_aggregations() = op;
  v1::AggregateResponse from_dataset, from_region;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->AggregateDataset(&ctx, q, &from_dataset).ok());
  }
  ASSERT_TRUE(Query("c", n, Ops(), 0, &from_region).ok());
  ASSERT_EQ(from_dataset.results_size(), from_region.results_size());
  for (int i = 0; i < from_dataset.results_size(); ++i) {
    EXPECT_EQ(from_dataset.results(i).SerializeAsString(), from_region.results(i).SerializeAsString()) << i;
  }
  v1::UnregisterRegionRequest un;
  un.set_name("c");
  v1::RegionInfo gone;
  grpc::ClientContext ctx;
  EXPECT_TRUE(regions_->UnregisterRegion(&ctx, un, &gone).ok());
}

TEST_F(RegionGpuTest, BadCudaRegionsAreRefusedAndTheServerCarriesOn) {
  const std::size_t n = 1 << 20;
  Exporter exporter(n, 5);
  ASSERT_EQ(exporter.handle().size(), sizeof(cudaIpcMemHandle_t));
  v1::RegionInfo info;
  std::string garbage(64, '\0');
  std::mt19937_64 rng(1);
  for (char& c : garbage) c = static_cast<char>(rng());
  EXPECT_EQ(RegisterCuda("g", garbage, 0, 16, &info).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(RegisterCuda("g", exporter.handle().substr(1), 0, 16, &info).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(RegisterCuda("g", exporter.handle(), 99, 16, &info).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  const grpc::Status too_big = RegisterCuda("g", exporter.handle(), 0, n * 4 + (64 << 20), &info);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << too_big.error_message();
  // The handle still opens, the region answers, and nothing stuck to the GPU.
  ASSERT_TRUE(RegisterCuda("g", exporter.handle(), 0, n * 4, &info).ok());
  v1::AggregateResponse got;
  ASSERT_TRUE(Query("g", n, {Op(v1::OP_COUNT), Op(v1::OP_MAX)}, 0, &got).ok());
  EXPECT_EQ(got.results(0).uint64s().values(0), n);
  const std::vector<float> v = Floats(n, 5);
  EXPECT_EQ(got.results(1).doubles().values(0), static_cast<double>(*std::max_element(v.begin(), v.end())));
}

}  // namespace
}  // namespace tally::testing

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--export-ipc") {
    return tally::testing::ExportIpc(std::stoull(argv[2]), std::stoull(argv[3]));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
