// Several runs of host memory read as one stretch of an array's bytes: the
// receive slices of one gRPC message (8 to 64 KiB each, so a 4 MiB message
// is 64 to 512 of them), all present at once. A backend reads them through
// this view in whatever pieces suit it, and in parallel: a piece that lies in
// one run is read where it lies, one that straddles runs is gathered. Each
// run keeps its placement: slices in the pinned receive arena are pinned
// host memory, the others pageable (server/engine/received_memory.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "server/engine/source.h"

namespace tally {

class HostRuns {
 public:
  // The runs follow one another in the array; all are host memory, pinned
  // or pageable.
  explicit HostRuns(std::span<const Extent> runs) {
    runs_.reserve(runs.size());
    starts_.reserve(runs.size());
    pinned_.reserve(runs.size());
    for (const Extent& r : runs) {
      if (r.size() == 0) continue;
      starts_.push_back(size_);
      runs_.push_back(r.bytes);
      const bool pinned = r.placement.memory == Memory::kPinnedHost;
      pinned_.push_back(pinned);
      if (pinned) pinned_bytes_ += r.size();
      size_ += r.size();
    }
  }

  std::uint64_t size() const { return size_; }
  // Pinned host memory when every run is, else pageable: what a reader that
  // takes the runs as one kind may assume of all of them.
  Placement placement() const {
    return size_ > 0 && pinned_bytes_ == size_ ? Placement::PinnedHost() : Placement::PageableHost();
  }
  std::uint64_t pinned_bytes() const { return pinned_bytes_; }
  std::size_t count() const { return runs_.size(); }

  // Whether every byte of [offset, offset + n) lies in pinned host memory.
  bool Pinned(std::uint64_t offset, std::uint64_t n) const {
    if (n == 0) return true;
    if (pinned_bytes_ == 0) return false;
    for (std::size_t r = RunAt(offset); r < runs_.size() && starts_[r] < offset + n; ++r) {
      if (!pinned_[r]) return false;
    }
    return true;
  }

  // Bytes [offset, offset + n) where they lie when one run holds them all,
  // else nullptr.
  const std::byte* Find(std::uint64_t offset, std::uint64_t n) const {
    if (runs_.empty()) return nullptr;
    const std::size_t r = RunAt(offset);
    const std::uint64_t in_run = offset - starts_[r];
    if (in_run + n > runs_[r].size()) return nullptr;
    return runs_[r].data() + in_run;
  }

  // Copies bytes [offset, offset + n) to `out`.
  void CopyOut(std::uint64_t offset, std::uint64_t n, std::byte* out) const {
    std::size_t r = RunAt(offset);
    std::uint64_t in_run = offset - starts_[r];
    while (n > 0) {
      const std::uint64_t take = std::min<std::uint64_t>(n, runs_[r].size() - in_run);
      std::memcpy(out, runs_[r].data() + in_run, take);
      out += take;
      n -= take;
      ++r;
      in_run = 0;
    }
  }

  // Calls fn(std::span<const std::byte>) for the parts of [offset, offset + n)
  // that lie in each run, in order.
  template <typename Fn>
  void ForEachPart(std::uint64_t offset, std::uint64_t n, Fn&& fn) const {
    if (n == 0) return;
    std::size_t r = RunAt(offset);
    std::uint64_t in_run = offset - starts_[r];
    while (n > 0) {
      const std::uint64_t take = std::min<std::uint64_t>(n, runs_[r].size() - in_run);
      fn(runs_[r].subspan(static_cast<std::size_t>(in_run), static_cast<std::size_t>(take)));
      n -= take;
      ++r;
      in_run = 0;
    }
  }

 private:
  // The run holding byte `offset` (< size()).
  std::size_t RunAt(std::uint64_t offset) const {
    const auto after = std::upper_bound(starts_.begin(), starts_.end(), offset);
    return static_cast<std::size_t>(after - starts_.begin()) - 1;
  }

  std::vector<std::span<const std::byte>> runs_;
  std::vector<std::uint64_t> starts_;  // each run's first byte in the view
  std::vector<bool> pinned_;  // each run's
  std::uint64_t size_ = 0;
  std::uint64_t pinned_bytes_ = 0;
};

}  // namespace tally
