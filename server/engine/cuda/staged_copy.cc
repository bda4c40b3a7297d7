#include "server/engine/cuda/staged_copy.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/engine/cuda/cuda_resources.h"

namespace tally::cuda {
namespace {

absl::Status Failed(cudaError_t e, const char* what) {
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat("copying to the host, ", what, ": ", cudaGetErrorString(e)));
}

// How long to wait for a staging block before copying without one.
constexpr std::chrono::milliseconds kBlockWait{5};

}  // namespace

absl::Status CopyToHostStaged(PinnedPool& pinned, cudaStream_t stream, const void* from, std::size_t bytes,
                              void* to) {
  const auto plain = [&]() -> absl::Status {
    if (const cudaError_t e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream); e != cudaSuccess) {
      return Failed(e, "a plain copy");
    }
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return Failed(e, "a plain copy");
    return absl::OkStatus();
  };
  if (bytes <= pinned.block_bytes()) return plain();
  std::array<PinnedPool::Block, 2> block;
  for (PinnedPool::Block& b : block) {
    absl::StatusOr<PinnedPool::Block> got = pinned.Acquire(kBlockWait);
    if (!got.ok()) {
      for (PinnedPool::Block& held : block) pinned.ReleaseNow(held);
      return plain();
    }
    b = *got;
  }
  std::array<Event, 2> copied;
  absl::Status status = absl::OkStatus();
  for (Event& e : copied) {
    if (const cudaError_t err = Event::Create(false, &e); err != cudaSuccess && status.ok()) {
      status = Failed(err, "creating an event");
    }
  }
  const std::size_t step = pinned.block_bytes();
  const auto* source = static_cast<const std::byte*>(from);
  auto* target = static_cast<std::byte*>(to);
  // Piece i goes through block i % 2: piece i + 1 is on its way over the bus
  // while the host copies piece i out.
  const auto start = [&](std::size_t piece) -> cudaError_t {
    const std::size_t at = piece * step, n = std::min(step, bytes - at);
    if (const cudaError_t e = cudaMemcpyAsync(block[piece % 2].data, source + at, n, cudaMemcpyDeviceToHost, stream);
        e != cudaSuccess) {
      return e;
    }
    return cudaEventRecord(copied[piece % 2].get(), stream);
  };
  const std::size_t pieces = (bytes + step - 1) / step;
  if (status.ok()) {
    if (const cudaError_t e = start(0); e != cudaSuccess) status = Failed(e, "starting a piece");
  }
  for (std::size_t piece = 0; status.ok() && piece < pieces; ++piece) {
    if (piece + 1 < pieces) {
      if (const cudaError_t e = start(piece + 1); e != cudaSuccess) {
        status = Failed(e, "starting a piece");
        break;
      }
    }
    if (const cudaError_t e = cudaEventSynchronize(copied[piece % 2].get()); e != cudaSuccess) {
      status = Failed(e, "waiting for a piece");
      break;
    }
    const std::size_t at = piece * step;
    std::memcpy(target + at, block[piece % 2].data, std::min(step, bytes - at));
  }
  // Nothing still reads the blocks once the stream is idle.
  if (!status.ok()) (void)cudaStreamSynchronize(stream);
  for (PinnedPool::Block& b : block) pinned.ReleaseNow(b);
  return status;
}

absl::Status CopyAllToHost(PinnedPool& pinned, cudaStream_t stream, std::span<const HostCopy> copies) {
  // Each copy at a 16-byte boundary of the block.
  const auto rounded = [](std::size_t n) { return (n + 15) / 16 * 16; };
  std::size_t total = 0;
  for (const HostCopy& c : copies) total += rounded(c.bytes);
  const auto one_by_one = [&]() -> absl::Status {
    for (const HostCopy& c : copies) {
      if (absl::Status s = CopyToHostStaged(pinned, stream, c.from, c.bytes, c.to); !s.ok()) return s;
    }
    return absl::OkStatus();
  };
  if (copies.size() < 2 || total > pinned.block_bytes()) return one_by_one();
  absl::StatusOr<PinnedPool::Block> block = pinned.Acquire(kBlockWait);
  if (!block.ok()) return one_by_one();
  absl::Status status = absl::OkStatus();
  std::size_t at = 0;
  for (const HostCopy& c : copies) {
    if (c.bytes != 0) {
      if (const cudaError_t e = cudaMemcpyAsync(block->data + at, c.from, c.bytes, cudaMemcpyDeviceToHost, stream);
          e != cudaSuccess) {
        status = Failed(e, "starting a copy into one block");
        break;
      }
    }
    at += rounded(c.bytes);
  }
  // Waited for whether or not every copy started: nothing may still write
  // into the block when it goes back.
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess && status.ok()) {
    status = Failed(e, "waiting for the copies into one block");
  }
  if (status.ok()) {
    at = 0;
    for (const HostCopy& c : copies) {
      if (c.bytes != 0) std::memcpy(c.to, block->data + at, c.bytes);
      at += rounded(c.bytes);
    }
  }
  pinned.ReleaseNow(*block);
  return status;
}

}  // namespace tally::cuda
