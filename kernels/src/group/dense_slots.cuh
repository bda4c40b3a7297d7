// The slots group-by's direct passes accumulate in (dense_groups.cu for
// keys in a small range, partitioned_groups.cu for wider ones), in shared
// or global memory alike. Every accumulation is an integer one, so the
// answer does not depend on the order the threads add in: counts and NaN
// counts; the extremes as order-preserving integers; the sums in fixed
// point (tally/rules/keyed_sums.h: a signed high word and an unsigned low
// word that each sum within 64 bits for up to 2^31 rows).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "tally/rules/dtype.h"
#include "tally/rules/keyed_sums.h"
#include "tally/rules/order_key.h"

namespace tally::kernels::dense {

// Struct of arrays, one entry per key: 44 bytes a key.
struct Slots {
  unsigned long long* hi;     // signed high words of the fixed-point sums
  unsigned long long* lo;     // low 32-bit words, summed
  unsigned long long* count;  // elements
  unsigned long long* low;    // ordered-integer minima (all ones: none yet)
  unsigned long long* high;   // ordered-integer maxima
  unsigned int* special;      // NaN count in the high 30 bits; bit 0 +inf seen, bit 1 -inf seen
};
inline constexpr std::size_t kSlotBytes = 5 * sizeof(unsigned long long) + sizeof(unsigned int);

// Slots carved from `words` (shared or global memory) for `n` keys.
__host__ __device__ inline Slots SlotsAt(unsigned long long* words, std::uint64_t n) {
  Slots s;
  s.hi = words;
  s.lo = words + n;
  s.count = words + 2 * n;
  s.low = words + 3 * n;
  s.high = words + 4 * n;
  s.special = reinterpret_cast<unsigned int*>(words + 5 * n);
  return s;
}

// The slots of `s` from key `first` on.
__host__ __device__ inline Slots SlotsFrom(const Slots& s, std::uint64_t first) {
  return Slots{s.hi + first, s.lo + first, s.count + first, s.low + first, s.high + first, s.special + first};
}

// One key's accumulation, read out of slots or folded from several.
struct Slot {
  unsigned long long hi = 0, lo = 0, count = 0, low = rules::keyed::kNoLow, high = rules::keyed::kNoHigh;
  unsigned int special = 0;

  __device__ static Slot Load(const Slots& s, std::uint64_t j) {
    return Slot{s.hi[j], s.lo[j], s.count[j], s.low[j], s.high[j], s.special[j]};
  }
  // The sums wrap as the global ones do; NaN counts add, infinities or.
  __device__ void Fold(const Slot& o) {
    hi += o.hi;
    lo += o.lo;
    count += o.count;
    low = o.low < low ? o.low : low;
    high = o.high > high ? o.high : high;
    special = ((special & ~3u) + (o.special & ~3u)) | ((special | o.special) & 3u);
  }
  __device__ void Store(const Slots& s, std::uint64_t j) const {
    s.hi[j] = hi;
    s.lo[j] = lo;
    s.count[j] = count;
    s.low[j] = low;
    s.high[j] = high;
    s.special[j] = special;
  }
  // Added into slot j of `s` by atomics (other blocks add to it too).
  __device__ void AtomicAdd(const Slots& s, std::uint64_t j) const {
    atomicAdd(&s.lo[j], lo);
    atomicAdd(&s.count[j], count);
    AtomicAddAllButLow(s, j);
  }
  // The same but for the low word and the count, which a caller sent
  // already (Packed::AtomicAddLow); what adds nothing is not sent.
  __device__ void AtomicAddAllButLow(const Slots& s, std::uint64_t j) const {
    if (hi != 0) atomicAdd(&s.hi[j], hi);
    if (low != rules::keyed::kNoLow) atomicMin(&s.low[j], low);
    if (high != rules::keyed::kNoHigh) atomicMax(&s.high[j], high);
    if ((special & ~3u) != 0) atomicAdd(&s.special[j], special & ~3u);
    if ((special & 3u) != 0) atomicOr(&s.special[j], special & 3u);
  }
};

// How a key dtype's elements become OrderedKey's unsigned numbers: a test
// for bool, a sign extension for the signed integers, nothing for the
// unsigned ones. The same for every element, so a kernel branches on it
// after its loads, not around them.
enum class KeyKind : int { kBool, kSigned, kUnsigned };

// A key column read as raw little-endian words of kBytes (1, 2, 4 or 8)
// bytes: the kernels are instantiated per width, not per key dtype.
template <int kBytes>
struct KeyReader {
  const void* keys;
  KeyKind kind;

  __device__ std::uint64_t Raw(std::uint64_t i) const {
    if constexpr (kBytes == 1) return static_cast<const std::uint8_t*>(keys)[i];
    if constexpr (kBytes == 2) return static_cast<const std::uint16_t*>(keys)[i];
    if constexpr (kBytes == 4) return static_cast<const std::uint32_t*>(keys)[i];
    if constexpr (kBytes == 8) return static_cast<const std::uint64_t*>(keys)[i];
  }
  __device__ std::uint64_t Ordered(std::uint64_t raw) const {
    if (kind == KeyKind::kBool) return raw != 0;
    if (kind == KeyKind::kSigned) {
      constexpr int kShift = 64 - 8 * kBytes;
      const auto extended = static_cast<std::int64_t>(raw << kShift) >> kShift;
      return static_cast<std::uint64_t>(extended) ^ (std::uint64_t{1} << 63);
    }
    return raw;
  }
  // Element i's key as an unsigned number that orders as the key does.
  __device__ std::uint64_t At(std::uint64_t i) const { return Ordered(Raw(i)); }
};

// The key dtypes the direct passes take: their width and kind; false for
// the others.
inline bool KeyLayout(rules::DType dtype, int* bytes, KeyKind* kind) {
  switch (dtype) {
    case rules::DType::kBool: *bytes = 1, *kind = KeyKind::kBool; return true;
    case rules::DType::kInt8: *bytes = 1, *kind = KeyKind::kSigned; return true;
    case rules::DType::kInt16: *bytes = 2, *kind = KeyKind::kSigned; return true;
    case rules::DType::kInt32: *bytes = 4, *kind = KeyKind::kSigned; return true;
    case rules::DType::kInt64: *bytes = 8, *kind = KeyKind::kSigned; return true;
    case rules::DType::kUInt8: *bytes = 1, *kind = KeyKind::kUnsigned; return true;
    case rules::DType::kUInt16: *bytes = 2, *kind = KeyKind::kUnsigned; return true;
    case rules::DType::kUInt32: *bytes = 4, *kind = KeyKind::kUnsigned; return true;
    case rules::DType::kUInt64: *bytes = 8, *kind = KeyKind::kUnsigned; return true;
    default: return false;
  }
}
// f(std::integral_constant<int, bytes>{}) for a key width of 1, 2, 4 or 8.
template <typename F>
cudaError_t VisitKeyWidth(int bytes, F&& f) {
  switch (bytes) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}
// A group's key as KeyOrder::keys has it (the element's bytes in the low
// bytes; a signed key sign-extended), from its ordered form.
__device__ inline std::uint64_t KeyBits(std::uint64_t ordered, KeyKind kind) {
  return kind == KeyKind::kSigned ? ordered ^ (std::uint64_t{1} << 63) : ordered;
}

// A word other threads update by atomics, read as it is now.
__device__ inline unsigned long long Peek(const unsigned long long* word) {
  return *static_cast<const volatile unsigned long long*>(word);
}
__device__ inline unsigned Peek(const unsigned* word) { return *static_cast<const volatile unsigned*>(word); }

// 2^(scale - 32) as two normal doubles (rules::keyed::FixedUnit), for
// FixedWordsOf: the kernels take it in place of the scale.
struct FixedStep {
  double first = 1.0, second = 1.0;
  static FixedStep Of(int scale) {
    const rules::keyed::FixedUnit u = rules::keyed::FixedUnit::Of(scale);
    return FixedStep{u.first, u.second};
  }
};

// v x 2^scale (v finite) as rules::keyed::ToFixed's two words, the same
// bits, by float64 arithmetic instead of 128-bit integers (about 10% of
// the lane-copies pass, H200): d = v x 2^(scale - 32) exactly (a product
// below float64's normal range is one whose fixed-point value rounds to 0
// either way); its floor, the high word; the rest times 2^32, exact, then
// rounded to an integer as ToFixed128 rounds (to nearest, ties to even:
// high x 2^32 is even), by adding and taking away 1.5 x 2^52; a rest that
// rounds up to 2^32 carries into the high word.
__device__ inline void FixedWordsOf(double v, const FixedStep& step, long long* hi, unsigned long long* lo) {
  const double d = __dmul_rn(__dmul_rn(v, step.first), step.second);
  const double h = floor(d);
  const double rest = __dmul_rn(__dsub_rn(d, h), 0x1p32);
  const double rounded = __dsub_rn(__dadd_rn(rest, 0x1.8p52), 0x1.8p52);
  long long high = __double2ll_rz(h);
  unsigned long long low = static_cast<unsigned long long>(__double2ll_rz(rounded));
  if (low == (1ull << 32)) {
    ++high;
    low = 0;
  }
  *hi = high;
  *lo = low;
}

// x added to a 64-bit word in shared memory by two 32-bit atomics: the
// hardware adds 32-bit words in shared memory, where a 64-bit atomicAdd is
// a read and a compare-and-swap loop (LDS.64, ATOMS.CAST.SPIN.64 in the
// SASS of sm_90), which conflicting lanes repeat. The low half's add
// returns what the half held, so each add knows whether it wrapped and
// carries into the high half itself: the word holds the sum modulo 2^64
// once every add is done (read after a barrier, never between).
__device__ inline void AddWideShared(unsigned long long* word, unsigned long long x) {
  auto* half = reinterpret_cast<unsigned int*>(word);  // little-endian: the low half first
  const unsigned int low = static_cast<unsigned int>(x);
  const unsigned int before = atomicAdd(&half[0], low);
  const unsigned int carry = low > ~before ? 1u : 0u;
  const unsigned int high = static_cast<unsigned int>(x >> 32) + carry;
  if (high != 0) atomicAdd(&half[1], high);
}

// The extremes of values of type T as a slot in shared memory keeps them,
// and as OrderedDouble's words (the global slots'), the slot's sentinels
// (no element yet: all ones for the least, 0 for the greatest, neither an
// ordered number's word) kept as rules::keyed::kNoLow and kNoHigh. A
// float32 column's are its numbers' 32-bit keys (rules::NumberKey: -0.0 as
// +0.0, as OrderedDouble): a read and a compare of one word a row where
// the double's take two.
template <typename T>
struct Extremes;
template <>
struct Extremes<float> {
  using Word = unsigned;
  __device__ static Word Of(float v) { return rules::NumberKey(v); }
  __device__ static unsigned long long Widened(Word o) {
    if (o == ~0u) return rules::keyed::kNoLow;
    if (o == 0u) return rules::keyed::kNoHigh;
    return rules::keyed::OrderedDouble(static_cast<double>(rules::NumberOfKey<float>(o)));
  }
};
template <>
struct Extremes<double> {
  using Word = unsigned long long;
  __device__ static Word Of(double v) { return rules::keyed::OrderedDouble(v); }
  __device__ static unsigned long long Widened(Word o) { return o; }
};

// The rows one slot of shared memory may take: its count rides in the top
// 16 bits of its low word (Packed).
struct PackedRows {
  static constexpr int kCountShift = 48;
  static constexpr std::uint64_t kMaxRows = (std::uint64_t{1} << 16) - 1;
};

// A block's slots in shared memory for values of type T: Slots but the
// count, which rides in the top 16 bits of the low word (a slot's rows
// must be fewer than 2^16: its low words, each below 2^32, then sum below
// 2^48), so that an element takes two atomics and, for most, two plain
// reads of its extremes; the extremes as Extremes<T> keeps them.
template <typename T>
struct Packed : PackedRows {
  using E = typename Extremes<T>::Word;
  unsigned long long* hi;
  unsigned long long* lo;  // the count x 2^48 + the low words' sum
  E* low;
  E* high;
  unsigned int* special;
  static constexpr std::size_t kBytes = 2 * sizeof(unsigned long long) + 2 * sizeof(E) + sizeof(unsigned int);

  __device__ static Packed At(unsigned long long* words, std::uint64_t n) {
    E* low = reinterpret_cast<E*>(words + 2 * n);
    return Packed{{}, words, words + n, low, low + n, reinterpret_cast<unsigned int*>(low + 2 * n)};
  }
  __device__ void Clear(std::uint64_t j) const {
    hi[j] = 0;
    lo[j] = 0;
    low[j] = static_cast<E>(~E{0});
    high[j] = 0;
    special[j] = 0;
  }
  __device__ void Add(std::uint64_t j, T value, const FixedStep& step) const {
    constexpr unsigned long long kOne = 1ull << kCountShift;
    const double v = value;
    if (isnan(v)) {
      AddWideShared(&lo[j], kOne);
      atomicAdd(&special[j], 4u);
      return;
    }
    if (isinf(v)) {
      AddWideShared(&lo[j], kOne);
      atomicOr(&special[j], v > 0 ? 1u : 2u);
    } else {
      long long h;
      unsigned long long l;
      FixedWordsOf(v, step, &h, &l);
      AddWideShared(&hi[j], static_cast<unsigned long long>(h));
      AddWideShared(&lo[j], l + kOne);
    }
    const E o = Extremes<T>::Of(value);
    // An extreme changes for few of a slot's elements: a plain read first
    // spares the atomic for the rest (a stale read only costs the atomic).
    if (o < Peek(&low[j])) atomicMin(&low[j], o);
    if (o > Peek(&high[j])) atomicMax(&high[j], o);
  }
  // Add for a slot no other thread updates (a thread's own copy): plain
  // reads and writes, the same words Add leaves.
  __device__ void AddOwned(std::uint64_t j, T value, const FixedStep& step) const {
    constexpr unsigned long long kOne = 1ull << kCountShift;
    const double v = value;
    if (isnan(v)) {
      lo[j] += kOne;
      special[j] += 4u;
      return;
    }
    if (isinf(v)) {
      lo[j] += kOne;
      special[j] |= v > 0 ? 1u : 2u;
    } else {
      long long h;
      unsigned long long l;
      FixedWordsOf(v, step, &h, &l);
      hi[j] += static_cast<unsigned long long>(h);
      lo[j] += l + kOne;
    }
    const E o = Extremes<T>::Of(value);
    if (o < low[j]) low[j] = o;
    if (o > high[j]) high[j] = o;
  }
  __device__ Slot Load(std::uint64_t j) const {
    const unsigned long long l = lo[j];
    return Slot{hi[j], l & ((1ull << kCountShift) - 1), l >> kCountShift, Extremes<T>::Widened(low[j]),
                Extremes<T>::Widened(high[j]), special[j]};
  }
  // Slot j's low word and count added into slot `to` of `global` by
  // atomics and cleared here, before the count could pass its 16 bits; the
  // rest stays (Slot::AtomicAddAllButLow sends it later).
  __device__ void AtomicAddLow(std::uint64_t j, const Slots& global, std::uint64_t to) const {
    const unsigned long long l = lo[j];
    if (l == 0) return;
    atomicAdd(&global.count[to], l >> kCountShift);
    atomicAdd(&global.lo[to], l & ((1ull << kCountShift) - 1));
    lo[j] = 0;
  }
};

// Every slot of `s` as no element (a template, so that each file that
// launches it has its own).
template <typename = void>
__global__ void InitSlotsKernel(Slots s, std::uint64_t range) {
  for (std::uint64_t j = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; j < range;
       j += std::uint64_t{gridDim.x} * blockDim.x) {
    Slot{}.Store(s, j);
  }
}

// The current device's SMs (132 where it cannot be asked).
inline int SmCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 132;
  }
  return sms;
}

}  // namespace tally::kernels::dense
