// The exact selection behind OrderStatistics and top-k's fallback, over
// keys of one mode (select/keys.h). Plain C++: it plans the passes on the
// host between them.
//
// Count(): the sample, the bucket table built from it (on the device), one
// counting pass over the array; with hints (the fractions of the ranks to
// come, as a median's 0.5), the buckets the sample places them in are
// flagged and the counting pass also gathers their elements, so that
// Select() sorts those and reads no more of the array when every rank's
// bucket was among them. Otherwise Select(): each rank's bucket from the
// counts; a bucket of one key is the answer already; the others' elements
// are gathered in one more pass (a few MB: the table spreads the buckets
// evenly), sorted by CUB, and read at the ranks' places. When the ranks'
// buckets hold more than the gathering room (heavy duplicates, or a sample
// that missed a dense range) the counting pass runs again with the table
// narrowed to those buckets' ranges, until they fit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "select/keys.h"
#include "tally/kernels/select.h"

namespace tally::kernels::select {

// cudaErrorInvalidValue, recorded (cuda::LastErrorWhere) with `why`.
[[nodiscard]] cudaError_t Invalid(const char* why, const char* file, int line);
#define TALLY_SELECT_INVALID(why) ::tally::kernels::select::Invalid(why, __FILE__, __LINE__)

class Selection {
 public:
  virtual ~Selection() = default;
  // `hints`: fractions of the non-NaN elements (0 the smallest, 1 the
  // largest) near which SelectKeys' ranks will lie, if known; up to
  // SelectPolicy::kMaxHints of them let the counting pass gather the
  // buckets those ranks are predicted in, so that SelectKeys reads the
  // array no more (selection.h's top).
  [[nodiscard]] virtual cudaError_t Count(std::uint64_t* nan, std::span<const double> hints) = 0;
  // keys[i] = the key of rank ranks[i] (ascending key order, NaN left out
  // in kNumbers), widened to 64 bits.
  [[nodiscard]] virtual cudaError_t SelectKeys(std::span<const std::uint64_t> ranks,
                                               std::span<std::uint64_t> keys) = 0;
  // The element bits of the number with key `key` (kNumbers).
  virtual std::uint64_t NumberBitsOf(std::uint64_t key) const = 0;
  PassStats stats;
};

// Scratch for a Selection of up to max_ranks ranks gathering up to `room`
// elements for its final sort (SelectPolicy::Candidates).
[[nodiscard]] cudaError_t SelectionScratchBytes(const DeviceArray& array, std::size_t max_ranks, std::uint64_t room,
                                                std::size_t* bytes);
// A Selection in `mode` over `array`, in `scratch` (SelectionScratchBytes).
std::unique_ptr<Selection> MakeSelection(const DeviceArray& array, KeyMode mode, std::size_t max_ranks,
                                         std::uint64_t room, void* scratch, cudaStream_t stream);

}  // namespace tally::kernels::select
