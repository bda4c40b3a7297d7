// CudaBackend: option checks, what the GPU runs (Runs), lanes for host and
// device bytes, health and metrics. Which requests come here is the
// router's choice (server/engine/routing/router.h).
#include "server/engine/cuda/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/validate.h"
#include "server/engine/cpu/thread_pool.h"
#include "server/engine/cuda/attachments.h"
#include "server/engine/cuda/cuda_reduction.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/device_fault.h"
#include "server/engine/cuda/device_pool.h"
#include "server/engine/cuda/device_resident.h"
#include "server/engine/cuda/group_on_device.h"
#include "server/engine/cuda/kept_on_device.h"
#include "server/engine/cuda/stream_buffer.h"
#include "server/engine/cuda/segment_reduction.h"
#include "server/engine/cuda/tuning.h"
#include "server/engine/received_memory.h"
#include "server/metrics/metrics.h"
#include "spdlog/spdlog.h"
#include "tally/kernels/cuda_error.h"

namespace tally {
namespace {

using cuda::EnginePolicy;

// "NVIDIA H100 80GB HBM3 x2 (0,1)"; mixed models are listed one by one.
std::string Describe(const cuda::DevicePool& pool) {
  std::map<std::string, std::vector<int>> by_model;
  for (const int d : pool.ordinals()) by_model[pool.Model(d)].push_back(d);
  std::vector<std::string> parts;
  for (const auto& [model, ords] : by_model) {
    parts.push_back(absl::StrCat(model, " x", ords.size(), " (", absl::StrJoin(ords, ","), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::unique_ptr<cuda::DevicePool> pool, const BackendOptions& options)
      : pool_(std::move(pool)),
        device_(Describe(*pool_)),
        exact_sums_(options.cuda_exact_sums),
        lane_wait_(options.lane_wait) {
    engine_.devices = pool_.get();
    if (options.staging_copy_threads > 1) {
      copiers_ = std::make_unique<cpu::ThreadPool>(options.staging_copy_threads);
      engine_.copiers = copiers_.get();
    }
  }

  ~CudaBackend() override {
    if (receive_arena_) SetPinnedReceiveMemory({});
  }

  // Registers the receive arena with CUDA (portable: every GPU's lanes copy
  // from it), after which received slices in it count as pinned host memory.
  absl::Status RegisterReceiveArena(std::span<std::byte> arena) {
    absl::StatusOr<std::unique_ptr<Attachment>> registered = cuda::AttachPinnedHost(arena);
    if (!registered.ok()) {
      return absl::Status(registered.status().code(),
                          absl::StrCat("--pinned_receive_bytes: ", registered.status().message()));
    }
    receive_arena_ = std::move(*registered);
    SetPinnedReceiveMemory(arena);
    return absl::OkStatus();
  }

  std::string name() const override { return "cuda"; }
  std::string device() const override { return device_; }

  // What the GPU runs (Backend::Runs). The kernels compute every op the
  // registry marks on_kernels (the fused pass, and the fold pass for prod
  // and count_nonzero), over equal rows, under validity masks; variable-
  // length segments only over bytes already on a GPU, with the segmented
  // kernels (sum, min, max, mean, count, no mask); host bytes only when the
  // plan's state and scratch fit a lane.
  absl::Status Runs(const AggregationPlan& plan, const Placement& from) const override {
    if (std::optional<Refusal> no = Refuses(plan, from)) return absl::UnimplementedError(no->what);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan,
                                                    const Placement& from) override {
    return StartWithin(plan, from, lane_wait_);
  }

  // Start(), waiting up to `wait` for a lane (of the GPU that holds device
  // bytes; of any GPU for host bytes).
  absl::StatusOr<std::unique_ptr<Reduction>> StartWithin(const AggregationPlan& plan, const Placement& from,
                                                         std::chrono::milliseconds wait) override {
    // The front end has validated the plan, but a backend driven directly
    // (tests, benchmarks) must not trust its caller.
    if (absl::Status s = ValidatePlan(plan, RequestLimits{}); !s.ok()) return s;
    if (std::optional<Refusal> no = Refuses(plan, from)) {
      if (from.host()) return absl::UnimplementedError(no->what);
      // Nothing else can read these bytes where they lie.
      return absl::FailedPreconditionError(absl::StrCat(
          no->what, "; the cpu backend, which runs that, cannot read GPU memory: ", no->instead, "."));
    }
    if (!from.host()) return StartOnDevice(plan, from.device, wait);
    return StartOnLane(plan, wait);
  }

 private:
  // What the GPU does not run, and what a caller whose bytes are on a GPU
  // can do instead.
  struct Refusal {
    std::string what;
    std::string instead;
  };
  std::optional<Refusal> Refuses(const AggregationPlan& plan, const Placement& from) const {
    constexpr const char* kFromHost = "send this array's bytes from host memory";
    if (plan.array.variable()) {
      if (plan.array.masked()) {
        return Refusal{"the GPU kernels do not read a validity mask with variable-length segments (offsets)",
                       absl::StrCat(kFromHost, ", or aggregate it with either offsets or a mask")};
      }
      if (from.host()) return Refusal{"the GPU reduces variable-length segments (offsets) of its own bytes only", ""};
      if (!cuda::SegmentKernelsCompute(plan)) {
        return Refusal{"the GPU kernels compute sum, min, max, mean and count of variable-length segments (offsets), "
                       "and no other op",
                       absl::StrCat("ask for those five only, or ", kFromHost)};
      }
      return std::nullopt;
    }
    const auto not_on_kernels = std::find_if(plan.ops.begin(), plan.ops.end(),
                                             [](const OpSpec& op) { return !rules::RunsOnKernels(op.kind); });
    if (not_on_kernels != plan.ops.end()) {
      return Refusal{absl::StrCat("the GPU kernels do not compute ", rules::Name(not_on_kernels->kind)),
                     absl::StrCat("aggregate this GPU dataset or CUDA IPC region without it, or ", kFromHost)};
    }
    if (!from.host()) return std::nullopt;  // StartOnDevice sizes its launches to the lane
    const cuda::PassPlan passes = cuda::PlanPasses(plan, exact_sums_);
    if (passes.state_bytes > pool_->state_bytes()) {
      return Refusal{absl::StrCat(passes.state_bytes, " bytes of GPU state exceed --cuda_max_state_bytes=",
                                  pool_->state_bytes()),
                     ""};
    }
    absl::StatusOr<std::size_t> scratch = Scratch(passes, ChunkElements(plan), pool_->ordinals().front());
    if (scratch.ok() && *scratch > pool_->scratch_bytes()) {
      return Refusal{absl::StrCat(*scratch, " bytes of kernel scratch exceed a lane's ", pool_->scratch_bytes()),
                     ""};
    }
    return std::nullopt;
  }

  std::uint64_t ChunkElements(const AggregationPlan& plan) const {
    return pool_->chunk_bytes() / rules::SizeOf(plan.array.dtype);
  }

  // Host bytes on a GPU lane, whatever their size (Refuses has checked that
  // the plan's state and scratch fit one).
  absl::StatusOr<std::unique_ptr<Reduction>> StartOnLane(const AggregationPlan& plan,
                                                          std::chrono::milliseconds wait) {
    cuda::PassPlan passes = cuda::PlanPasses(plan, exact_sums_);
    const std::uint64_t chunk_elements = ChunkElements(plan);
    if (absl::StatusOr<std::size_t> scratch = Scratch(passes, chunk_elements, pool_->ordinals().front());
        !scratch.ok()) {
      return scratch.status();
    }
    absl::StatusOr<cuda::DevicePool::Lease> lease = Checkout(-1, wait);
    if (!lease.ok()) return lease.status();
    return cuda::MakeCudaReduction(plan, std::move(passes), std::move(*lease), &engine_, chunk_elements);
  }

 public:
  std::vector<ResidentPlace> ResidentPlaces() const override {
    std::vector<ResidentPlace> places;
    for (const int d : pool_->ordinals()) places.push_back({d, absl::StrCat("cuda:", d)});
    return places;
  }

  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(std::uint64_t bytes,
                                                                   int place) override {
    return cuda::AllocateDeviceResident(pool_.get(), place, bytes, lane_wait_);
  }
  absl::StatusOr<std::unique_ptr<Attachment>> AttachHost(std::span<const std::byte> bytes) override {
    return cuda::AttachPinnedHost(bytes);
  }
  absl::StatusOr<std::unique_ptr<Attachment>> AttachCudaIpc(std::span<const std::byte> handle, int device,
                                                             std::uint64_t bytes) override {
    return cuda::AttachIpc(*pool_, handle, device, bytes);
  }
  // For the functions that run on the host (server/engine/functions): a
  // plain synchronous copy, on the calling thread, outside any lane.
  absl::Status CopyToHost(const Extent& from, std::span<std::byte> to) override {
    if (from.placement.host()) {
      std::copy(from.bytes.begin(), from.bytes.end(), to.begin());
      return absl::OkStatus();
    }
    if (!pool_->Uses(from.placement.device)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cuda backend: GPU ", from.placement.device, " is not one of the devices in use."));
    }
    cuda::ScopedDevice on(from.placement.device);
    if (const cudaError_t e = cudaMemcpy(to.data(), from.bytes.data(), from.size(), cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("copying ", from.size(), " bytes from GPU ", from.placement.device,
                                              " to the host: ", cudaGetErrorString(e)));
    }
    return absl::OkStatus();
  }
  // Quantiles, top-k and hll over a GPU's bytes on that GPU (kept_on_device.h).
  absl::StatusOr<std::unique_ptr<Reduction>> StartKeptOnDevice(const AggregationPlan& plan,
                                                               const Placement& from) override {
    return cuda::StartKeptOnDevice(plan, from, *pool_);
  }
  // Group-by's order of rows by key on the GPU holding the keys
  // (group_on_device.h).
  absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> OrderByKeyOnDevice(const Extent& keys, DType dtype,
                                                                      std::uint64_t rows,
                                                                      std::uint64_t max_groups) override {
    return cuda::OrderByKeyOnDevice(keys, dtype, rows, max_groups, *pool_);
  }
  absl::StatusOr<KeyedSums> SumByKeyOnDevice(const Extent& keys, DType key_dtype, const Extent& values, DType dtype,
                                             std::uint64_t rows, std::uint64_t max_groups,
                                             DirectFacts facts, KeyedArrays arrays) override {
    return cuda::SumByKeyOnDevice(keys, key_dtype, values, dtype, rows, max_groups, facts, arrays, *pool_,
                                  copiers_.get());
  }
  absl::StatusOr<NumberedKeyColumn> NumberKeysOnDevice(const Extent& keys, DType dtype, std::uint64_t rows,
                                                       std::uint64_t max_groups) override {
    return cuda::NumberKeysOnDevice(keys, dtype, rows, max_groups, *pool_);
  }
  absl::StatusOr<CombinedKeyColumn> CombineKeysOnDevice(std::span<const Extent> keys, std::span<const DType> dtypes,
                                                        std::uint64_t rows) override {
    return cuda::CombineKeysOnDevice(keys, dtypes, rows, *pool_);
  }
  absl::StatusOr<std::vector<std::unique_ptr<DeviceColumn>>> CopyToDevice(
      std::span<const std::span<const std::byte>> columns, std::uint64_t rows) override {
    return cuda::CopyColumnsToDevice(columns, rows, *pool_);
  }
  absl::Status Health() const override { return pool_->Health(); }
  std::vector<DeviceHealth> DevicesHealth() const override {
    std::vector<DeviceHealth> out;
    for (const ResidentPlace& p : ResidentPlaces()) out.push_back({p.label, pool_->DeviceHealth(p.index)});
    return out;
  }

  // --fault_lose_gpu: marks a GPU lost after a delay (device_fault.h).
  void InjectFault(const cuda::LoseGpuFault& fault) {
    fault_ = std::make_unique<cuda::DeviceFault>(pool_.get(), fault);
  }

  void SetMetrics(Metrics* metrics) override {
    engine_.metrics.store(metrics, std::memory_order_release);
    if (metrics == nullptr) return;
    metrics->SetPinnedPool(pool_->pinned_total(), pool_->pinned_used());
    for (const int d : pool_->ordinals()) {
      cuda::ScopedDevice on(d);
      std::size_t free = 0, total = 0;
      if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
        metrics->SetDeviceMemory(d, pool_->Model(d), total - free, total);
      } else {
        (void)cudaGetLastError();
      }
    }
  }

 private:
  // Bytes already on `device` are reduced there, in place: never on the CPU,
  // whatever their size. Launches over them are as long as the lane's
  // scratch allows, up to the whole array: decided by the plan alone, so a
  // request gives the same bits every time.
  absl::StatusOr<std::unique_ptr<Reduction>> StartOnDevice(const AggregationPlan& plan, int device,
                                                           std::chrono::milliseconds wait) {
    if (!pool_->Uses(device)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cuda backend: GPU ", device, " is not one of the devices in use."));
    }
    if (plan.array.variable()) {
      absl::StatusOr<cuda::DevicePool::Lease> lease = Checkout(device, wait);
      if (!lease.ok()) return lease.status();
      return cuda::MakeSegmentReduction(plan, std::move(*lease), &engine_);
    }
    cuda::PassPlan passes = cuda::PlanPasses(plan, exact_sums_);
    if (exact_sums_ && passes.state_bytes > pool_->state_bytes()) {
      // Exact sums keep kExactStateWords words a row (584 bytes, twice with
      // squares): rows of GPU bytes whose exact states do not fit take the
      // fused pass's float64 sums instead (host bytes run on the cpu
      // backend, exactly: Refuses). docs/architecture.md, "Exact float sums".
      passes = cuda::PlanPasses(plan, false);
    }
    if (passes.state_bytes > pool_->state_bytes()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the results of this request need ", passes.state_bytes,
          " bytes of GPU state, over --cuda_max_state_bytes=", pool_->state_bytes(),
          ": ask for fewer rows, ops or histogram bins at once."));
    }
    const std::uint64_t chunk_elements = pool_->chunk_bytes() / rules::SizeOf(plan.array.dtype);
    std::uint64_t cut = std::max(plan.array.length, chunk_elements);
    for (;;) {
      absl::StatusOr<std::size_t> scratch = Scratch(passes, cut, device);
      if (!scratch.ok()) return scratch.status();
      if (*scratch <= pool_->scratch_bytes() || cut <= chunk_elements) break;
      cut = std::max(chunk_elements, (cut / 2 + chunk_elements - 1) / chunk_elements * chunk_elements);
    }
    absl::StatusOr<cuda::DevicePool::Lease> lease = Checkout(device, wait);
    if (!lease.ok()) return lease.status();
    return cuda::MakeCudaReduction(plan, std::move(passes), std::move(*lease), &engine_, cut);
  }

  // The kernel scratch `passes` need for launches of `elements` on `device`
  // (the kernels size it by the device's multiprocessors).
  absl::StatusOr<std::size_t> Scratch(const cuda::PassPlan& passes, std::uint64_t elements, int device) const {
    cuda::ScopedDevice on(device);
    std::size_t scratch = 0;
    if (cuda::ScratchNeeded(passes, elements, &scratch) != cudaSuccess) {
      const std::string where = cuda::LastErrorWhere();
      (void)cudaGetLastError();
      spdlog::error("cuda backend: sizing scratch failed: {}", where);
      return absl::InternalError(absl::StrCat("cuda backend: sizing kernel scratch: ", where));
    }
    return scratch;
  }

  absl::StatusOr<cuda::DevicePool::Lease> Checkout(int device, std::chrono::milliseconds wait) {
    double waited = 0.0;
    absl::StatusOr<cuda::DevicePool::Lease> lease = pool_->Checkout(wait, &waited, device);
    if (Metrics* m = engine_.metrics.load(std::memory_order_acquire)) m->QueueWait(waited);
    return lease;
  }

  std::unique_ptr<cuda::DevicePool> pool_;
  const std::string device_;
  const bool exact_sums_;  // --cuda_exact_sums
  const std::chrono::milliseconds lane_wait_;
  std::unique_ptr<cpu::ThreadPool> copiers_;
  std::unique_ptr<Attachment> receive_arena_;  // registered; cleared from received_memory first
  cuda::EngineContext engine_;
  std::unique_ptr<cuda::DeviceFault> fault_;  // last: stopped before the pool goes
};

}  // namespace

int VisibleCudaDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const BackendOptions& options) {
  cuda::SetPoolKeepBytes(options.pool_keep_bytes);
  const int visible = VisibleCudaDevices();
  if (visible == 0) {
    return absl::FailedPreconditionError("--backend=cuda: no CUDA device is visible.");
  }
  std::vector<int> devices = options.cuda_devices;
  if (devices.empty()) {
    for (int d = 0; d < visible; ++d) devices.push_back(d);
  }
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError("--cuda_devices: a device is listed twice.");
  }
  for (const int d : devices) {
    if (d < 0 || d >= visible) {
      return absl::InvalidArgumentError(absl::StrCat("--cuda_devices: device ", d,
                                                     " is not one of the ", visible,
                                                     " visible CUDA devices (0..", visible - 1, ")."));
    }
  }
  if (options.chunk_bytes < EnginePolicy::kChunkAlignment ||
      options.chunk_bytes % EnginePolicy::kChunkAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--cuda_chunk_bytes: ", options.chunk_bytes,
                                                   " is not a positive multiple of ",
                                                   EnginePolicy::kChunkAlignment, "."));
  }
  if (options.streams_per_device < 1) {
    return absl::InvalidArgumentError("--cuda_streams_per_device: must be at least 1.");
  }
  if (options.max_state_bytes == 0) {
    return absl::InvalidArgumentError("--cuda_max_state_bytes: must be positive.");
  }
  if (options.lane_wait.count() < 0) {
    return absl::InvalidArgumentError("--cuda_lane_wait_ms: must not be negative.");
  }
  if (options.staging_copy_threads < 1) {
    return absl::InvalidArgumentError("--staging_copy_threads: must be at least 1.");
  }
  absl::StatusOr<std::unique_ptr<cuda::DevicePool>> pool =
      cuda::DevicePool::Create(cuda::DevicePoolOptions{
          .devices = devices,
          .pinned_pool_bytes = options.pinned_pool_bytes,
          .chunk_bytes = options.chunk_bytes,
          .lanes_per_device = options.streams_per_device,
          .state_bytes = options.max_state_bytes,
      });
  if (!pool.ok()) return pool.status();
  const cuda::DevicePool& p = **pool;
  spdlog::info(
      "cuda backend: {} lane(s) per GPU, {} KiB chunks, {} MiB pinned staging, {} KiB scratch "
      "and {} KiB state per lane; {} staging copy thread(s)",
      p.lanes_per_device(), p.chunk_bytes() >> 10, p.pinned_total() >> 20, p.scratch_bytes() >> 10,
      p.state_bytes() >> 10, options.staging_copy_threads);
  absl::StatusOr<std::optional<cuda::LoseGpuFault>> fault = cuda::ParseLoseGpuFault(options.fault_lose_gpu);
  if (!fault.ok()) return fault.status();
  if (*fault && !p.Uses((*fault)->device)) {
    return absl::InvalidArgumentError(absl::StrCat("--fault_lose_gpu: GPU ", (*fault)->device,
                                                   " is not one of the devices in use."));
  }
  auto backend = std::make_unique<CudaBackend>(std::move(*pool), options);
  spdlog::info("cuda backend: {}", backend->device());
  if (!options.receive_arena.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = backend->RegisterReceiveArena(options.receive_arena); !s.ok()) return s;
    spdlog::info("cuda backend: {} MiB receive arena registered with CUDA in {:.0f} ms: received slices in it "
                 "are copied to the GPU where they lie",
                 options.receive_arena.size() >> 20,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (*fault) {
    spdlog::warn("cuda backend: --fault_lose_gpu: GPU {} will be marked lost {} ms from now (a test)",
                 (*fault)->device, (*fault)->after.count());
    backend->InjectFault(**fault);
  }
  return backend;
}

}  // namespace tally
