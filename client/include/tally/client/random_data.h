// Deterministic random arrays for trying and loading a server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tally/rules/dtype.h"

namespace tally::client {

// An owned, uninitialised byte buffer: a random array of many GiB should not
// be written twice (once with zeros, once with data).
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::uint64_t bytes);

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  std::uint64_t size() const { return size_; }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::uint64_t size_ = 0;
};

// Fills `length` elements of `dtype` at `out` from a generator seeded with
// `seed` (xoshiro256**, so the same seed gives the same bytes everywhere).
// Values, uniform: floats in [-1, 1) (float16 and bfloat16 rounded to
// their dtype); int32 in [-2^20, 2^20); int64 in [-2^32, 2^32) (beyond
// int32's range); uint32 in [0, 2^20); int8, int16, uint8, uint16 and
// uint64 over their whole range; bool 0 or 1. Never all zeros; integer
// sums cannot overflow for any array below 2^30 elements, except uint64's,
// which wrap modulo 2^64 as numpy's do.
// `progress`, when set, is called every few million elements with the
// number filled so far (GiB take seconds: a caller can show that it works).
using FillProgress = std::function<void(std::uint64_t filled, std::uint64_t length)>;
void FillRandom(rules::DType dtype, std::uint64_t seed, std::byte* out, std::uint64_t length,
                const FillProgress& progress = {});

}  // namespace tally::client
