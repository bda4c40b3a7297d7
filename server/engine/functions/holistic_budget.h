// The server's budget for what functions that keep elements hold
// (quantiles, medians, exact distinct counts: rules/agg's holistic
// functions) across every request at once: --max_holistic_bytes. A request
// that would pass it is refused with RESOURCE_EXHAUSTED naming the flag;
// the others carry on.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tally {

class HolisticBudget {
 public:
  explicit HolisticBudget(std::uint64_t limit) : limit_(limit) {}
  HolisticBudget(const HolisticBudget&) = delete;
  HolisticBudget& operator=(const HolisticBudget&) = delete;

  std::uint64_t limit() const { return limit_; }
  std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }

  // Takes `bytes` more, or refuses them (taking nothing).
  [[nodiscard]] absl::Status Charge(std::uint64_t bytes, const char* what) {
    std::uint64_t now = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ || now > limit_ - bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            what, " keeps the elements it reads: ", now + bytes, " bytes with the other requests' would pass ",
            "--max_holistic_bytes=", limit_, "; ask for fewer or shorter rows, or raise the flag."));
      }
    } while (!used_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
    return absl::OkStatus();
  }
  void Release(std::uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
};

}  // namespace tally
