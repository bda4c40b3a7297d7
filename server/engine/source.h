// Where an array's bytes live when a backend reads them: the one seam through
// which every way data reaches tally enters the engine. Bytes received over
// gRPC (inline or streamed) are pageable host memory; a resident dataset is
// device memory on the cuda backend and host memory on the cpu backend;
// memory registered with CUDA is pinned host memory. A backend reads each
// kind in the cheapest way it has (docs/architecture.md, "The source seam").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tally {

enum class Memory : std::uint8_t {
  kPageableHost,  // ordinary host memory: the GPU reaches it only through a staging copy
  kPinnedHost,    // page-locked host memory the GPU can copy from directly
  kDevice,        // memory of one GPU
};

struct Placement {
  Memory memory = Memory::kPageableHost;
  int device = -1;  // the CUDA ordinal when memory is kDevice; -1 otherwise

  static constexpr Placement PageableHost() { return {Memory::kPageableHost, -1}; }
  static constexpr Placement PinnedHost() { return {Memory::kPinnedHost, -1}; }
  static constexpr Placement Device(int ordinal) { return {Memory::kDevice, ordinal}; }

  bool host() const { return memory != Memory::kDevice; }
  bool operator==(const Placement&) const = default;
  // "pageable host memory", "pinned host memory", "GPU 0 memory".
  std::string Describe() const {
    switch (memory) {
      case Memory::kPageableHost: return "pageable host memory";
      case Memory::kPinnedHost: return "pinned host memory";
      case Memory::kDevice: return "GPU " + std::to_string(device) + " memory";
    }
    return "unknown memory";
  }
};

// A run of an array's bytes and where they lie. Device bytes are never
// dereferenced on the host.
struct Extent {
  std::span<const std::byte> bytes;
  Placement placement;

  static Extent PageableHost(std::span<const std::byte> b) { return {b, Placement::PageableHost()}; }
  std::uint64_t size() const { return bytes.size(); }
  // The bytes [offset, offset + count), in the same place.
  Extent Sub(std::uint64_t offset, std::uint64_t count) const {
    return {bytes.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(count)), placement};
  }
};

// A run of an array that lies in pieces (a sharded dataset's range):
// `first` is the index of the piece's first element in the array.
struct PlacedPiece {
  std::uint64_t first = 0;
  Extent extent;
};

}  // namespace tally
