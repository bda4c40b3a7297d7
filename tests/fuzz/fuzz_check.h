// What the fuzz harnesses share: a check that aborts with a message (so that
// libFuzzer, or the corpus replay under ctest, reports the input), and a
// reader that turns fuzz bytes into the values a harness needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#define TALLY_FUZZ_CHECK(condition, what)                                                    \
  do {                                                                                      \
    if (!(condition)) {                                                                     \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #condition, \
                   std::string_view(what).data());                                          \
      std::abort();                                                                         \
    }                                                                                       \
  } while (false)

namespace tally::fuzz {

// Takes values from the front of the fuzz input; past its end every value is
// zero, so any input decodes to something.
class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t Byte() { return at_ < size_ ? data_[at_++] : 0; }
  bool Bool() { return Byte() & 1; }

  template <typename T>
  T Raw() {
    unsigned char bytes[sizeof(T)] = {};
    for (unsigned char& b : bytes) b = Byte();
    T value;
    std::memcpy(&value, bytes, sizeof(T));
    return value;
  }

  // Mostly small numbers, which is where the limits are, sometimes any
  // 64-bit value.
  std::uint64_t Count() {
    const std::uint8_t how = Byte();
    if (how < 0xc0) return how;
    if (how < 0xf0) return Raw<std::uint16_t>();
    return Raw<std::uint64_t>();
  }

  // Small integers, halves, or any bit pattern (NaNs, infinities, denormals).
  double Double() {
    const std::uint8_t how = Byte();
    if (how < 0x80) return static_cast<double>(static_cast<std::int8_t>(Byte()));
    if (how < 0xc0) return static_cast<double>(static_cast<std::int8_t>(Byte())) / 2;
    return Raw<double>();
  }

  std::size_t remaining() const { return size_ - at_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

}  // namespace tally::fuzz
