// DevicePool: sizing and allocation at start, lane checkout, lost devices.
#include "server/engine/cuda/device_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "tally/kernels/aggregate.h"
#include "tally/kernels/cuda_error.h"
#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::cuda {
namespace {

constexpr std::uint64_t kAlign = 256;
std::uint64_t AlignUp(std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The most scratch any plan is expected to need for one chunk on the current
// device: the kernels size scratch by launch shape (segments x slices), so
// sample each dtype with the heaviest op sets over row lengths that cross
// every shape boundary (whole array, team rows, the team limit, long rows,
// rows near the chunk size). Requests are still checked one by one.
std::size_t SampledScratch(std::uint64_t chunk_bytes) {
  using rules::Bit;
  using rules::OpKind;
  const rules::OpMask fused = Bit(OpKind::kSum) | Bit(OpKind::kMin) | Bit(OpKind::kMax) |
                            Bit(OpKind::kMean) | Bit(OpKind::kSumSquares) |
                            Bit(OpKind::kVariance) | Bit(OpKind::kArgmin) | Bit(OpKind::kArgmax);
  const rules::OpMask masks[] = {fused, fused | Bit(OpKind::kHistogram), Bit(OpKind::kHistogram)};
  const std::uint32_t bins[] = {16, 4096, 65536};
  std::size_t most = 0;
  for (const rules::DType t : rules::kAllDTypes) {
    const std::uint64_t es = rules::SizeOf(t);
    const std::uint64_t chunk = chunk_bytes / es;
    const std::uint64_t rows[] = {0,          1,         7,         1000,
                                  16384 / es, 16384 / es + 1, 65536, chunk / 2 + 1,
                                  chunk - 1,  chunk + 1, 3 * chunk + 5};
    for (const rules::OpMask m : masks) {
      for (const std::uint32_t b : bins) {
        if ((m & Bit(OpKind::kHistogram)) == 0 && b != bins[0]) continue;
        for (const std::uint64_t r : rows) {
          kernels::AggregatePlan p;
          p.dtype = t;
          p.ops = m;
          p.histogram = {b, 0.0, 1.0};
          p.row_length = r;
          p.length = r == 0 ? 4 * chunk : r * (4 * chunk / r + 2);
          std::size_t bytes = 0;
          // A sample the kernels refuse only loses its vote: every request
          // is sized again at Start().
          if (kernels::ScratchBytes(p, chunk, &bytes) != cudaSuccess) {
            spdlog::debug("cuda backend: scratch sample refused: {}", LastErrorWhere());
            (void)cudaGetLastError();
            continue;
          }
          most = std::max(most, bytes);
        }
      }
    }
  }
  return most;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(const DevicePoolOptions& o) {
  if (o.devices.empty()) return absl::FailedPreconditionError("cuda backend: no CUDA device to use.");
  const std::uint64_t n = o.devices.size();
  const std::uint64_t blocks = o.pinned_pool_bytes / n / o.chunk_bytes;
  const int fit = static_cast<int>(blocks / EnginePolicy::kBlocksPerLane);
  const int lanes = std::min(o.lanes_per_device, fit);
  if (lanes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pinned_pool_bytes=", o.pinned_pool_bytes, " gives each of ", n, " GPU(s) ", blocks,
        " staging block(s) of --cuda_chunk_bytes=", o.chunk_bytes, "; a lane needs ",
        EnginePolicy::kBlocksPerLane, ": raise --pinned_pool_bytes or lower --cuda_chunk_bytes."));
  }
  if (lanes < o.lanes_per_device) {
    spdlog::warn(
        "cuda backend: --pinned_pool_bytes={} holds {} staging blocks per GPU, enough for {} of "
        "the {} lanes --cuda_streams_per_device asks for; using {}",
        o.pinned_pool_bytes, blocks, lanes, o.lanes_per_device, lanes);
  }

  std::unique_ptr<DevicePool> pool(new DevicePool());
  pool->ordinals_ = o.devices;
  pool->lanes_per_device_ = lanes;
  pool->chunk_bytes_ = o.chunk_bytes;
  pool->state_bytes_ = AlignUp(o.state_bytes);

  // Scratch and names, per device.
  pool->devices_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    Device& d = pool->devices_[i];
    d.ordinal = o.devices[i];
    ScopedDevice on(d.ordinal);
    cudaDeviceProp prop{};
    if (Record(cudaGetDeviceProperties(&prop, d.ordinal), "cudaGetDeviceProperties", __FILE__,
               __LINE__) != cudaSuccess) {
      return absl::InternalError(
          absl::StrCat("cuda backend: device ", d.ordinal, ": ", LastErrorWhere()));
    }
    d.name = prop.name;
    d.label = absl::StrCat(d.name, " (", d.ordinal, ")");
    pool->scratch_bytes_ = std::max(pool->scratch_bytes_, SampledScratch(o.chunk_bytes));
  }
  pool->scratch_bytes_ = AlignUp(pool->scratch_bytes_ * EnginePolicy::kScratchHeadroomFactor +
                                 EnginePolicy::kScratchHeadroomBytes);

  // The one pinned allocation: per device, its staging blocks, then one
  // result buffer per lane.
  const std::uint64_t staging = blocks * o.chunk_bytes;
  const std::uint64_t per_device = staging + static_cast<std::uint64_t>(lanes) * pool->state_bytes_;
  {
    ScopedDevice on(o.devices[0]);
    if (PinnedBuffer::Create(per_device * n, &pool->upstream_) != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda backend: cannot pin ", per_device * n, " bytes of host memory (",
          LastErrorWhere(), "); lower --pinned_pool_bytes or --cuda_max_state_bytes."));
    }
  }
  const LaneSizes sizes{.chunk_bytes = o.chunk_bytes,
                        .state_bytes = pool->state_bytes_,
                        .scratch_bytes = pool->scratch_bytes_};
  for (std::size_t i = 0; i < n; ++i) {
    Device& d = pool->devices_[i];
    std::byte* base = pool->upstream_.data() + i * per_device;
    absl::StatusOr<std::unique_ptr<PinnedPool>> pinned =
        PinnedPool::Create({base, staging}, o.chunk_bytes, d.ordinal);
    if (!pinned.ok()) return pinned.status();
    d.pinned = std::move(*pinned);
    for (int l = 0; l < lanes; ++l) {
      std::byte* result = base + staging + static_cast<std::uint64_t>(l) * pool->state_bytes_;
      absl::StatusOr<std::unique_ptr<DeviceLane>> lane =
          DeviceLane::Create(d.ordinal, l, sizes, {result, pool->state_bytes_});
      if (!lane.ok()) return lane.status();
      d.lanes.push_back(std::move(*lane));
    }
  }
  pool->slots_ = std::make_unique<LaneSlots>(std::vector<int>(n, lanes));
  return pool;
}

DevicePool::~DevicePool() = default;

absl::StatusOr<DevicePool::Lease> DevicePool::Checkout(std::chrono::milliseconds wait,
                                                       double* waited, int only_device) {
  int place = -1;
  if (only_device >= 0) {
    const Device* d = Find(only_device);
    if (d == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cuda backend: GPU ", only_device, " is not one of the devices in use."));
    }
    place = static_cast<int>(d - devices_.data());
  }
  const LaneSlots::Taken taken = slots_->Take(place, wait);
  *waited = taken.waited_seconds;
  if (taken.outcome == LaneSlots::Outcome::kLost) {
    std::lock_guard lock(mutex_);
    std::string why;
    for (const Device& d : devices_) {
      if (only_device < 0 || d.ordinal == only_device) absl::StrAppend(&why, why.empty() ? "" : "; ", d.lost_why);
    }
    return absl::UnavailableError(absl::StrCat(
        only_device >= 0 ? "cuda backend: the GPU that holds the data is lost: " : "cuda backend: every GPU is lost: ",
        why));
  }
  if (taken.outcome == LaneSlots::Outcome::kBusy) {
    if (only_device >= 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cuda backend: the ", lanes_per_device_, " lanes of GPU ", only_device, " (--cuda_streams_per_device=",
          lanes_per_device_, ") stayed busy for --cuda_lane_wait_ms=", wait.count(),
          "; retry, or raise --cuda_streams_per_device."));
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "cuda backend: all ", lanes_per_device_ * static_cast<int>(devices_.size()),
        " GPU lanes (--cuda_streams_per_device=", lanes_per_device_, " on ", devices_.size(),
        " GPU(s)) stayed busy for --cuda_lane_wait_ms=", wait.count(),
        "; retry, or raise --cuda_streams_per_device."));
  }
  return Lease(this, devices_[static_cast<std::size_t>(taken.place)].lanes[static_cast<std::size_t>(taken.lane)].get());
}

void DevicePool::Return(DeviceLane* lane) {
  const Device* d = Find(lane->device());
  if (d == nullptr) return;
  slots_->Give(static_cast<int>(d - devices_.data()), lane->index());  // a lost device's lanes stay unused
}

void DevicePool::MarkLost(int device, const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    Device* d = Find(device);
    if (d == nullptr || !d->lost_why.empty()) return;
    d->lost_why = absl::StrCat("CUDA device ", d->label, " lost: ", why);
    spdlog::error("cuda backend: {}; no new requests go to it", d->lost_why);
  }
  slots_->MarkLost(static_cast<int>(Find(device) - devices_.data()));  // waiters re-check
}

absl::Status DevicePool::Health() const {
  std::lock_guard lock(mutex_);
  std::string why;
  for (const Device& d : devices_) {
    if (d.lost_why.empty()) return absl::OkStatus();
    absl::StrAppend(&why, why.empty() ? "" : "; ", d.lost_why);
  }
  return absl::UnavailableError(why);
}

absl::Status DevicePool::DeviceHealth(int device) const {
  std::lock_guard lock(mutex_);
  const Device* d = Find(device);
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("cuda backend: GPU ", device, " is not in use."));
  return d->lost_why.empty() ? absl::OkStatus() : absl::UnavailableError(d->lost_why);
}

PinnedPool& DevicePool::pinned(int device) const { return *Find(device)->pinned; }

std::uint64_t DevicePool::pinned_total() const {
  std::uint64_t t = 0;
  for (const Device& d : devices_) t += d.pinned->total_bytes();
  return t;
}

std::uint64_t DevicePool::pinned_used() const {
  std::uint64_t u = 0;
  for (const Device& d : devices_) u += d.pinned->used_bytes();
  return u;
}

const std::string& DevicePool::DeviceName(int device) const { return Find(device)->label; }
const std::string& DevicePool::Model(int device) const { return Find(device)->name; }

DevicePool::Device* DevicePool::Find(int ordinal) {
  for (Device& d : devices_) {
    if (d.ordinal == ordinal) return &d;
  }
  return nullptr;
}

const DevicePool::Device* DevicePool::Find(int ordinal) const {
  for (const Device& d : devices_) {
    if (d.ordinal == ordinal) return &d;
  }
  return nullptr;
}

}  // namespace tally::cuda
