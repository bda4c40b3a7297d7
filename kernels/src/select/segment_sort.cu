// tally/kernels/select.h's SortedSegments: every segment's elements as
// order-preserving keys (NaN above every number), sorted segment by segment
// by CUB's segmented sort, each segment's NaN counted at its end, and any
// element read back by its place in that order.
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <vector>

#include "select/keys.h"
#include "select/scratch.h"
#include "select/selection.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/select.h"

namespace tally::kernels {
namespace select {
namespace {

template <typename T>
__global__ void SegmentKeysKernel(const T* __restrict__ data, std::uint64_t n, KeyOf<T>* __restrict__ keys) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    keys[i] = KeyIn<KeyMode::kNanHigh>(data[i]);
  }
}

// nan[s] = the all-ones keys at the end of sorted segment s (NaN's key; no
// number of a float dtype has it). One thread a segment.
template <typename K>
__global__ void NanPerSegmentKernel(const K* __restrict__ sorted, const std::uint64_t* __restrict__ offsets,
                                    std::uint64_t segments, std::uint64_t* __restrict__ nan) {
  const std::uint64_t s = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (s >= segments) return;
  std::uint64_t lo = offsets[s], hi = offsets[s + 1];
  const std::uint64_t end = hi;
  while (lo < hi) {  // the first all-ones key
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] == static_cast<K>(~K{0})) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  nan[s] = end - lo;
}

template <typename T>
__global__ void SortedBitsKernel(const KeyOf<T>* __restrict__ sorted, const std::uint64_t* __restrict__ places,
                                 std::uint64_t count, std::uint64_t* __restrict__ bits) {
  const std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (i < count) bits[i] = static_cast<std::uint64_t>(NumberBits<T>(sorted[places[i]]));
}

// The scratch: the keys and their sort's other buffer, the offsets, the
// NaN counts, the places and their elements' bits, and CUB's temporary
// storage.
template <typename K>
struct SegmentLayout {
  K* keys = nullptr;
  K* alt = nullptr;
  std::uint64_t* offsets = nullptr;
  std::uint64_t* nan = nullptr;
  std::uint64_t* places = nullptr;
  std::uint64_t* bits = nullptr;
  void* sort_temp = nullptr;
  std::size_t sort_bytes = 0;
};

template <typename K>
cudaError_t LayOutSegments(std::uint64_t n, std::uint64_t segments, std::uint64_t max_places, Carver& c,
                           SegmentLayout<K>* at) {
  cub::DoubleBuffer<K> keys(nullptr, nullptr);
  const std::uint64_t* offsets = nullptr;
  TALLY_CUDA_TRY(cub::DeviceSegmentedSort::SortKeys(nullptr, at->sort_bytes, keys, static_cast<int>(n),
                                                    static_cast<int>(segments), offsets, offsets + 1));
  at->keys = c.Take<K>(n);
  at->alt = c.Take<K>(n);
  at->offsets = c.Take<std::uint64_t>(segments + 1);
  at->nan = c.Take<std::uint64_t>(segments);
  at->places = c.Take<std::uint64_t>(max_places);
  at->bits = c.Take<std::uint64_t>(max_places);
  at->sort_temp = c.Take<std::byte>(at->sort_bytes);
  return cudaSuccess;
}

constexpr int kThreads = 256;

unsigned GridFor(std::uint64_t n) {
  return static_cast<unsigned>(std::min<std::uint64_t>((n + kThreads - 1) / kThreads, 65535));
}

template <typename T>
class SortedSegmentsOf final : public SortedSegmentsImpl {
 public:
  using K = KeyOf<T>;
  SortedSegmentsOf(const DeviceArray& a, std::uint64_t segments, std::uint64_t max_places, void* scratch,
                   cudaStream_t stream)
      : data_(static_cast<const T*>(a.data)), n_(a.length), segments_(segments), max_places_(max_places),
        stream_(stream) {
    Carver c(scratch);
    laid_out_ = LayOutSegments<K>(n_, segments_, max_places_, c, &at_);
  }

  cudaError_t Sort(std::span<const std::uint64_t> offsets, std::span<std::uint64_t> nan) override {
    TALLY_CUDA_TRY(laid_out_);
    if (offsets.size() != segments_ + 1 || nan.size() < segments_ || offsets.front() != 0 || offsets.back() != n_) {
      return TALLY_SELECT_INVALID("SortedSegments::Sort: offsets must run from 0 to the length, segments + 1 of them");
    }
    TALLY_CUDA_TRY(cudaMemcpyAsync(at_.offsets, offsets.data(), sizeof(std::uint64_t) * offsets.size(),
                                   cudaMemcpyHostToDevice, stream_));
    SegmentKeysKernel<T><<<GridFor(n_), kThreads, 0, stream_>>>(data_, n_, at_.keys);
    TALLY_CUDA_CHECK_LAUNCH();
    cub::DoubleBuffer<K> keys(at_.keys, at_.alt);
    std::size_t bytes = at_.sort_bytes;
    TALLY_CUDA_TRY(cub::DeviceSegmentedSort::SortKeys(at_.sort_temp, bytes, keys, static_cast<int>(n_),
                                                      static_cast<int>(segments_), at_.offsets, at_.offsets + 1,
                                                      stream_));
    sorted_ = keys.Current();
    if constexpr (std::is_floating_point_v<T>) {
      NanPerSegmentKernel<K><<<GridFor(segments_), kThreads, 0, stream_>>>(sorted_, at_.offsets, segments_, at_.nan);
      TALLY_CUDA_CHECK_LAUNCH();
      TALLY_CUDA_TRY(cudaMemcpyAsync(nan.data(), at_.nan, sizeof(std::uint64_t) * segments_, cudaMemcpyDeviceToHost,
                                     stream_));
    } else {
      std::fill(nan.begin(), nan.begin() + static_cast<std::ptrdiff_t>(segments_), 0);
    }
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream_));
    return cudaSuccess;
  }

  cudaError_t Elements(std::span<const std::uint64_t> places, std::span<std::uint64_t> bits) override {
    if (sorted_ == nullptr) return TALLY_SELECT_INVALID("SortedSegments::Elements before Sort");
    if (places.size() > max_places_ || bits.size() < places.size()) {
      return TALLY_SELECT_INVALID("SortedSegments::Elements: more places than max_places");
    }
    for (const std::uint64_t p : places) {
      if (p >= n_) return TALLY_SELECT_INVALID("SortedSegments::Elements: a place past the array");
    }
    if (places.empty()) return cudaSuccess;
    TALLY_CUDA_TRY(cudaMemcpyAsync(at_.places, places.data(), sizeof(std::uint64_t) * places.size(),
                                   cudaMemcpyHostToDevice, stream_));
    SortedBitsKernel<T><<<static_cast<unsigned>((places.size() + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(
        sorted_, at_.places, places.size(), at_.bits);
    TALLY_CUDA_CHECK_LAUNCH();
    TALLY_CUDA_TRY(cudaMemcpyAsync(bits.data(), at_.bits, sizeof(std::uint64_t) * places.size(),
                                   cudaMemcpyDeviceToHost, stream_));
    TALLY_CUDA_TRY(cudaStreamSynchronize(stream_));
    return cudaSuccess;
  }

 private:
  const T* data_;
  std::uint64_t n_, segments_, max_places_;
  cudaStream_t stream_;
  SegmentLayout<K> at_;
  cudaError_t laid_out_ = cudaSuccess;
  const K* sorted_ = nullptr;
};

}  // namespace
}  // namespace select

cudaError_t SortedSegments::ScratchBytes(const DeviceArray& array, std::uint64_t segments, std::uint64_t max_places,
                                         std::size_t* bytes) {
  if (array.length >= (std::uint64_t{1} << 31) || segments == 0 || segments >= (std::uint64_t{1} << 31)) {
    return TALLY_SELECT_INVALID("SortedSegments: 1 to 2^31 - 1 elements and segments");
  }
  cudaError_t status = cudaSuccess;
  const bool known = select::VisitSelectable(array.dtype, [&](auto t) {
    using K = select::KeyOf<decltype(t)>;
    select::Carver c(nullptr);
    select::SegmentLayout<K> at;
    status = select::LayOutSegments<K>(array.length, segments, max_places, c, &at);
    *bytes = c.used();
  });
  if (!known) return TALLY_SELECT_INVALID("dtype not taken by the selection passes");
  return status;
}

SortedSegments::SortedSegments(const DeviceArray& array, std::uint64_t segments, std::uint64_t max_places,
                               void* scratch, std::size_t scratch_bytes, cudaStream_t stream) {
  std::size_t need = 0;
  if (CheckSelectable(array) != cudaSuccess || ScratchBytes(array, segments, max_places, &need) != cudaSuccess ||
      scratch_bytes < need) {
    return;
  }
  select::VisitSelectable(array.dtype, [&](auto t) {
    impl_ = std::make_unique<select::SortedSegmentsOf<decltype(t)>>(array, segments, max_places, scratch, stream);
  });
}

SortedSegments::~SortedSegments() = default;

cudaError_t SortedSegments::Sort(std::span<const std::uint64_t> offsets, std::span<std::uint64_t> nan) {
  if (!impl_) return TALLY_SELECT_INVALID("SortedSegments: unsupported array or too little scratch");
  return impl_->Sort(offsets, nan);
}

cudaError_t SortedSegments::Elements(std::span<const std::uint64_t> places, std::span<std::uint64_t> bits) {
  if (!impl_) return TALLY_SELECT_INVALID("SortedSegments: unsupported array or too little scratch");
  return impl_->Elements(places, bits);
}

}  // namespace tally::kernels
