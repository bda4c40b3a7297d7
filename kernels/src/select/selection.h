// The exact selection behind OrderStatistics and top-k's fallback, over
// keys of one mode (select/keys.h). Plain C++: it plans the passes on the
// host between them.
//
// Count() with hints (the fractions of the ranks to come, as a median's
// 0.5; up to SelectPolicy::kMaxHints): a few ranks of the sample (a rank
// selection, rank_select.cuh) place a window of keys around each hint, and
// one pass (window_kernels.cuh) counts the numbers below each window and
// up to its top and gathers the keys inside; SelectKeys() reads each rank
// at its place among those (a rank selection again, or a sort for more
// than kMaxRankSelect places) when every rank fell in a window. Otherwise (no hints, windows that would gather too
// much, or a rank outside them) the counting pass: the sample's bucket
// table (on the device), every element counted in its bucket; then each
// rank's bucket from the counts; a bucket of one key is the answer
// already; the others' elements are gathered in one more pass (a few MB:
// the table spreads the buckets evenly) and read at the ranks' places
// in their order. When the ranks' buckets hold more than the gathering room
// (heavy duplicates, or a sample that missed a dense range) the counting
// pass runs again with the table narrowed to those buckets' ranges, until
// they fit.
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
  // SelectPolicy::kMaxHints of them take the window pass instead of the
  // counting pass, so that SelectKeys reads the array no more when the
  // ranks lie where the sample placed them (this file's top).
  [[nodiscard]] virtual cudaError_t Count(std::uint64_t* nan, std::span<const double> hints) = 0;
  // keys[i] = the key of rank ranks[i] (ascending key order, NaN left out
  // in kNumbers), widened to 64 bits.
  [[nodiscard]] virtual cudaError_t SelectKeys(std::span<const std::uint64_t> ranks,
                                               std::span<std::uint64_t> keys) = 0;
  // The element bits of the number with key `key` (kNumbers).
  virtual std::uint64_t NumberBitsOf(std::uint64_t key) const = 0;
  PassStats stats;
};

// What SortedSegments runs, per element type (segment_sort.cu).
class SortedSegmentsImpl {
 public:
  virtual ~SortedSegmentsImpl() = default;
  [[nodiscard]] virtual cudaError_t Sort(std::span<const std::uint64_t> offsets, std::span<std::uint64_t> nan) = 0;
  [[nodiscard]] virtual cudaError_t Elements(std::span<const std::uint64_t> places,
                                             std::span<std::uint64_t> bits) = 0;
};

// Scratch for a Selection of up to max_ranks ranks gathering up to `room`
// elements for its final sort (SelectPolicy::Candidates).
[[nodiscard]] cudaError_t SelectionScratchBytes(const DeviceArray& array, std::size_t max_ranks, std::uint64_t room,
                                                std::size_t* bytes);
// A Selection in `mode` over `array`, in `scratch` (SelectionScratchBytes).
std::unique_ptr<Selection> MakeSelection(const DeviceArray& array, KeyMode mode, std::size_t max_ranks,
                                         std::uint64_t room, void* scratch, cudaStream_t stream);

}  // namespace tally::kernels::select
