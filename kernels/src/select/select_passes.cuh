// ElementPasses<T>'s launchers: the one place that turns a runtime KeyMode
// into the kernels' template argument. Included by one .cu per dtype.
#pragma once

#include <cuda_runtime.h>

#include "select/select_dispatch.h"
#include "select/select_kernels.cuh"
#include "select/window_kernels.cuh"
#include "shared_memory.cuh"
#include "tally/kernels/cuda_error.h"

namespace tally::kernels::select {

// f(std::integral_constant<KeyMode, m>{}) for the runtime mode m.
template <typename F>
cudaError_t VisitMode(KeyMode mode, F&& f) {
  switch (mode) {
    case KeyMode::kNumbers: return f(std::integral_constant<KeyMode, KeyMode::kNumbers>{});
    case KeyMode::kNanHigh: return f(std::integral_constant<KeyMode, KeyMode::kNanHigh>{});
    case KeyMode::kFlipped: return f(std::integral_constant<KeyMode, KeyMode::kFlipped>{});
  }
  return cuda::Record(cudaErrorInvalidValue, "unknown KeyMode", __FILE__, __LINE__);
}

inline bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <typename T>
cudaError_t ElementPasses<T>::FullGrid(int* blocks) {
  int device = 0, sms = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&device));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  *blocks = sms * P::CountBlocksPerSm(sizeof(T));
  return cudaSuccess;
}

template <typename T>
cudaError_t ElementPasses<T>::Sample(const T* data, std::uint64_t n, KeyMode mode, K* out, std::uint32_t count,
                                     std::uint32_t* nan_keys, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return VisitMode(mode, [&](auto m) -> cudaError_t {
    SampleKernel<T, decltype(m)::value><<<(count + 255) / 256, 256, 0, stream>>>(data, n, out, count, nan_keys);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  });
}

template <typename T>
cudaError_t ElementPasses<T>::Count(const T* data, std::uint64_t n, KeyMode mode, const Bin<K>* table,
                                    std::uint32_t* block_counts, int grid, cudaStream_t stream) {
  return VisitMode(mode, [&](auto m) -> cudaError_t {
    constexpr std::size_t shared = CountSharedBytes<K>();
    auto* kernel = CountKernel<T, decltype(m)::value>;
    TALLY_CUDA_TRY(detail::AllowMostSharedMemory(kernel));
    // Shared memory over L1: the bin table and 16K counters, ~70 KB a block.
    TALLY_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
    kernel<<<grid, P::kThreads, shared, stream>>>(data, n, Aligned16(data), table, block_counts);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  });
}

template <typename T>
cudaError_t ElementPasses<T>::Windowed(const T* data, std::uint64_t n, const Windows<K>* windows, int width, K* keys,
                                       std::uint32_t room, WindowCounts* counts, int grid, cudaStream_t stream) {
  const auto launch = [&](auto* kernel) -> cudaError_t {
    kernel<<<grid, P::kThreads, 0, stream>>>(data, n, Aligned16(data), windows, keys, room, counts);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  };
  switch (width) {
    case 1: return launch(WindowPassKernel<T, 1>);
    case 2: return launch(WindowPassKernel<T, 2>);
    case 4: return launch(WindowPassKernel<T, 4>);
    case 8: return launch(WindowPassKernel<T, 8>);
  }
  return cuda::Record(cudaErrorInvalidValue, "window width must be 1, 2, 4 or 8", __FILE__, __LINE__);
}

template <typename T>
cudaError_t ElementPasses<T>::RefineGrid(int* blocks) {
  int device = 0;
  TALLY_CUDA_TRY(cudaGetDevice(&device));
  TALLY_CUDA_TRY(cudaDeviceGetAttribute(blocks, cudaDevAttrMultiProcessorCount, device));
  return cudaSuccess;
}

template <typename T>
cudaError_t ElementPasses<T>::Refine(const T* data, std::uint64_t n, KeyMode mode, const Bin<K>* table,
                                     const std::uint32_t* map, const Segment<K>* segments,
                                     std::uint32_t* block_counts, int grid, cudaStream_t stream) {
  return VisitMode(mode, [&](auto m) -> cudaError_t {
    constexpr std::size_t shared = RefineSharedBytes<K>();
    auto* kernel = RefineKernel<T, decltype(m)::value>;
    TALLY_CUDA_TRY(detail::AllowMostSharedMemory(kernel));
    kernel<<<grid, P::kThreads, shared, stream>>>(data, n, Aligned16(data), table, map, segments, block_counts);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  });
}

template <typename T>
cudaError_t ElementPasses<T>::Gather(const T* data, std::uint64_t n, KeyMode mode, const Bin<K>* table,
                                     const std::uint32_t* map, const Segment<K>* segments, std::uint32_t count,
                                     const std::uint32_t* places, const std::uint32_t* segment_start,
                                     std::uint32_t* segment_fill, K* out, int grid, cudaStream_t stream) {
  return VisitMode(mode, [&](auto m) -> cudaError_t {
    const std::size_t shared = GatherSharedBytes<K>(places != nullptr ? count : 0);
    auto* kernel = GatherKernel<T, decltype(m)::value>;
    TALLY_CUDA_TRY(detail::AllowMostSharedMemory(kernel));
    // Shared memory over L1: three blocks of ~72 KB per SM (32-bit keys).
    TALLY_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
    kernel<<<grid, P::kThreads, shared, stream>>>(data, n, Aligned16(data), table, map, segments, count, places,
                                                  segment_start, segment_fill, out);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  });
}

template <typename T>
cudaError_t ElementPasses<T>::TopGather(const T* data, std::uint64_t n, KeyMode mode, const K* threshold,
                                        const TopListsView<K>& lists, int grid, cudaStream_t stream) {
  return VisitMode(mode, [&](auto m) -> cudaError_t {
    TopGatherKernel<T, decltype(m)::value><<<grid, P::kThreads, 0, stream>>>(data, n, Aligned16(data), threshold,
                                                                             lists);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  });
}

template <typename T>
cudaError_t ElementPasses<T>::TopTies(const T* data, std::uint64_t n, KeyMode mode, const K* threshold,
                                      const TopListsView<K>& lists, int grid, cudaStream_t stream) {
  return VisitMode(mode, [&](auto m) -> cudaError_t {
    TopTiesKernel<T, decltype(m)::value><<<grid, P::kThreads, 0, stream>>>(data, n, Aligned16(data), threshold,
                                                                           lists);
    TALLY_CUDA_CHECK_LAUNCH();
    return cudaSuccess;
  });
}

template <typename T, typename At>
cudaError_t LaunchElementBits(const T* data, At at, std::uint32_t count, std::uint64_t* bits, std::uint64_t* wide,
                              cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  ElementBitsKernel<T, At><<<(count + 255) / 256, 256, 0, stream>>>(data, at, count, bits, wide);
  TALLY_CUDA_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
cudaError_t ElementPasses<T>::ElementBits(const T* data, const std::uint32_t* index, std::uint32_t count,
                                          std::uint64_t* bits, std::uint64_t* wide, cudaStream_t stream) {
  return LaunchElementBits(data, IndexAt{index}, count, bits, wide, stream);
}

template <typename T>
cudaError_t ElementPasses<T>::WordBits(const T* data, const std::uint64_t* words, std::uint32_t count,
                                       std::uint64_t* bits, std::uint64_t* wide, cudaStream_t stream) {
  return LaunchElementBits(data, WordIndexAt{words}, count, bits, wide, stream);
}

}  // namespace tally::kernels::select
