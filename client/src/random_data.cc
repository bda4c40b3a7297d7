// xoshiro256** random arrays.
#include "tally/client/random_data.h"

#include <algorithm>
#include <cstring>

namespace tally::client {
namespace {

// SplitMix64 spreads a small seed over the generator's 256-bit state, as
// the xoshiro authors recommend.
std::uint64_t SplitMix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman & Vigna): fast enough to fill GiB in a second or
// two, and defined bit for bit, unlike std:: distributions.
class Xoshiro256 {
 public:
  explicit Xoshiro256(std::uint64_t seed) {
    for (std::uint64_t& w : s_) w = SplitMix64(seed);
  }
  std::uint64_t Next() {
    const std::uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

 private:
  static std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

// Elements between progress reports: a few milliseconds of work, so a
// progress bar moves smoothly and the calls cost nothing measurable.
constexpr std::uint64_t kProgressElements = std::uint64_t{1} << 22;

// The same draws in the same order with or without progress: blocks only
// pause the loop.
template <typename T, typename Make>
void Fill(std::byte* out, std::uint64_t length, Xoshiro256& rng, const FillProgress& progress, Make make) {
  for (std::uint64_t begin = 0; begin < length; begin += kProgressElements) {
    const std::uint64_t end = std::min(length, begin + kProgressElements);
    for (std::uint64_t i = begin; i < end; ++i) {
      const T v = make(rng.Next());
      std::memcpy(out + i * sizeof(T), &v, sizeof(T));
    }
    if (progress) progress(end, length);
  }
}

}  // namespace

HostBuffer::HostBuffer(std::uint64_t bytes)
    : data_(std::make_unique_for_overwrite<std::byte[]>(bytes)), size_(bytes) {}

void FillRandom(rules::DType dtype, std::uint64_t seed, std::byte* out, std::uint64_t length,
                const FillProgress& progress) {
  Xoshiro256 rng(seed);
  // The top bits of xoshiro256** are its best; every mapping below takes
  // them, and every one is exact (a power-of-two range), so no value is
  // more likely than another.
  switch (dtype) {
    case rules::DType::kFloat32:
      Fill<float>(out, length, rng, progress, [](std::uint64_t r) {
        return static_cast<float>(static_cast<std::int64_t>(r >> 40) - (1 << 23)) * 0x1p-23f;
      });
      break;
    case rules::DType::kFloat64:
      Fill<double>(out, length, rng, progress, [](std::uint64_t r) {
        return static_cast<double>(static_cast<std::int64_t>(r >> 11) - (std::int64_t{1} << 52)) *
               0x1p-52;
      });
      break;
    case rules::DType::kInt32:
      Fill<std::int32_t>(out, length, rng, progress, [](std::uint64_t r) {
        return static_cast<std::int32_t>(static_cast<std::int64_t>(r >> 43) - (1 << 20));
      });
      break;
    case rules::DType::kInt64:
      Fill<std::int64_t>(out, length, rng, progress, [](std::uint64_t r) {
        return static_cast<std::int64_t>(r >> 31) - (std::int64_t{1} << 32);
      });
      break;
    case rules::DType::kUInt32:
      Fill<std::uint32_t>(out, length, rng, progress,
                          [](std::uint64_t r) { return static_cast<std::uint32_t>(r >> 44); });
      break;
    case rules::DType::kUInt8:
      Fill<std::uint8_t>(out, length, rng, progress,
                         [](std::uint64_t r) { return static_cast<std::uint8_t>(r >> 56); });
      break;
    case rules::DType::kInt8:
      Fill<std::int8_t>(out, length, rng, progress, [](std::uint64_t r) { return static_cast<std::int8_t>(r >> 56); });
      break;
    case rules::DType::kInt16:
      Fill<std::int16_t>(out, length, rng, progress, [](std::uint64_t r) { return static_cast<std::int16_t>(r >> 48); });
      break;
    case rules::DType::kUInt16:
      Fill<std::uint16_t>(out, length, rng, progress, [](std::uint64_t r) { return static_cast<std::uint16_t>(r >> 48); });
      break;
    case rules::DType::kUInt64:
      Fill<std::uint64_t>(out, length, rng, progress, [](std::uint64_t r) { return r; });
      break;
    case rules::DType::kBool:
      Fill<std::uint8_t>(out, length, rng, progress, [](std::uint64_t r) { return static_cast<std::uint8_t>(r >> 63); });
      break;
    case rules::DType::kFloat16:  // [-1, 1), as float32's, rounded
      Fill<rules::Float16>(out, length, rng, progress, [](std::uint64_t r) {
        return rules::RoundTo<rules::Float16>(static_cast<double>(static_cast<std::int64_t>(r >> 40) - (1 << 23)) * 0x1p-23);
      });
      break;
    case rules::DType::kBFloat16:
      Fill<rules::BFloat16>(out, length, rng, progress, [](std::uint64_t r) {
        return rules::RoundTo<rules::BFloat16>(static_cast<double>(static_cast<std::int64_t>(r >> 40) - (1 << 23)) * 0x1p-23);
      });
      break;
  }
}

}  // namespace tally::client
