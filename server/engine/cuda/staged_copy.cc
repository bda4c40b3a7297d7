#include "server/engine/cuda/staged_copy.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "server/engine/cpu/thread_pool.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/tuning.h"
#include "server/engine/huge_pages.h"

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

// The copies' bytes in the order they go over the bus: each copy whole,
// one after the other, or (`dealt`) cut into pieces of a block and dealt
// in turn, the first piece of each copy, then the second of each, ...
std::vector<Piece> InOrder(std::span<const HostCopy> copies, std::size_t block, bool dealt) {
  std::vector<Piece> order;
  if (!dealt) {
    for (const HostCopy& c : copies) order.push_back(Piece{&c, 0, c.bytes, 0});
    return order;
  }
  for (std::size_t offset = 0;; offset += block) {
    bool any = false;
    for (const HostCopy& c : copies) {
      if (offset >= c.bytes) continue;
      order.push_back(Piece{&c, offset, std::min(block, c.bytes - offset), 0});
      any = true;
    }
    if (!any) return order;
  }
}

// The bytes cut into batches of one block each: small pieces share a
// block, a large one takes several.
std::vector<std::vector<Piece>> Batches(const std::vector<Piece>& order, std::size_t block) {
  std::vector<std::vector<Piece>> batches(1);
  std::size_t fill = 0;
  for (const Piece& piece : order) {
    for (std::size_t offset = 0; offset < piece.bytes;) {
      if (fill >= block) {
        batches.emplace_back();
        fill = 0;
      }
      const std::size_t n = std::min(piece.bytes - offset, block - fill);
      batches.back().push_back(Piece{piece.copy, piece.offset + offset, n, fill});
      offset += n;
      fill = Rounded(fill + n);
    }
  }
  if (batches.back().empty()) batches.pop_back();
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

// Whether `bytes` are enough for the copiers to take part (each takes at
// least kParallelCopyBytes of them, two at least): below, the hand-off
// costs more than it spares.
bool ForCopiers(const cpu::ThreadPool* copiers, std::size_t bytes) {
  return copiers != nullptr && bytes >= 2 * EnginePolicy::kParallelCopyBytes;
}

// The blocks a copy holds: `wave` batches go over the bus together, in
// one or two sets of blocks.
struct Blocks {
  std::vector<PinnedPool::Block> held;
  std::vector<Event> copied;  // one per block: its batch is on the host
  std::size_t wave = 1;
  std::size_t sets = 1;
  // The block of batch `b`.
  std::size_t Of(std::size_t b) const { return (b / wave % sets) * wave + b % wave; }
};

}  // namespace

absl::Status CopyAllToHost(PinnedPool& pinned, cudaStream_t stream, std::span<const HostCopy> copies,
                           cpu::ThreadPool* copiers) {
  const std::size_t participants = copiers == nullptr ? 1 : static_cast<std::size_t>(copiers->participants());
  const std::vector<std::vector<Piece>> batches =
      Batches(InOrder(copies, pinned.block_bytes(), participants > 1), pinned.block_bytes());
  if (batches.empty()) return absl::OkStatus();  // nothing to copy
  // A wave of a batch per participant, as many of each copy where there
  // are no more copies than participants (each participant then copies as
  // much a wave as the next: the wave waits for its slowest); two sets of
  // blocks where there are several waves, one where one wave holds
  // everything (or where the pool lends too few blocks within the wait).
  Blocks blocks;
  std::size_t each = participants;
  if (copies.size() <= participants) each -= participants % copies.size();
  const std::size_t wave = std::min(each, batches.size());
  const std::size_t want = batches.size() > wave ? 2 * wave : wave;
  while (blocks.held.size() < want) {
    absl::StatusOr<PinnedPool::Block> got = pinned.Acquire(kBlockWait);
    if (!got.ok()) break;
    blocks.held.push_back(*got);
  }
  if (blocks.held.empty()) return Plain(stream, copies);
  const auto release = [&] {
    for (const PinnedPool::Block& b : blocks.held) pinned.ReleaseNow(b);
  };
  blocks.wave = blocks.held.size() >= want ? wave : std::max<std::size_t>(1, blocks.held.size() / 2);
  blocks.sets = std::min<std::size_t>(2, blocks.held.size() / blocks.wave);
  if (batches.size() <= blocks.wave) blocks.sets = 1;
  blocks.copied.resize(blocks.wave * blocks.sets);
  for (Event& e : blocks.copied) {
    if (const cudaError_t err = Event::Create(false, &e); err != cudaSuccess) {
      release();
      return Failed(err, "creating an event");
    }
  }
  const std::size_t waves = (batches.size() + blocks.wave - 1) / blocks.wave;
  const auto start = [&](std::size_t w) -> cudaError_t {
    for (std::size_t b = w * blocks.wave; b < std::min(batches.size(), (w + 1) * blocks.wave); ++b) {
      std::byte* to = blocks.held[blocks.Of(b)].data;
      for (const Piece& p : batches[b]) {
        if (const cudaError_t e = cudaMemcpyAsync(to + p.at, static_cast<const std::byte*>(p.copy->from) + p.offset,
                                                  p.bytes, cudaMemcpyDeviceToHost, stream);
            e != cudaSuccess) {
          return e;
        }
      }
      if (const cudaError_t e = cudaEventRecord(blocks.copied[blocks.Of(b)].get(), stream); e != cudaSuccess) {
        return e;
      }
    }
    return cudaSuccess;
  };
  // Wave w's pieces out of their blocks, each target's in order on one
  // participant.
  std::mutex failure_mu;
  absl::Status failure = absl::OkStatus();
  const auto copy_out = [&](std::size_t w) {
    const std::size_t first = w * blocks.wave, end = std::min(batches.size(), first + blocks.wave);
    std::vector<HostTarget*> targets;
    std::size_t bytes = 0;
    for (std::size_t b = first; b < end; ++b) {
      for (const Piece& p : batches[b]) {
        if (std::find(targets.begin(), targets.end(), p.copy->to) == targets.end()) targets.push_back(p.copy->to);
        bytes += p.bytes;
      }
    }
    const auto fill = [&](std::size_t t, int) {
      for (std::size_t b = first; b < end; ++b) {
        bool waited = false;
        for (const Piece& p : batches[b]) {
          if (p.copy->to != targets[t]) continue;
          if (!waited) {
            if (const cudaError_t e = cudaEventSynchronize(blocks.copied[blocks.Of(b)].get()); e != cudaSuccess) {
              std::lock_guard<std::mutex> lock(failure_mu);
              if (failure.ok()) failure = Failed(e, "waiting for a batch");
              return;
            }
            waited = true;
          }
          p.copy->to->Append(blocks.held[blocks.Of(b)].data + p.at, p.bytes);
        }
      }
    };
    if (targets.size() > 1 && ForCopiers(copiers, bytes)) {
      copiers->ParallelFor(targets.size(), fill);
    } else {
      for (std::size_t t = 0; t < targets.size(); ++t) fill(t, 0);
    }
  };
  absl::Status status = absl::OkStatus();
  if (const cudaError_t e = start(0); e != cudaSuccess) status = Failed(e, "starting a batch");
  // While the first wave crosses the bus, the copiers populate the
  // targets' room, so that no copier faults its target's pages in one by
  // one as it fills them (it copied at about 4 GB/s so, against the bus's
  // 55; docs/performance.md). Not for answers too small for the copiers
  // (ForCopiers): there the hand-off and a system call a target cost more
  // than the few pages they would spare.
  std::size_t total = 0;
  for (const HostCopy& c : copies) total += c.bytes;
  if (status.ok() && ForCopiers(copiers, total)) {
    constexpr std::size_t kPopulateBytes = std::size_t{8} << 20;  // a copier's share at a time
    std::vector<std::span<std::byte>> chunks;
    for (const HostCopy& c : copies) {
      const std::span<std::byte> whole = c.to->Room();
      const std::span<std::byte> room = whole.first(std::min(c.bytes, whole.size()));
      for (std::size_t at = 0; at < room.size(); at += kPopulateBytes) {
        chunks.push_back(room.subspan(at, std::min(kPopulateBytes, room.size() - at)));
      }
    }
    if (chunks.size() > 1) {
      copiers->ParallelFor(chunks.size(), [&](std::size_t i, int) {
        PopulateForWriting(chunks[i].data(), chunks[i].size());
      });
    }
  }
  for (std::size_t w = 0; status.ok() && w < waves; ++w) {
    // With two sets the next wave goes over the bus while this one is
    // copied out; with one it waits until this one is out.
    if (blocks.sets == 2 && w + 1 < waves) {
      if (const cudaError_t e = start(w + 1); e != cudaSuccess) {
        status = Failed(e, "starting a batch");
        break;
      }
    }
    copy_out(w);
    if (!failure.ok()) {
      status = failure;
      break;
    }
    if (blocks.sets == 1 && w + 1 < waves) {
      if (const cudaError_t e = start(w + 1); e != cudaSuccess) {
        status = Failed(e, "starting a batch");
        break;
      }
    }
  }
  // Nothing may still write into a block when it goes back.
  if (!status.ok()) (void)cudaStreamSynchronize(stream);
  release();
  return status;
}

}  // namespace tally::cuda
