#include "server/engine/cuda/staged_copy.h"

#include <algorithm>
#include <array>
#include <chrono>

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

// Each piece at a 16-byte boundary of its block.
std::size_t Rounded(std::size_t n) { return (n + 15) / 16 * 16; }

// Part of one copy, and where it lies in its batch's block.
struct Piece {
  const HostCopy* copy;
  std::size_t offset;  // into the copy's bytes
  std::size_t bytes;
  std::size_t at;  // in the block
};

// The copies cut into batches of one block each: small copies share a
// block, a large one takes several.
std::vector<std::vector<Piece>> Batches(std::span<const HostCopy> copies, std::size_t block) {
  std::vector<std::vector<Piece>> batches(1);
  std::size_t fill = 0;
  for (const HostCopy& c : copies) {
    for (std::size_t offset = 0; offset < c.bytes;) {
      if (fill >= block) {
        batches.emplace_back();
        fill = 0;
      }
      const std::size_t n = std::min(c.bytes - offset, block - fill);
      batches.back().push_back(Piece{&c, offset, n, fill});
      offset += n;
      fill = Rounded(fill + n);
    }
  }
  return batches;
}

// Each copy through a plain cudaMemcpy into its target sized whole (the
// driver stages pageable memory itself, more slowly).
absl::Status Plain(cudaStream_t stream, std::span<const HostCopy> copies) {
  for (const HostCopy& c : copies) {
    if (c.bytes == 0) continue;
    if (const cudaError_t e = cudaMemcpyAsync(c.to->Whole(c.bytes), c.from, c.bytes, cudaMemcpyDeviceToHost, stream);
        e != cudaSuccess) {
      return Failed(e, "a plain copy");
    }
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return Failed(e, "a plain copy");
  return absl::OkStatus();
}

}  // namespace

absl::Status CopyAllToHost(PinnedPool& pinned, cudaStream_t stream, std::span<const HostCopy> copies) {
  const std::vector<std::vector<Piece>> batches = Batches(copies, pinned.block_bytes());
  if (batches.front().empty()) return absl::OkStatus();  // nothing to copy
  // Two blocks where there are several batches, so that one goes over the
  // bus while the host copies out of the other; one where one batch holds
  // everything, or where the pool lends only one within the wait.
  std::array<PinnedPool::Block, 2> block;
  int held = 0;
  for (int b = 0; b < (batches.size() > 1 ? 2 : 1); ++b) {
    absl::StatusOr<PinnedPool::Block> got = pinned.Acquire(kBlockWait);
    if (!got.ok()) break;
    block[held++] = *got;
  }
  if (held == 0) return Plain(stream, copies);
  std::array<Event, 2> copied;
  absl::Status status = absl::OkStatus();
  for (int b = 0; b < held && status.ok(); ++b) {
    if (const cudaError_t e = Event::Create(false, &copied[b]); e != cudaSuccess) status = Failed(e, "creating an event");
  }
  const auto start = [&](std::size_t batch) -> cudaError_t {
    std::byte* to = block[batch % held].data;
    for (const Piece& p : batches[batch]) {
      if (const cudaError_t e = cudaMemcpyAsync(to + p.at, static_cast<const std::byte*>(p.copy->from) + p.offset,
                                                p.bytes, cudaMemcpyDeviceToHost, stream);
          e != cudaSuccess) {
        return e;
      }
    }
    return cudaEventRecord(copied[batch % held].get(), stream);
  };
  if (status.ok()) {
    if (const cudaError_t e = start(0); e != cudaSuccess) status = Failed(e, "starting a batch");
  }
  for (std::size_t batch = 0; status.ok() && batch < batches.size(); ++batch) {
    // With two blocks the next batch goes over the bus while this one is
    // copied out; with one it waits until this one is out.
    if (held == 2 && batch + 1 < batches.size()) {
      if (const cudaError_t e = start(batch + 1); e != cudaSuccess) {
        status = Failed(e, "starting a batch");
        break;
      }
    }
    if (const cudaError_t e = cudaEventSynchronize(copied[batch % held].get()); e != cudaSuccess) {
      status = Failed(e, "waiting for a batch");
      break;
    }
    for (const Piece& p : batches[batch]) p.copy->to->Append(block[batch % held].data + p.at, p.bytes);
    if (held == 1 && batch + 1 < batches.size()) {
      if (const cudaError_t e = start(batch + 1); e != cudaSuccess) {
        status = Failed(e, "starting a batch");
        break;
      }
    }
  }
  // Nothing may still write into a block when it goes back.
  if (!status.ok()) (void)cudaStreamSynchronize(stream);
  for (int b = 0; b < held; ++b) pinned.ReleaseNow(block[b]);
  return status;
}

}  // namespace tally::cuda
