// The full passes' walk over an array: tiles of one block iteration each
// (kThreads x kVecs 16-byte vectors), dealt to the blocks in turn so that
// the grid streams the array front to back. Every thread of a block runs the
// same number of steps, invalid slots included (flagged), so that warp votes
// and block barriers inside a step are safe.
#pragma once

#include <cstdint>
#include <cstring>

namespace tally::kernels::select {

// Elements per tile: kThreads x kVecs vectors of 16 bytes.
template <typename T, int kThreads, int kVecs>
inline constexpr std::uint64_t kTile = std::uint64_t{kThreads} * kVecs * (16 / sizeof(T));

// f(x, index, valid) for every slot of every tile this block owns (x is
// meaningful only where valid), then tile_done(tile) by every thread.
// `aligned`: data is 16-byte aligned, so whole vectors are loaded; else the
// elements are loaded one by one (slower; device pointers from cudaMalloc
// are aligned, only a part of an array starting mid-vector is not).
template <typename T, int kThreads, int kVecs, typename F, typename Done>
__device__ __forceinline__ void ForEachTile(const T* __restrict__ data, std::uint64_t n, bool aligned, F&& f,
                                            Done&& tile_done) {
  constexpr int kPerVec = 16 / sizeof(T);
  constexpr std::uint64_t kTileElems = kTile<T, kThreads, kVecs>;
  const std::uint64_t tiles = (n + kTileElems - 1) / kTileElems;
  const std::uint64_t vectors = n / kPerVec;
  const uint4* __restrict__ vec = reinterpret_cast<const uint4*>(data);
  for (std::uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    if (aligned) {
      // All loads first, so each thread has kVecs in flight.
      uint4 v[kVecs];
      bool ok[kVecs];
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        const std::uint64_t at = t * (kTileElems / kPerVec) + std::uint64_t(j) * kThreads + threadIdx.x;
        ok[j] = at < vectors;
        v[j] = ok[j] ? __ldcs(vec + at) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        T e[kPerVec];
        std::memcpy(e, &v[j], sizeof e);
        const std::uint64_t first = (t * (kTileElems / kPerVec) + std::uint64_t(j) * kThreads + threadIdx.x) * kPerVec;
#pragma unroll
        for (int i = 0; i < kPerVec; ++i) f(e[i], first + i, ok[j]);
      }
      // The last few elements past the last whole vector, in the tile
      // that holds them, by the first warp (warp-uniform).
      const std::uint64_t rest = vectors * kPerVec;
      if (rest < n && rest / kTileElems == t && threadIdx.x < 32) {
        const std::uint64_t i = rest + threadIdx.x;
        const bool ok_rest = i < n;
        f(ok_rest ? data[i] : T{}, i, ok_rest);
      }
    } else {
#pragma unroll 4
      for (int j = 0; j < kVecs * kPerVec; ++j) {
        const std::uint64_t i = t * kTileElems + std::uint64_t(j) * kThreads + threadIdx.x;
        const bool ok = i < n;
        f(ok ? data[i] : T{}, i, ok);
      }
    }
    tile_done(t);
  }
}

template <typename T, int kThreads, int kVecs, typename F>
__device__ __forceinline__ void ForEach(const T* __restrict__ data, std::uint64_t n, bool aligned, F&& f) {
  ForEachTile<T, kThreads, kVecs>(data, n, aligned, f, [](std::uint64_t) {});
}

// Lanes of the calling warp below this one.
__device__ __forceinline__ unsigned LanesBelow() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// Appends one slot per lane that has `take` to a list: the warp's takers
// reserve their places with one atomic, in lane order. Every lane of the
// warp must call it (take or not). Returns the lane's place, or ~0 without.
__device__ __forceinline__ std::uint32_t WarpAppend(bool take, std::uint32_t* counter) {
  const unsigned takers = __ballot_sync(0xffffffffu, take);
  if (takers == 0) return ~0u;
  const int leader = __ffs(takers) - 1;
  std::uint32_t base = 0;
  if (static_cast<int>(threadIdx.x % 32) == leader) base = atomicAdd(counter, __popc(takers));
  base = __shfl_sync(0xffffffffu, base, leader);
  return take ? base + __popc(takers & LanesBelow()) : ~0u;
}

// A warp's entries for a list, staged in kSize slots of shared memory (the
// caller's arrays) and appended to the list kSize at a time with one atomic:
// WarpAppend's atomic a step puts every warp that takes anything on one
// counter (top-k's 164K gathered elements of 2^28, each warp's step its
// own atomic on counts[0]). Every lane of the warp calls Slot and Drain
// together.
template <int kSize>
struct WarpBuffer {
  std::uint32_t used = 0;  // entries staged, the same in every lane

  // The taking lane's slot in the buffer, in lane order (~0 for the
  // others), after draining the buffer where the takers would not fit.
  template <typename DrainFull>
  __device__ __forceinline__ std::uint32_t Slot(bool take, DrainFull&& drain) {
    const unsigned takers = __ballot_sync(0xffffffffu, take);
    if (takers == 0) return ~0u;
    const auto many = static_cast<std::uint32_t>(__popc(takers));
    if (used + many > kSize) drain();
    const std::uint32_t slot = used + __popc(takers & LanesBelow());
    used += many;
    return take ? slot : ~0u;
  }

  // The staged entries' places reserved at *counter, and copy(slot, place)
  // called for each (place as 64 bits: the counter may pass the list's
  // room, which the caller checks); the buffer is empty after.
  template <typename Count, typename Copy>
  __device__ __forceinline__ void Drain(Count* counter, Copy&& copy) {
    __syncwarp();
    const int lane = static_cast<int>(threadIdx.x % 32);
    Count place = 0;
    if (lane == 0 && used > 0) place = atomicAdd(counter, static_cast<Count>(used));
    place = __shfl_sync(0xffffffffu, place, 0);
    for (std::uint32_t i = lane; i < used; i += 32) copy(i, static_cast<std::uint64_t>(place) + i);
    __syncwarp();
    used = 0;
  }
};

// atomicMin and atomicMax on keys (std::uint64_t is unsigned long here, the
// intrinsics take unsigned long long).
__device__ __forceinline__ void AtomicMinKey(std::uint32_t* a, std::uint32_t v) { atomicMin(a, v); }
__device__ __forceinline__ void AtomicMaxKey(std::uint32_t* a, std::uint32_t v) { atomicMax(a, v); }
__device__ __forceinline__ void AtomicMinKey(std::uint64_t* a, std::uint64_t v) {
  atomicMin(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void AtomicMaxKey(std::uint64_t* a, std::uint64_t v) {
  atomicMax(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(v));
}

}  // namespace tally::kernels::select
