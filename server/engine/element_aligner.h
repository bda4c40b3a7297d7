// Turns a byte stream cut at arbitrary points into whole elements: a chunk
// may end in the middle of an element, whose bytes are carried to the next.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>
#include <span>

#include "absl/status/status.h"

namespace tally {

class ElementAligner {
 public:
  explicit ElementAligner(std::size_t element_size) : size_(element_size) {}

  // Calls sink(std::span<const std::byte>) with whole elements, in order.
  template <typename Sink>
  absl::Status Push(std::span<const std::byte> bytes, Sink&& sink) {
    if (carried_ > 0) {
      const std::size_t take = std::min(size_ - carried_, bytes.size());
      std::memcpy(carry_.data() + carried_, bytes.data(), take);
      carried_ += take;
      bytes = bytes.subspan(take);
      if (carried_ < size_) return absl::OkStatus();
      carried_ = 0;
      if (absl::Status s = sink(std::span<const std::byte>(carry_.data(), size_)); !s.ok()) return s;
    }
    const std::size_t whole = bytes.size() - bytes.size() % size_;
    if (whole > 0) {
      if (absl::Status s = sink(bytes.first(whole)); !s.ok()) return s;
    }
    carried_ = bytes.size() - whole;
    std::memcpy(carry_.data(), bytes.data() + whole, carried_);
    return absl::OkStatus();
  }

  // Bytes of an unfinished element held back.
  std::size_t carried() const { return carried_; }

 private:
  std::size_t size_;
  std::array<std::byte, 16> carry_{};
  std::size_t carried_ = 0;
};

}  // namespace tally
