// Validity masks: which elements of an array take part in its aggregations,
// in Arrow's validity bitmap layout (LSB-first: bit i % 8 of byte i / 8 is
// element i; 1 = valid). Every op skips the elements whose bit is 0, as if
// it ran on x[valid]. Shared by the server's checks, the CPU backend, the
// kernels and the clients, so all read a bitmap the same way.
#pragma once

#include <cstdint>

#include "tally/rules/hd.h"

namespace tally::rules {

// The bytes a bitmap of `length` elements takes: ceil(length / 8). The bits
// past `length` in the last byte are ignored (Arrow leaves them unset or
// not, as the producer pleases).
TALLY_HD constexpr std::uint64_t ValidityBytes(std::uint64_t length) { return (length + 7) / 8; }

// Whether element i is valid.
TALLY_HD constexpr bool IsValid(const std::uint8_t* bitmap, std::uint64_t i) {
  return ((bitmap[i >> 3] >> (i & 7)) & 1u) != 0;
}

}  // namespace tally::rules
