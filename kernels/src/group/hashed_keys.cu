// tally/kernels/group.h: NumberKeysByHash. Integer keys spread too wide
// for the direct pass are numbered through an open-addressing table of
// their distinct values: one read to insert, a sort of the distinct
// values alone, one read to look each row's number up. A sort of the rows
// themselves by 64-bit keys (OrderByKey) takes eight passes over them: on
// an H200, 2^28 rows of 16 keys spread over 64 bits took 70 ms to group
// that way, 7.7-9.0 ms numbered here (docs/performance.md, "Sparse and
// float keys on the GPU").
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <type_traits>

#include "group/dense_slots.cuh"
#include "select/scratch.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/group.h"

namespace tally::kernels {
namespace {

using dense::KeyKind;
using dense::KeyReader;

constexpr int kThreads = 256;

// An empty slot. The one key whose ordered form it is (the largest
// uint64, or the largest int64) is kept beside the table instead.
constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

// MurmurHash3's 64-bit finaliser: neighbouring keys land far apart.
__device__ std::uint64_t Mix(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// What the passes share in the scratch's first bytes.
struct Counters {
  unsigned long long distinct;  // keys inserted into the table
  unsigned int full;            // past `most` keys: the caller sorts instead
  unsigned int empty_key;       // whether the key kEmpty stands for appears
  unsigned long long empty_rank;
  unsigned long long taken;     // occupied slots taken out of the table
};

__device__ bool Full(const Counters* c) { return *static_cast<const volatile unsigned int*>(&c->full) != 0; }

template <int kBytes>
__global__ void InsertKernel(KeyReader<kBytes> keys, std::uint64_t n, unsigned long long* table, std::uint64_t mask,
                             std::uint64_t most, Counters* counters) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t o = keys.At(i);
    if (o == kEmpty) {
      if (counters->empty_key == 0) counters->empty_key = 1;
      continue;
    }
    // The table holds at least twice `most` slots, and the key past `most`
    // raises `full` before it can fill: the thread that inserts it leaves,
    // and the others leave on their next long probe. `full` is read only
    // every 64 probes: read once a row, that one word took half the
    // numbering's time (2^28 rows of 16 keys on an H200: 10.5-11.0 ms,
    // 4.5-5.4 without).
    std::uint64_t slot = Mix(o) & mask;
    for (unsigned probes = 1;; ++probes) {
      const unsigned long long held = table[slot];
      if (held == o) break;
      if (held == kEmpty) {
        const unsigned long long was = atomicCAS(&table[slot], kEmpty, o);
        if (was == kEmpty) {
          if (atomicAdd(&counters->distinct, 1ull) < most) break;
          atomicExch(&counters->full, 1u);
          return;
        }
        if (was == o) break;
      }
      if (probes % 64 == 0 && Full(counters)) return;
      slot = (slot + 1) & mask;
    }
  }
}

// The occupied slots and their keys, in no order (they are sorted next):
// a warp's at once, by one atomic.
__global__ void TakeSlotsKernel(const unsigned long long* table, std::uint64_t capacity, Counters* counters,
                                std::uint32_t* slots, std::uint64_t* keys) {
  const unsigned lane = threadIdx.x & 31;
  for (std::uint64_t base = (blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x) & ~std::uint64_t{31};
       base < capacity; base += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t slot = base + lane;
    const unsigned long long key = slot < capacity ? table[slot] : kEmpty;
    const unsigned taken = __ballot_sync(0xffffffffu, key != kEmpty);
    if (taken == 0) continue;
    unsigned long long first = 0;
    if (lane == 0) first = atomicAdd(&counters->taken, static_cast<unsigned long long>(__popc(taken)));
    first = __shfl_sync(0xffffffffu, first, 0);
    if (key != kEmpty) {
      const std::uint64_t at = first + __popc(taken & ((1u << lane) - 1));
      slots[at] = static_cast<std::uint32_t>(slot);
      keys[at] = key;
    }
  }
}

// rank[slot] = the slot's key's place among the sorted keys.
__global__ void RankSlotsKernel(const std::uint32_t* sorted_slots, std::uint64_t count, std::uint32_t* rank) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    rank[sorted_slots[i]] = static_cast<std::uint32_t>(i);
  }
}

template <int kBytes>
__global__ void LookUpKernel(KeyReader<kBytes> keys, std::uint64_t n, const unsigned long long* table,
                             std::uint64_t mask, const std::uint32_t* rank, const Counters* counters,
                             std::uint32_t* out) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    const std::uint64_t o = keys.At(i);
    if (o == kEmpty) {
      out[i] = static_cast<std::uint32_t>(counters->empty_rank);
      continue;
    }
    std::uint64_t slot = Mix(o) & mask;
    while (table[slot] != o) slot = (slot + 1) & mask;
    out[i] = rank[slot];
  }
}

int Blocks(std::uint64_t n) {
  const std::uint64_t wanted = (n + kThreads - 1) / kThreads;
  const std::uint64_t most = std::uint64_t{static_cast<unsigned>(dense::SmCount())} * 8;
  return static_cast<int>(wanted < 1 ? 1 : (wanted < most ? wanted : most));
}

// The table holds at most half its slots, a power of two.
std::uint64_t Capacity(std::uint64_t most_groups) { return std::bit_ceil(std::max<std::uint64_t>(2 * most_groups, 1024)); }

struct Layout {
  Counters* counters = nullptr;
  unsigned long long* table = nullptr;
  std::uint32_t* rank = nullptr;     // per slot
  std::uint32_t* slots[2] = {nullptr, nullptr};  // occupied slots, then sorted by key
  std::uint64_t* keys[2] = {nullptr, nullptr};   // their keys, then sorted
  void* cub = nullptr;
  std::size_t cub_bytes = 0;
};

cudaError_t LayOut(std::uint64_t most_groups, void* base, Layout* at) {
  select::Carver c(base);
  const std::uint64_t capacity = Capacity(most_groups);
  at->counters = c.Take<Counters>(1);
  at->table = c.Take<unsigned long long>(capacity);
  at->rank = c.Take<std::uint32_t>(capacity);
  // Slots taken out only where at most `most_groups` keys were inserted.
  for (int b = 0; b < 2; ++b) {
    at->slots[b] = c.Take<std::uint32_t>(most_groups);
    at->keys[b] = c.Take<std::uint64_t>(most_groups);
  }
  cub::DoubleBuffer<std::uint64_t> k(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> v(nullptr, nullptr);
  TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, at->cub_bytes, k, v, static_cast<int>(most_groups)));
  at->cub = c.Take<std::byte>(at->cub_bytes);
  at->cub_bytes = c.used();
  return cudaSuccess;
}

bool Taken(const GroupKeys& keys, int* bytes, KeyKind* kind) {
  return dense::KeyLayout(keys.dtype, bytes, kind) && keys.rows != 0 && keys.rows < (std::uint64_t{1} << 31);
}

template <int kBytes>
cudaError_t Number(KeyReader<kBytes> reader, std::uint64_t n, std::uint64_t most_groups, const Layout& at,
                   cudaStream_t stream, std::uint32_t* numbers_out, HashedKeys* out) {
  const std::uint64_t capacity = Capacity(most_groups);
  TALLY_CUDA_TRY(cudaMemsetAsync(at.counters, 0, sizeof(Counters), stream));
  TALLY_CUDA_TRY(cudaMemsetAsync(at.table, 0xff, capacity * sizeof(unsigned long long), stream));
  InsertKernel<kBytes><<<Blocks(n), kThreads, 0, stream>>>(reader, n, at.table, capacity - 1, most_groups,
                                                             at.counters);
  TALLY_CUDA_CHECK_LAUNCH();
  Counters counters{};
  TALLY_CUDA_TRY(cudaMemcpyAsync(&counters, at.counters, sizeof counters, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  const std::uint64_t distinct = counters.distinct;
  if (counters.full != 0 || distinct + counters.empty_key > most_groups) {
    out->groups = 0;
    out->too_many = true;
    return cudaSuccess;
  }
  // The occupied slots and their keys, sorted by key; each slot's rank.
  std::size_t bytes = 0;
  TakeSlotsKernel<<<Blocks(capacity), kThreads, 0, stream>>>(at.table, capacity, at.counters, at.slots[0],
                                                              at.keys[0]);
  TALLY_CUDA_CHECK_LAUNCH();
  cub::DoubleBuffer<std::uint64_t> keys(at.keys[0], at.keys[1]);
  cub::DoubleBuffer<std::uint32_t> slots(at.slots[0], at.slots[1]);
  if (distinct > 1) {
    TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, slots, static_cast<int>(distinct), 0, 64,
                                                   stream));
    TALLY_CUDA_TRY(cub::DeviceRadixSort::SortPairs(at.cub, bytes, keys, slots, static_cast<int>(distinct), 0, 64,
                                                   stream));
  }
  RankSlotsKernel<<<Blocks(distinct), kThreads, 0, stream>>>(slots.Current(), distinct, at.rank);
  TALLY_CUDA_CHECK_LAUNCH();
  // The key kEmpty stands for is the largest: its group is the last.
  const unsigned long long empty_rank = distinct;
  TALLY_CUDA_TRY(cudaMemcpyAsync(&at.counters->empty_rank, &empty_rank, sizeof empty_rank, cudaMemcpyHostToDevice,
                                 stream));
  LookUpKernel<kBytes><<<Blocks(n), kThreads, 0, stream>>>(reader, n, at.table, capacity - 1, at.rank, at.counters,
                                                             numbers_out);
  TALLY_CUDA_CHECK_LAUNCH();
  std::vector<std::uint64_t> ordered(distinct);
  TALLY_CUDA_TRY(cudaMemcpyAsync(ordered.data(), keys.Current(), distinct * sizeof(std::uint64_t),
                                 cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  if (counters.empty_key != 0) ordered.push_back(kEmpty);
  // Back from the ordered form to the key's bytes (OrderedKey's inverse).
  out->groups = ordered.size();
  out->too_many = false;
  out->keys.resize(ordered.size());
  for (std::size_t g = 0; g < ordered.size(); ++g) {
    std::uint64_t raw = ordered[g];
    if (reader.kind == KeyKind::kSigned) raw ^= std::uint64_t{1} << 63;
    if constexpr (kBytes < 8) raw &= (std::uint64_t{1} << (8 * kBytes)) - 1;
    out->keys[g] = raw;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t HashKeysScratchBytes(const GroupKeys& keys, std::uint64_t most_groups, std::size_t* bytes) {
  int width = 0;
  KeyKind kind{};
  if (!Taken(keys, &width, &kind) || most_groups == 0 || most_groups > kMaxHashedGroups) {
    return cuda::Record(cudaErrorInvalidValue, "HashKeysScratchBytes: keys not taken", __FILE__, __LINE__);
  }
  Layout at;
  TALLY_CUDA_TRY(LayOut(most_groups, nullptr, &at));
  *bytes = at.cub_bytes;
  return cudaSuccess;
}

cudaError_t NumberKeysByHash(const GroupKeys& keys, std::uint64_t most_groups, void* scratch, std::size_t scratch_bytes,
                             cudaStream_t stream, std::uint32_t* numbers_out, HashedKeys* out) {
  std::size_t need = 0;
  TALLY_CUDA_TRY(HashKeysScratchBytes(keys, most_groups, &need));
  if (scratch_bytes < need) {
    return cuda::Record(cudaErrorInvalidValue, "NumberKeysByHash: too little scratch", __FILE__, __LINE__);
  }
  int width = 0;
  KeyKind kind{};
  (void)Taken(keys, &width, &kind);
  Layout at;
  TALLY_CUDA_TRY(LayOut(most_groups, scratch, &at));
  return dense::VisitKeyWidth(width, [&](auto w) -> cudaError_t {
    constexpr int kBytes = decltype(w)::value;
    return Number<kBytes>(KeyReader<kBytes>{keys.data, kind}, keys.rows, most_groups, at, stream, numbers_out, out);
  });
}

}  // namespace tally::kernels
