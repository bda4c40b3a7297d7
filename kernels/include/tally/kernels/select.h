// tally's GPU passes for the functions that keep their own state
// (rules/agg: quantile_state.h, topk_state.h, hll_state.h) over an array
// already on the device: exact order statistics (radix selection), the k
// largest or smallest elements with their indices, and HyperLogLog's
// registers. Plain C++ (no nvcc needed to include it).
//
// Usage (server/engine/cuda/kept_on_device.cc):
//
//   kernels::DeviceArray a{rules::DType::kFloat32, d_data, n};
//   if (kernels::CheckSelectable(a) != cudaSuccess) ...   // the host's steps
//   size_t bytes = 0;
//   kernels::OrderStatistics::ScratchBytes(a, ranks_at_most, &bytes);
//   kernels::OrderStatistics select(a, ranks_at_most, d_scratch, bytes, stream);
//   uint64_t nan = 0;
//   select.Count(&nan);                      // one pass; synchronizes
//   ... ranks from rules::agg::QuantilePicks(op, n - nan, nan, ...) ...
//   select.Select(ranks, bits);              // the elements at those ranks
//
//   kernels::TopKScratchBytes(a, k, &bytes);
//   kernels::TopK(a, k, /*largest=*/true, d_scratch, bytes, stream, bits, index, &count);
//
//   kernels::HllScratchBytes(a, precision, &bytes);
//   kernels::HllSketch sketch;
//   kernels::Hll(a, precision, d_scratch, bytes, stream, &sketch);
//
// Rules:
// - dtypes: float32, float64, int32, int64, uint32 and uint64; length below
//   2^32; data aligned to its element (16-byte aligned reads fastest).
//   CheckSelectable says cudaErrorInvalidValue otherwise, and the caller
//   computes on the host.
// - Results are exact: the elements themselves, by numpy's order. Keys
//   order -0.0 equal to 0.0: an order statistic that is a zero is reported
//   as +0.0 (the host's selection may hand either back: numpy's partition
//   does too); top-k reports each element's own bytes, found by index.
// - Nothing here allocates device memory: the caller passes scratch of the
//   size the ...ScratchBytes call reports, which the call may reuse next
//   on the same stream. Each call below runs several passes and decides
//   between them on the host, so it synchronizes `stream` before returning.
// - Errors come back as cudaError_t; tally::cuda::LastErrorWhere() says
//   where a CUDA call failed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tally/rules/dtype.h"

namespace tally::kernels {

struct DeviceArray {
  rules::DType dtype = rules::DType::kFloat32;
  const void* data = nullptr;  // device memory
  std::uint64_t length = 0;    // elements
};

// Whether these passes take the dtype (float32, float64, int32, int64,
// uint32, uint64).
[[nodiscard]] bool SelectSupports(rules::DType dtype);
// cudaSuccess when the array is one these passes take (dtype, length below
// 2^32, data aligned to its element); else cudaErrorInvalidValue.
[[nodiscard]] cudaError_t CheckSelectable(const DeviceArray& array);

// How a call went: the full reads of the array it took, whether the
// sample's guess missed and an exact pass had to follow, and whether a
// selection's ranks came from the keys gathered while counting (for
// benchmarks and tests: the answer is exact either way).
struct PassStats {
  int full_passes = 0;
  bool fell_back = false;
  bool gathered_while_counting = false;
};

namespace select {
class Selection;
class SortedSegmentsImpl;
}

// Order statistics of the non-NaN elements: Count() once, then Select() once.
class OrderStatistics {
 public:
  // Scratch for selecting up to `max_ranks` ranks at once.
  [[nodiscard]] static cudaError_t ScratchBytes(const DeviceArray& array, std::size_t max_ranks, std::size_t* bytes);

  OrderStatistics(const DeviceArray& array, std::size_t max_ranks, void* scratch, std::size_t scratch_bytes,
                  cudaStream_t stream);
  ~OrderStatistics();
  OrderStatistics(const OrderStatistics&) = delete;
  OrderStatistics& operator=(const OrderStatistics&) = delete;

  // Reads the array once: *nan gets its NaN elements (0 for integers), and
  // the pass leaves the counts Select() narrows with. `hints`: the
  // fractions of the non-NaN elements where Select()'s ranks will lie (a
  // median's 0.5; up to 8): the pass is then the window pass, which counts
  // around and gathers the elements the sorted sample places near them,
  // and Select() reads the array no more when each rank is among them (the
  // counting pass and a gathering read otherwise: hints change the time,
  // never the answer).
  [[nodiscard]] cudaError_t Count(std::uint64_t* nan, std::span<const double> hints = {});
  // bits[i] = the element of rank ranks[i] among the non-NaN elements
  // (0 = the smallest), its bytes zero-extended to 64 bits. `ranks` sorted,
  // distinct, each below length - nan, at most max_ranks of them.
  [[nodiscard]] cudaError_t Select(std::span<const std::uint64_t> ranks, std::span<std::uint64_t> bits);

  const PassStats& stats() const;

 private:
  std::unique_ptr<select::Selection> selection_;
};

// Order statistics of every segment at once (the rows or segments of a
// plan, the groups of a group-by): each segment's elements as keys, NaN
// above every number, sorted segment by segment (CUB's segmented sort),
// then any of them read back by its place in that order. Arrays below 2^31
// elements (CUB's counts are int).
class SortedSegments {
 public:
  // Scratch for `segments` segments of `array` and up to `max_places`
  // places read at once: about twice the array's keys.
  [[nodiscard]] static cudaError_t ScratchBytes(const DeviceArray& array, std::uint64_t segments,
                                                std::uint64_t max_places, std::size_t* bytes);

  SortedSegments(const DeviceArray& array, std::uint64_t segments, std::uint64_t max_places, void* scratch,
                 std::size_t scratch_bytes, cudaStream_t stream);
  ~SortedSegments();
  SortedSegments(const SortedSegments&) = delete;
  SortedSegments& operator=(const SortedSegments&) = delete;

  // Sorts segment s, elements [offsets[s], offsets[s + 1]) (host memory,
  // segments + 1 ascending entries from 0 to the length); nan[s] gets its
  // NaN elements, which sort last. Synchronizes.
  [[nodiscard]] cudaError_t Sort(std::span<const std::uint64_t> offsets, std::span<std::uint64_t> nan);
  // bits[i] = the element at place places[i] of the sorted order (a
  // segment's number of rank r is at offsets[s] + r), its bytes
  // zero-extended; a zero as +0.0 (keys order -0.0 equal to 0.0). At most
  // max_places places. Synchronizes.
  [[nodiscard]] cudaError_t Elements(std::span<const std::uint64_t> places, std::span<std::uint64_t> bits);

 private:
  std::unique_ptr<select::SortedSegmentsImpl> impl_;
};

// Top-k: the min(k, length) largest (largest) or smallest elements in
// numpy.sort's order, NaN above every number (first in the largest, last in
// the smallest), equal elements (-0.0 and 0.0 too, NaN with NaN) by the
// smaller index: bits[i] the element's bytes zero-extended, index[i] its
// position. bits and index are host memory of k entries; *count gets how
// many were written.
[[nodiscard]] cudaError_t TopKScratchBytes(const DeviceArray& array, std::uint32_t k, std::size_t* bytes);
[[nodiscard]] cudaError_t TopK(const DeviceArray& array, std::uint32_t k, bool largest, void* scratch,
                               std::size_t scratch_bytes, cudaStream_t stream, std::uint64_t* bits,
                               std::uint64_t* index, std::uint64_t* count, PassStats* stats = nullptr);
// The same entries left on the device: *bits and *index point into scratch
// (*count entries each, written on `stream` and ready once it is waited
// for), for a caller that brings them over through its own pinned memory
// (a copy into pageable memory goes through the driver's staging: at k =
// 65536, 1 MB, about 0.3 ms of the server's path on an H200 host).
[[nodiscard]] cudaError_t TopKOnDevice(const DeviceArray& array, std::uint32_t k, bool largest, void* scratch,
                                       std::size_t scratch_bytes, cudaStream_t stream, const std::uint64_t** bits,
                                       const std::uint64_t** index, std::uint64_t* count,
                                       PassStats* stats = nullptr);

// HyperLogLog over 2^precision registers (rules/agg/hll_state.h): each
// element's rules::agg::IdOf hashed by hll_detail::Mix, register =
// the hash's top bits, rank = its other bits' leading zeros plus one. While
// at most 2^precision / 4 distinct hashes were seen (the host state's
// sparse limit) the sketch is those hashes, sorted; else the registers.
struct HllSketch {
  bool dense = false;
  std::vector<std::uint8_t> registers;  // dense: 2^precision ranks
  std::vector<std::uint64_t> hashes;    // sparse: the distinct hashes, ascending
  PassStats stats;
};
[[nodiscard]] cudaError_t HllScratchBytes(const DeviceArray& array, std::uint32_t precision, std::size_t* bytes);
[[nodiscard]] cudaError_t Hll(const DeviceArray& array, std::uint32_t precision, void* scratch,
                              std::size_t scratch_bytes, cudaStream_t stream, HllSketch* out);

// DDSketch (rules/agg/ddsketch_state.h) of relative accuracy alpha (0.001
// to 0.5): each non-NaN element's bucket by ddsketch_detail::Mapping (a
// function of the value alone, the host's operations), counted per sign,
// with zeros (|x| < 2^-1000) and infinities apart: the counts the host
// state holds, so that its Deserialize and Finalize answer.
struct DdSketchCounts {
  struct Bucket {
    std::int32_t index;
    std::uint64_t count;
  };
  std::vector<Bucket> negative, positive;  // non-zero, by index ascending (of the magnitude)
  std::uint64_t zero = 0, negative_inf = 0, positive_inf = 0;
  PassStats stats;
};
[[nodiscard]] cudaError_t DdSketchScratchBytes(const DeviceArray& array, double relative_accuracy,
                                               std::size_t* bytes);
[[nodiscard]] cudaError_t DdSketch(const DeviceArray& array, double relative_accuracy, void* scratch,
                                   std::size_t scratch_bytes, cudaStream_t stream, DdSketchCounts* out);

}  // namespace tally::kernels
